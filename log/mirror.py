"""Stream mirrors: the `mirror` config, the reference's refusals, and the update rule.

A mirror is a read-only copy of one origin that keeps the origin's sequence
numbers, so it has no subjects, sources or first sequence of its own, and
nothing that would add messages the origin does not have (counters, atomic
batches, schedules, subject delete markers). Its `mirror` block has the fields
of a source; it is parsed by the same code (`log.sources`), and copied by the
same links (`ingest.server.jetstream.sources`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ingest.parser.subjects import subjects_overlap
from log import errors
from log.errors import ApiError
from log.sources import StreamSource, check_transform, consumer_invalid, parse_source, valid_name


class MirrorFeatures(Protocol):
    """The parts of a stream config a mirror rules out (`log.config.StreamConfig`)."""

    @property
    def first_seq(self) -> int: ...
    @property
    def subjects(self) -> Sequence[str]: ...
    @property
    def sources(self) -> Sequence[StreamSource]: ...
    @property
    def allow_msg_counter(self) -> bool: ...
    @property
    def allow_atomic(self) -> bool: ...
    @property
    def allow_msg_schedules(self) -> bool: ...
    @property
    def subject_delete_marker_ttl(self) -> int: ...


def invalid_name() -> ApiError:
    return ApiError(400, 10142, "mirrored stream name is invalid")


def parse_mirror(raw: Mapping[str, Any]) -> StreamSource | None:
    body = raw.get("mirror")
    if body is None:
        return None
    return parse_source(body, invalid_name())


def check_create(raw: Mapping[str, Any]) -> None:
    """A create (not an update) asking for `mirror_direct` needs a mirror; the reference
    checks this before anything else in the config."""
    if raw.get("mirror_direct") and raw.get("mirror") is None:
        raise errors.invalid_config("stream has no mirror but does have mirror direct")


def check_mirror(mirror: StreamSource | None, cfg: MirrorFeatures) -> None:
    """The reference's refusals for a mirror, in its order (before the sources' checks)."""
    if mirror is None:
        return
    if cfg.first_seq > 0:
        raise ApiError(400, 10143, "stream mirrors can not have first sequence configured")
    if cfg.subjects:
        raise ApiError(400, 10034, "stream mirrors can not contain subjects")
    if cfg.sources:
        raise ApiError(400, 10031, "stream mirrors can not also contain other sources")
    if cfg.allow_msg_counter:
        raise ApiError(400, 10173, "stream mirrors can not also calculate counters")
    if cfg.allow_atomic:
        raise ApiError(400, 10198, "stream mirrors can not also use atomic publishing")
    if cfg.allow_msg_schedules:
        raise ApiError(400, 10186, "stream mirrors can not also schedule messages")
    if consumer_invalid(mirror):
        raise ApiError(400, 10213, "stream mirror consumer config is invalid")
    if mirror.filter_subject and mirror.subject_transforms:
        raise ApiError(
            400,
            10150,
            "mirror with multiple subject transforms cannot also have a single subject filter",
        )
    if cfg.subject_delete_marker_ttl > 0:
        raise errors.invalid_config("subject delete markers forbidden on mirrors")
    transforms = mirror.subject_transforms
    for i, t in enumerate(transforms):
        check_transform(t, "mirror", invalid=10151, unmappable=10154)
        if any(
            j != i and subjects_overlap(t.src or ">", o.src or ">")
            for j, o in enumerate(transforms)
        ):
            raise ApiError(400, 10152, "mirror subject filters can not overlap")
    if mirror.external is None and not valid_name(mirror.name):
        raise invalid_name()


def check_mirror_update(old: StreamSource | None, new: StreamSource | None) -> None:
    """A mirror's origin and filters are fixed; dropping `mirror` promotes the copy to a
    normal stream (it keeps its messages and numbering), which the reference allows."""
    if new is not None and new != old:
        raise ApiError(400, 10055, "stream mirror configuration can not be updated")
