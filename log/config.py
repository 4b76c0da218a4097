"""Stream configuration: the API's JSON in, defaults and validation as the reference applies them.

A client compares the config it sent with the one the server echoes (nats.go
does this on create-or-update), so defaults must be filled exactly like
nats-server's `checkStreamCfg`, and refusals must carry the same codes and
words. Fields jetlake does not know are refused rather than accepted and silently
ignored.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ingest.parser import mapping
from ingest.parser.headers import header_value
from ingest.parser.subjects import is_subset, is_valid_subject, subjects_overlap
from log import api_levels, errors
from log.mirror import check_mirror, check_mirror_update, parse_mirror
from log.request_fields import Fields, fields, refuse_unknown
from log.sources import StreamSource, check_externals, check_sources, origins, parse_sources

_FIELDS = Fields("StreamConfigRequest")
_type_error = _FIELDS.type_error
_str = _FIELDS.str
_int = _FIELDS.int
_uint = _FIELDS.uint
_bool = _FIELDS.bool
_enum = _FIELDS.enum
_str_list = _FIELDS.str_list
_dict = _FIELDS.dict

MAX_NAME_LEN = 255
MAX_DESCRIPTION_LEN = 4 * 1024
MAX_METADATA_LEN = 128 * 1024
DEFAULT_DUPLICATE_WINDOW = 120_000_000_000
MIN_WINDOW = 100_000_000  # 100ms: the reference's floor for max_age and duplicate_window
# Highest JetStream API level whose features jetlake implements, the reference's (2.15):
# `log.api_levels` records what each level above 2 brought.
API_LEVEL = 5
REQUIRED_LEVEL_KEY = "_nats.req.level"
REQUIRED_LEVEL_HEADER = b"Nats-Required-Api-Level"
_GO_INT = re.compile(rb"[+-]?\d+")

RETENTIONS = ("limits", "interest", "workqueue")
DISCARDS = ("old", "new")
STORAGES = ("file", "memory")
COMPRESSIONS = ("none", "s2")
_RESERVED = ("$JS.>", "$JSC.>", "$NRG.>")
_TRANSFORM = fields("src dest")
_SOURCE = fields(
    "name opt_start_seq opt_start_time filter_subject",
    subject_transforms=_TRANSFORM,
    external=fields("api deliver"),
    consumer=fields("name deliver_subject"),
)
# StreamConfigRequest's fields, at every depth: any other is refused
_SCHEMA = fields(
    "name description subjects retention max_consumers max_msgs max_bytes max_age"
    " max_msgs_per_subject max_msg_size discard storage num_replicas no_ack duplicate_window"
    " compression first_seq allow_direct mirror_direct discard_new_per_subject sealed"
    " deny_delete deny_purge allow_rollup_hdrs allow_msg_ttl subject_delete_marker_ttl"
    " allow_msg_counter allow_atomic allow_msg_schedules persist_mode allow_batched metadata"
    " pedantic",
    placement=fields("cluster tags preferred"),
    mirror=_SOURCE,
    sources=_SOURCE,
    subject_transform=_TRANSFORM,
    republish=fields("src dest headers_only"),
    consumer_limits=fields("inactive_threshold max_ack_pending"),
)


def segment_codec(compression: str) -> str | None:
    """jetlake's reading of `compression: s2`: sealed segments in Arrow's own zstd, which
    pyarrow and DuckDB decode (S2 is not an Arrow codec)."""
    return "zstd" if compression == "s2" else None


def above_api_level(hdr: bytes | None) -> bool:
    """Whether a request's Nats-Required-Api-Level asks for more than jetlake implements.

    A level that is not a number is refused too, as the reference refuses it: a
    client that needs a feature must not get a server that silently lacks it.
    """
    value = header_value(hdr, REQUIRED_LEVEL_HEADER)
    if not value:
        return False
    return _GO_INT.fullmatch(value) is None or int(value) > API_LEVEL


@dataclass(frozen=True, slots=True)
class SubjectTransformConfig:
    """`subject_transform`: incoming subjects under src are stored as dest."""

    src: str
    dest: str

    def to_json(self) -> dict[str, Any]:
        return {"src": self.src, "dest": self.dest}


@dataclass(frozen=True, slots=True)
class RePublish:
    """`republish`: committed messages under src are re-sent on dest (headers only if asked)."""

    src: str
    dest: str
    headers_only: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"src": self.src} if self.src else {}
        out["dest"] = self.dest
        if self.headers_only:
            out["headers_only"] = True
        return out


@dataclass(frozen=True, slots=True)
class StreamConfig:
    name: str
    subjects: tuple[str, ...] = ()
    description: str = ""
    retention: str = "limits"
    max_consumers: int = -1
    max_msgs: int = -1
    max_bytes: int = -1
    max_age: int = 0  # nanoseconds
    max_msgs_per_subject: int = -1
    max_msg_size: int = -1
    discard: str = "old"
    storage: str = "file"
    num_replicas: int = 1
    no_ack: bool = False
    duplicate_window: int = DEFAULT_DUPLICATE_WINDOW  # nanoseconds
    sources: tuple[StreamSource, ...] = ()
    mirror: StreamSource | None = None
    compression: str = "none"
    first_seq: int = 0
    subject_transform: SubjectTransformConfig | None = None
    republish: RePublish | None = None
    allow_direct: bool = False
    mirror_direct: bool = False
    discard_new_per_subject: bool = False
    sealed: bool = False
    deny_delete: bool = False
    deny_purge: bool = False
    allow_rollup_hdrs: bool = False
    consumer_limits: Mapping[str, Any] = field(default_factory=dict)
    allow_msg_ttl: bool = False
    subject_delete_marker_ttl: int = 0  # nanoseconds; 0: no markers
    allow_msg_counter: bool = False
    allow_atomic: bool = False
    allow_msg_schedules: bool = False
    persist_mode: str = "default"
    allow_batched: bool = False
    metadata: Mapping[str, str] = field(default_factory=dict)

    def to_json(self, *, dynamic: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The config as the reference serialises it; `dynamic` adds server-side metadata."""
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        if self.subjects:
            out["subjects"] = list(self.subjects)
        for key in (
            "retention",
            "max_consumers",
            "max_msgs",
            "max_bytes",
            "max_age",
            "max_msgs_per_subject",
            "max_msg_size",
            "discard",
            "storage",
            "num_replicas",
        ):
            out[key] = getattr(self, key)
        if self.no_ack:
            out["no_ack"] = True
        if self.duplicate_window:  # a mirror or sourcing stream dedups only if asked
            out["duplicate_window"] = self.duplicate_window
        if self.mirror is not None:
            out["mirror"] = self.mirror.to_json()
        if self.sources:
            out["sources"] = [source.to_json() for source in self.sources]
        out["compression"] = self.compression
        if self.first_seq:
            out["first_seq"] = self.first_seq
        if self.subject_transform is not None:
            out["subject_transform"] = self.subject_transform.to_json()
        if self.republish is not None:
            out["republish"] = self.republish.to_json()
        out["allow_direct"] = self.allow_direct
        out["mirror_direct"] = self.mirror_direct
        if self.discard_new_per_subject:
            out["discard_new_per_subject"] = True
        for key in ("sealed", "deny_delete", "deny_purge", "allow_rollup_hdrs"):
            out[key] = getattr(self, key)
        out["consumer_limits"] = dict(self.consumer_limits)
        out["allow_msg_ttl"] = self.allow_msg_ttl
        if self.subject_delete_marker_ttl:
            out["subject_delete_marker_ttl"] = self.subject_delete_marker_ttl
        for key in ("allow_msg_counter", "allow_atomic", "allow_msg_schedules"):
            if getattr(self, key):
                out[key] = True
        if self.persist_mode != "default":
            out["persist_mode"] = self.persist_mode
        if self.allow_batched:
            out["allow_batched"] = True
        metadata = {**self.metadata, **(dynamic or {})}
        if metadata:
            out["metadata"] = dict(sorted(metadata.items()))
        return out


