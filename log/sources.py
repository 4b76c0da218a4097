"""Stream sources: the `sources` config, its validation, and the header that carries progress.

A sourcing stream copies messages from other streams. Each copy carries
`Nats-Stream-Source: <name> <origin seq> <filters> <destinations> <origin subject>`,
as the reference writes it; the copy and its progress are therefore one
record, so after a crash the sourcing stream resumes after the last copy it
holds — nothing copied twice, nothing skipped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ingest.parser import mapping
from ingest.parser.subjects import is_literal, is_subset, is_valid_subject, subjects_overlap
from log import errors
from log.errors import ApiError
from log.request_fields import Fields
from log.timefmt import parse_rfc3339, rfc3339

SOURCE_HEADER = "Nats-Stream-Source"
API_PREFIX = "$JS.API"
_DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_FIELDS = Fields("StreamConfigRequest")


@dataclass(frozen=True, slots=True)
class Transform:
    src: str
    dest: str


@dataclass(frozen=True, slots=True)
class External:
    """An origin reached through another API prefix (another domain or account)."""

    api: str
    deliver: str = ""

    def to_json(self) -> dict[str, str]:
        return {"api": self.api, "deliver": self.deliver}


@dataclass(frozen=True, slots=True)
class ConsumerSource:
    """A durable the user made on the origin for this link to read through (API level 4):
    the link resets it with `CONSUMER.RESET` instead of creating a consumer of its own."""

    name: str
    deliver_subject: str

    def to_json(self) -> dict[str, str]:
        out = {"name": self.name} if self.name else {}
        if self.deliver_subject:
            out["deliver_subject"] = self.deliver_subject
        return out


@dataclass(frozen=True, slots=True)
class StreamSource:
    name: str
    opt_start_seq: int = 0
    opt_start_time: int = 0  # ns since the epoch; 0: none
    filter_subject: str = ""
    subject_transforms: tuple[Transform, ...] = ()
    external: External | None = None
    consumer: ConsumerSource | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.opt_start_seq:
            out["opt_start_seq"] = self.opt_start_seq
        if self.opt_start_time:
            out["opt_start_time"] = rfc3339(self.opt_start_time)
        if self.filter_subject:
            out["filter_subject"] = self.filter_subject
        if self.subject_transforms:
            out["subject_transforms"] = [
                {"src": t.src, "dest": t.dest} for t in self.subject_transforms
            ]
        if self.external is not None:
            out["external"] = self.external.to_json()
        if self.consumer is not None:
            out["consumer"] = self.consumer.to_json()
        return out

    @property
    def index_name(self) -> str:
        """Name, filters and destinations: what tells two sources of one stream apart (an
        external origin's name carries a hash of its API prefix, and one read through the
        user's durable a hash of its name, as in the reference)."""
        name = self._origin_name
        if self.consumer is not None:
            name += ":C=" + name_hash(self.consumer.name)
        if not self.subject_transforms:
            return f"{name} {self.filter_subject or '>'} >"
        srcs = "\f".join(t.src or ">" for t in self.subject_transforms)
        dests = "\f".join(t.dest or ">" for t in self.subject_transforms)
        return f"{name} {srcs} {dests}"

    @property
    def _origin_name(self) -> str:
        if self.external is None:
            return self.name
        return self.name + ":" + name_hash(self.external.api)

    @property
    def consumer_index(self) -> str:
        """Origin and durable: one durable may serve only one source of a stream."""
        return f"{self._origin_name} {self.consumer.name if self.consumer else ''}"

    def header(self, seq: int, subject: str, ident: str) -> str:
        name, srcs, dests = self.index_name.split(" ")
        out = f"{name} {seq} {srcs} {dests} {subject}"
        return f"{out} {ident}" if ident else out

    def compile(self) -> list[tuple[str, mapping.Transform | None]]:
        """(filter, transform) pairs; a subject is copied when it falls under a filter."""
        if not self.subject_transforms:
            return [(self.filter_subject or ">", None)]
        return [
            (t.src or ">", mapping.compile_transform(t.src, t.dest) if t.dest else None)
            for t in self.subject_transforms
        ]


def source_header_refused() -> ApiError:
    """A client's publish may not carry the header that marks a sourced copy."""
    return ApiError(400, 10227, "message stream source header is not allowed")


def stream_identity(created_ns: int) -> str:
    """The reference's identity of an origin (a hash of its creation time): a recreated
    origin has another, so a reader can tell its sequences started over."""
    return name_hash(rfc3339(created_ns))


def name_hash(text: str) -> str:
    """The reference's 8-character hash of a name."""
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(_DIGITS[b % 62] for b in digest[:8])


def parse_source_header(value: str) -> tuple[str, int, str] | None:
    """(index name, origin seq, origin identity) of a stored copy; None if not a copy."""
    parts = value.split(" ")
    if len(parts) < 5 or not parts[1].isdigit():
        return None
    return f"{parts[0]} {parts[2]} {parts[3]}", int(parts[1]), parts[5] if len(parts) > 5 else ""


def parse_sources(raw: Mapping[str, Any]) -> tuple[StreamSource, ...]:
    items = raw.get("sources")
    if items is None:
        return ()
    if not isinstance(items, list):
        raise _FIELDS.type_error("sources", items, "[]*server.StreamSource")
    return tuple(parse_source(item, errors.source_invalid_name()) for item in items)


def parse_source(item: Any, invalid_name: ApiError) -> StreamSource:
    """One `sources` entry or the `mirror`: the same fields (`invalid_name` if not an object)."""
    if not isinstance(item, Mapping):
        raise invalid_name
    start_time = _FIELDS.str(item, "opt_start_time")
    transforms = item.get("subject_transforms") or []
    if not isinstance(transforms, list):
        raise _FIELDS.type_error(
            "subject_transforms", transforms, "[]server.SubjectTransformConfig"
        )
    return StreamSource(
        name=_FIELDS.str(item, "name"),
        opt_start_seq=_FIELDS.int(item, "opt_start_seq"),
        opt_start_time=_time(start_time) if start_time else 0,
        filter_subject=_FIELDS.str(item, "filter_subject"),
        subject_transforms=tuple(
            Transform(_FIELDS.str(t, "src"), _FIELDS.str(t, "dest"))
            for t in transforms
            if isinstance(t, Mapping)
        ),
        external=_external(item.get("external")),
        consumer=_consumer(item.get("consumer")),
    )


def _external(body: Any) -> External | None:
    if not body:
        return None
    if not isinstance(body, Mapping):
        raise _FIELDS.type_error("external", body, "server.ExternalStream")
    return External(_FIELDS.str(body, "api"), _FIELDS.str(body, "deliver"))


def _consumer(body: Any) -> ConsumerSource | None:
    if body is None:
        return None
    if not isinstance(body, Mapping):
        raise _FIELDS.type_error("consumer", body, "server.StreamConsumerSource")
    return ConsumerSource(_FIELDS.str(body, "name"), _FIELDS.str(body, "deliver_subject"))


def consumer_invalid(src: StreamSource) -> bool:
    """The reference's test of a link's own durable: a valid name, a literal delivery
    subject, and no start or single filter of the link's own (the durable has them)."""
    c = src.consumer
    if c is None:
        return False
    return (
        not valid_name(c.name)
        or not is_valid_publish_subject(c.deliver_subject)
        or bool(src.opt_start_seq or src.opt_start_time or src.filter_subject)
    )


def valid_name(name: str) -> bool:
    """The reference's `isValidAssetName`."""
    return bool(name) and not any(ch in name for ch in " \t\r\n\f.*>\\/")


def _time(text: str) -> int:
    try:
        return parse_rfc3339(text)
    except ValueError as exc:
        raise errors.invalid_json(str(exc)) from None


def check_sources(sources: tuple[StreamSource, ...]) -> None:
    """The reference's refusals, in its order."""
    seen: set[str] = set()
    durables: set[str] = set()
    for src in sources:
        if not valid_name(src.name):
            raise errors.source_invalid_name()
        if src.index_name in seen:
            raise ApiError(400, 10140, "duplicate source configuration detected")
        seen.add(src.index_name)
        if src.filter_subject and src.subject_transforms:
            raise ApiError(
                400,
                10144,
                "source with multiple subject transforms cannot also have a single subject filter",
            )
        for t in src.subject_transforms:
            check_transform(t, "source", invalid=10145, unmappable=10146)
        for i, outer in enumerate(src.subject_transforms):
            for j, inner in enumerate(src.subject_transforms):
                if i != j and is_subset(outer.src or ">", inner.src or ">"):
                    raise ApiError(400, 10147, "source filters can not overlap")
        if src.consumer is not None:
            if consumer_invalid(src):
                raise ApiError(400, 10215, "stream source consumer config is invalid")
            if src.consumer_index in durables:
                raise ApiError(400, 10216, "duplicate stream source consumer detected")
            durables.add(src.consumer_index)


def check_externals(links: Iterable[StreamSource]) -> None:
    """The reference's refusals of external prefixes: delivery prefixes first, then API
    prefixes (which must not be this account's own API)."""
    externals = [link.external for link in links if link.external is not None]
    for ext in externals:
        if ext.deliver and not is_valid_publish_subject(ext.deliver):
            raise ApiError(
                400,
                10024,
                f"stream external delivery prefix {ext.deliver} must not contain wildcards",
            )
    for ext in externals:
        if ext.api and not is_valid_publish_subject(ext.api):
            raise errors.invalid_config(
                f"stream external api prefix {json.dumps(ext.api)} must be a valid subject"
                " without wildcards"
            )
        if ext.api and subjects_overlap(ext.api, API_PREFIX):
            raise ApiError(
                400,
                10021,
                f"stream external api prefix {ext.api} must not overlap with {API_PREFIX}",
            )


def is_valid_publish_subject(subject: str) -> bool:
    return is_valid_subject(subject) and is_literal(subject)


def check_cycle(name: str, links: tuple[StreamSource, ...], others: Mapping[str, Any]) -> None:
    """Refuse a stream that would, through sources or mirrors, read its own copies (they
    would circulate for ever). `links` are its sources and mirror; `others` maps each other
    stream's name to its config. External origins are elsewhere and never close a cycle."""
    todo = [s.name for s in links if s.external is None]
    seen: set[str] = set()
    while todo:
        current = todo.pop()
        if current == name:
            raise errors.invalid_config("detected cycle")
        if current in seen or current not in others:
            continue
        seen.add(current)
        todo.extend(s.name for s in origins(others[current]) if s.external is None)


def origins(cfg: Any) -> tuple[StreamSource, ...]:
    """A stream config's sources and mirror: everything it copies from."""
    return (*cfg.sources, cfg.mirror) if cfg.mirror is not None else tuple(cfg.sources)


def check_transform(t: Transform, what: str, *, invalid: int, unmappable: int) -> None:
    """One transform of a source or mirror: a valid source subject and a mapping the
    engine accepts (the codes differ between the two, as the reference's do)."""
    if t.src and not is_valid_subject(t.src):
        raise ApiError(400, invalid, f"{what} transform source: invalid subject {t.src}")
    try:
        mapping.validate_mapping(t.src, t.dest)
    except mapping.MappingError as exc:
        raise ApiError(400, unmappable, f"{what} transform: {exc}") from None