def parse_json(body: bytes) -> Any:
    """Decode a request body; errors read like the reference's (err_code 10025)."""
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.invalid_json(str(exc)) from None


def from_request(raw: Any) -> StreamConfig:
    """Build a validated config with the reference's defaults from a create/update body."""
    if not isinstance(raw, Mapping):
        raise errors.invalid_json("cannot unmarshal into Go value of type StreamConfigRequest")
    refuse_unknown(raw, _SCHEMA)
    metadata = _dict(raw, "metadata")
    cfg = StreamConfig(
        name=_str(raw, "name"),
        subjects=tuple(_str_list(raw, "subjects")),
        description=_str(raw, "description"),
        retention=_enum(raw, "retention", RETENTIONS),
        max_consumers=_int(raw, "max_consumers"),
        max_msgs=_int(raw, "max_msgs"),
        max_bytes=_int(raw, "max_bytes"),
        max_age=_int(raw, "max_age"),
        max_msgs_per_subject=_int(raw, "max_msgs_per_subject"),
        max_msg_size=_int(raw, "max_msg_size"),
        discard=_enum(raw, "discard", DISCARDS),
        storage=_enum(raw, "storage", STORAGES),
        num_replicas=_int(raw, "num_replicas"),
        no_ack=_bool(raw, "no_ack"),
        duplicate_window=_int(raw, "duplicate_window"),
        sources=parse_sources(raw),
        mirror=parse_mirror(raw),
        compression=_enum(raw, "compression", COMPRESSIONS),
        first_seq=_uint(raw, "first_seq"),
        subject_transform=_transform(raw),
        republish=_republish(raw),
        allow_direct=_bool(raw, "allow_direct"),
        mirror_direct=_bool(raw, "mirror_direct"),
        discard_new_per_subject=_bool(raw, "discard_new_per_subject"),
        sealed=_bool(raw, "sealed"),
        deny_delete=_bool(raw, "deny_delete"),
        deny_purge=_bool(raw, "deny_purge"),
        allow_rollup_hdrs=_bool(raw, "allow_rollup_hdrs"),
        consumer_limits=_dict(raw, "consumer_limits"),
        allow_msg_ttl=_bool(raw, "allow_msg_ttl"),
        subject_delete_marker_ttl=_int(raw, "subject_delete_marker_ttl"),
        allow_msg_counter=_bool(raw, "allow_msg_counter"),
        allow_atomic=_bool(raw, "allow_atomic"),
        allow_msg_schedules=_bool(raw, "allow_msg_schedules"),
        persist_mode=api_levels.persist_mode(raw),
        allow_batched=_bool(raw, "allow_batched"),
        metadata={str(k): str(v) for k, v in metadata.items()},
    )
    return _checked(cfg)


def _transform(raw: Mapping[str, Any]) -> SubjectTransformConfig | None:
    if raw.get("subject_transform") is None:
        return None
    body = _dict(raw, "subject_transform")
    return SubjectTransformConfig(_str(body, "src"), _str(body, "dest"))


def _republish(raw: Mapping[str, Any]) -> RePublish | None:
    if raw.get("republish") is None:
        return None
    body = _dict(raw, "republish")
    return RePublish(_str(body, "src"), _str(body, "dest"), _bool(body, "headers_only"))


def _checked(cfg: StreamConfig) -> StreamConfig:
    """Fill defaults and refuse what the reference refuses, in its order."""
    if not is_valid_name(cfg.name):
        raise errors.invalid_config(
            "stream name is required and can not contain '.', '*', '>', '\\', '/'"
        )
    if len(cfg.name) > MAX_NAME_LEN:
        raise errors.invalid_config(f"stream name is too long, maximum allowed is {MAX_NAME_LEN}")
    if len(cfg.description) > MAX_DESCRIPTION_LEN:
        raise errors.invalid_config(
            f"stream description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}"
        )
    if sum(len(k) + len(v) for k, v in cfg.metadata.items()) > MAX_METADATA_LEN:
        raise errors.invalid_config(
            f"stream metadata exceeds maximum size of {MAX_METADATA_LEN} bytes"
        )
    replicas = cfg.num_replicas or 1
    if replicas > 5:
        raise errors.invalid_config("maximum replicas is 5")
    if replicas < 0:
        raise errors.replicas_negative()
    if cfg.max_age < 0:
        raise errors.invalid_config("max age can not be negative")
    if 0 < cfg.max_age < MIN_WINDOW:
        raise errors.invalid_config("max age needs to be >= 100ms")
    window = cfg.duplicate_window
    if window == 0 and cfg.mirror is None and not cfg.sources:
        window = (
            min(cfg.max_age, DEFAULT_DUPLICATE_WINDOW) if cfg.max_age else DEFAULT_DUPLICATE_WINDOW
        )
    if window < 0:
        raise errors.invalid_config("duplicates window can not be negative")
    if cfg.max_age and window > cfg.max_age:
        raise errors.invalid_config("duplicates window can not be larger then max age")
    if 0 < window < MIN_WINDOW:
        raise errors.invalid_config("duplicates window needs to be >= 100ms")
    if cfg.deny_purge and cfg.allow_rollup_hdrs:
        raise errors.invalid_config("roll-ups require the purge permission")
    api_levels.check_counter(cfg)
    max_per = _limit(cfg.max_msgs_per_subject)
    if cfg.discard_new_per_subject:
        if cfg.discard != "new":
            raise errors.invalid_config(
                "discard new per subject requires discard new policy to be set"
            )
        if max_per <= 0:
            raise errors.invalid_config("discard new per subject requires max msgs per subject > 0")
    cfg = api_levels.with_schedules(_with_markers(cfg), replicas)
    check_mirror(cfg.mirror, cfg)
    subject_list = cfg.subjects or (() if cfg.sources or cfg.mirror else (cfg.name,))
    check_sources(cfg.sources)
    check_externals(origins(cfg))
    _check_subjects(subject_list, no_ack=cfg.no_ack, replicas=replicas)
    _check_transform(cfg.subject_transform)
    republish = _checked_republish(cfg.republish, cfg.subject_transform, subject_list)
    metadata = dict(cfg.metadata)
    metadata[REQUIRED_LEVEL_KEY] = str(api_levels.required_level(cfg))
    return dataclasses.replace(
        cfg,
        subjects=subject_list,
        num_replicas=replicas,
        max_msgs=_limit(cfg.max_msgs),
        max_msgs_per_subject=max_per,
        max_bytes=_limit(cfg.max_bytes),
        max_msg_size=_limit(cfg.max_msg_size),
        max_consumers=_limit(cfg.max_consumers),
        duplicate_window=window,
        republish=republish,
        metadata=metadata,
    )


def _check_transform(transform: SubjectTransformConfig | None) -> None:
    if transform is None:
        return
    if transform.src and not is_valid_subject(transform.src):
        raise errors.transform_invalid_source(f"invalid subject {transform.src}")
    try:
        mapping.validate_mapping(transform.src, transform.dest)
    except mapping.MappingError as exc:
        raise errors.transform_invalid_destination(str(exc)) from None


def _checked_republish(
    republish: RePublish | None,
    transform: SubjectTransformConfig | None,
    subject_list: tuple[str, ...],
) -> RePublish | None:
    """An empty source means all; `>` to `>` follows the transform when it names the subjects."""
    if republish is None:
        return None
    src, dest = republish.src or ">", republish.dest
    if (
        src == dest == ">"
        and transform is not None
        and len(subject_list) == 1
        and transform.src == subject_list[0]
    ):
        src = dest = transform.dest
    if any(subjects_overlap(dest, subject) for subject in subject_list):
        raise errors.invalid_config("stream configuration for republish destination forms a cycle")
    try:
        mapping.compile_transform(src, dest)
    except mapping.MappingError:
        raise errors.invalid_config(
            f"stream configuration for republish with transform from '{src}' to '{dest}' not valid"
        ) from None
    return dataclasses.replace(republish, src=src, dest=dest)


def _with_markers(cfg: StreamConfig) -> StreamConfig:
    """Markers are TTL'd rollups, so asking for them turns both features on (and purge with them).

    The reference does this after the rollup/deny-purge check, so an explicit
    `deny_purge` is overridden rather than refused.
    """
    marker_ttl = cfg.subject_delete_marker_ttl
    if marker_ttl < 0:
        raise errors.invalid_config("subject delete marker TTL must not be negative")
    if marker_ttl == 0:
        return cfg
    if marker_ttl < 1_000_000_000:
        raise errors.invalid_config("subject delete marker TTL must be at least 1 second")
    if cfg.allow_rollup_hdrs:
        return dataclasses.replace(cfg, allow_msg_ttl=True)
    return dataclasses.replace(cfg, allow_msg_ttl=True, allow_rollup_hdrs=True, deny_purge=False)


def _check_subjects(subject_list: tuple[str, ...], *, no_ack: bool, replicas: int) -> None:
    for i, subj in enumerate(subject_list):
        if not is_valid_subject(subj):
            raise errors.invalid_config("invalid subject")
        if subj in subject_list[:i]:
            raise errors.invalid_config("duplicate subjects detected")
        if subj == ">":
            if not no_ack:
                raise errors.invalid_config("capturing all subjects requires no-ack to be true")
            if replicas != 1:
                raise errors.invalid_config("capturing all subjects requires replicas of 1")
        if not no_ack:
            for reserved in _RESERVED:
                if subjects_overlap(subj, reserved) and not is_subset(subj, "$JS.EVENT.>"):
                    raise errors.invalid_config(
                        "subjects that overlap with jetstream api require no-ack to be true"
                    )
            if subjects_overlap(subj, "$SYS.>") and not is_subset(subj, "$SYS.ACCOUNT.>"):
                raise errors.invalid_config(
                    "subjects that overlap with system api require no-ack to be true"
                )
        for other in subject_list[i + 1 :]:
            if subjects_overlap(other, subj):
                raise errors.invalid_config(f'subject "{subj}" overlaps with "{other}"')


def check_update(old: StreamConfig, new: StreamConfig, *, clustered: bool = False) -> StreamConfig:
    """What an update may change; the refusals the reference gives, in its order."""
    if new.name != old.name:
        raise errors.invalid_config("stream configuration name must match original")
    if new.num_replicas > 1 and not clustered:
        raise errors.replicas_not_supported()
    if new.storage != old.storage:
        raise errors.invalid_config("stream configuration update can not change storage type")
    if new.retention != old.retention and "workqueue" in (new.retention, old.retention):
        raise errors.invalid_config(
            "stream configuration update can not change retention policy to/from workqueue"
        )
    if old.sealed and not new.sealed:
        raise errors.invalid_config("stream configuration update can not unseal a sealed stream")
    if old.deny_delete and not new.deny_delete:
        raise errors.invalid_config(
            "stream configuration update can not cancel deny message deletes"
        )
    if old.deny_purge and not new.deny_purge:
        raise errors.invalid_config("stream configuration update can not cancel deny purge")
    check_mirror_update(old.mirror, new.mirror)
    if old.allow_msg_ttl and not new.allow_msg_ttl:
        raise errors.invalid_config("message TTL status can not be disabled")
    api_levels.check_update(old, new)
    if new.sealed:
        return dataclasses.replace(
            new,
            max_age=0,
            discard="new",
            deny_delete=True,
            deny_purge=True,
            allow_rollup_hdrs=False,
        )
    return new


def is_valid_name(name: str) -> bool:
    """Stream and consumer names become folder names and subject tokens."""
    return bool(name) and not any(ch in name for ch in " \t\r\n\f.*>\\/")


def _limit(value: int) -> int:
    """0 and anything below -1 mean unlimited, spelled -1, as in the reference."""
    return -1 if value == 0 or value < -1 else value
