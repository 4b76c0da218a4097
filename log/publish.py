"""The stream rules a publish must pass before it is proposed, and the PubAck it earns.

The checks run in the reference's order, because a message breaking two rules
must get the same error from jetlake as from nats-server. They read the
*proposed* state of the stream (messages accepted but not yet committed
count), so two publishes in one group-commit batch see each other.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from log import errors
from log.config import StreamConfig
from log.errors import ApiError

MSG_ID = "Nats-Msg-Id"
EXPECTED_STREAM = "Nats-Expected-Stream"
EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJ_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJ_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
ROLLUP = "Nats-Rollup"
TTL = "Nats-TTL"
MARKER_REASON = "Nats-Marker-Reason"
KV_OPERATION = "KV-Operation"
MAX_HEADER_SIZE = 65535
NEVER = -1  # a TTL of "never": the message outlives max_age

_TTL_LINE_RE = re.compile(rb"\r\nNats-TTL:[^\r\n]*")
_DURATION_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}


class ProposedState(Protocol):
    """What the rules read: the stream as it will be once every accepted message commits."""

    @property
    def last_seq(self) -> int: ...

    @property
    def last_msg_id(self) -> str: ...

    @property
    def msgs(self) -> int: ...

    @property
    def bytes(self) -> int: ...

    def dedup_seq(self, msg_id: str) -> int | None: ...

    def last_seq_for(self, subject: str) -> int: ...

    def subject_msgs(self, subject: str) -> int: ...


@dataclass(frozen=True, slots=True)
class Accepted:
    msg_id: str
    rollup: str  # "", "sub" or "all"
    ttl: int  # seconds; 0 none, NEVER for "never"


_PLAIN = Accepted("", "", 0)


@dataclass(frozen=True, slots=True)
class Duplicate:
    seq: int


def check(
    cfg: StreamConfig,
    state: ProposedState,
    subject: str,
    hdr: bytes | None,
    headers: Mapping[str, list[str]],
    data: bytes,
    size: int,
) -> Accepted | Duplicate:
    """Accept, recognise a duplicate, or raise the ApiError the publisher gets back.

    `size` is what the message counts against max_bytes (the store's measure).
    """
    if cfg.sealed:
        raise errors.sealed()
    if not headers:  # the common case: no header can ask for anything
        if cfg.max_msg_size >= 0 and len(data) > cfg.max_msg_size:
            raise errors.message_too_big()
        _check_discard_new(cfg, state, subject, size, "")
        return _PLAIN
    ttl_text = _first(headers, TTL)
    _check_expectations(cfg, state, subject, headers, ttl_text)
    msg_id = _first(headers, MSG_ID)
    if msg_id:
        seq = state.dedup_seq(msg_id)
        if seq:
            return Duplicate(seq)
    expected_id = _first(headers, EXPECTED_LAST_MSG_ID)
    if expected_id and expected_id != state.last_msg_id:
        raise errors.wrong_last_msg_id(state.last_msg_id)
    rollup = _rollup(cfg, headers)
    check_size(cfg, hdr, data)
    if hdr is not None and len(hdr) > MAX_HEADER_SIZE:
        raise errors.header_too_big()
    ttl = parse_ttl(ttl_text) if ttl_text else 0
    _check_discard_new(cfg, state, subject, size, rollup)
    return Accepted(msg_id, rollup, ttl)


def check_size(cfg: StreamConfig, hdr: bytes | None, data: bytes) -> None:
    """Refuse a message over `max_msg_size`, its header block and payload counted
    together as the reference counts them (every publish path: plain, batched, fast)."""
    hdr_len = len(hdr) if hdr else 0
    if cfg.max_msg_size >= 0 and (
        hdr_len > cfg.max_msg_size or len(data) > cfg.max_msg_size - hdr_len
    ):
        raise errors.message_too_big()


def _check_expectations(
    cfg: StreamConfig,
    state: ProposedState,
    subject: str,
    headers: Mapping[str, list[str]],
    ttl_text: str,
) -> None:
    expected_stream = _first(headers, EXPECTED_STREAM)
    if expected_stream and expected_stream != cfg.name:
        raise errors.expected_stream_mismatch()
    if ttl_text and not cfg.allow_msg_ttl and _ttl_or_zero(ttl_text) != 0:
        raise errors.ttl_disabled()
    subj_seq = _first(headers, EXPECTED_LAST_SUBJ_SEQ)
    seq_subject = _first(headers, EXPECTED_LAST_SUBJ_SEQ_SUBJECT)
    if subj_seq:
        found = state.last_seq_for(seq_subject or subject)
        if _uint(subj_seq) != found:
            raise errors.wrong_last_sequence(found)
    elif seq_subject:
        raise errors.expected_subject_seq_invalid()
    last_seq = _first(headers, EXPECTED_LAST_SEQ)
    if last_seq and _uint(last_seq) != state.last_seq:
        raise errors.wrong_last_sequence(state.last_seq)


def _rollup(cfg: StreamConfig, headers: Mapping[str, list[str]]) -> str:
    rollup = _first(headers, ROLLUP)
    if not rollup:
        return ""
    if not cfg.allow_rollup_hdrs or cfg.deny_purge:
        raise errors.rollup_failed("rollup not permitted")
    if rollup not in ("sub", "all"):
        raise errors.rollup_failed(f"rollup value invalid: {json.dumps(rollup)}")
    return rollup


def _check_discard_new(
    cfg: StreamConfig, state: ProposedState, subject: str, size: int, rollup: str
) -> None:
    """Discard-new refusals; at a per-subject limit the new message replaces an old one."""
    if cfg.discard != "new":
        return
    per_subject = cfg.discard_new_per_subject
    over_msgs = 0 < cfg.max_msgs <= state.msgs
    over_bytes = cfg.max_bytes > 0 and state.bytes + size > cfg.max_bytes
    # The subject's count only matters when it can refuse or excuse: a KV put skips it.
    per = cfg.max_msgs_per_subject
    if (per_subject or over_msgs or over_bytes) and per > 0 and state.subject_msgs(subject) >= per:
        if per_subject and not rollup:
            raise errors.store_failed("maximum messages per subject exceeded")
        return
    if over_msgs:
        raise errors.store_failed("maximum messages exceeded")
    if over_bytes:
        raise errors.store_failed("maximum bytes exceeded")


def marker_ttl(cfg: StreamConfig) -> int:
    """Whole seconds a subject delete marker lives (the reference truncates the config)."""
    return cfg.subject_delete_marker_ttl // 1_000_000_000


def floor_ttl(cfg: StreamConfig, ttl: int, hdr: bytes | None) -> tuple[int, bytes | None]:
    """With markers on, no message may expire sooner than a marker would: raise its TTL.

    Otherwise a marker already standing for the subject could outlive the
    message and its own marker be missed. A subject holding one message at most
    is exempt. As the reference does, the stored `Nats-TTL` is replaced (moved
    last, in seconds), so readers and a restart's TTL recovery see what applies.
    """
    floor = marker_ttl(cfg)
    if ttl <= 0 or ttl >= floor or hdr is None or cfg.max_msgs_per_subject == 1:
        return ttl, hdr
    kept = _TTL_LINE_RE.sub(b"", hdr)
    return floor, kept[:-2] + b"%s: %d\r\n\r\n" % (TTL.encode(), floor)


def is_marker(headers: Mapping[str, list[str]]) -> bool:
    """Whether a message already says its subject is gone (its expiry leaves no marker)."""
    return bool(_first(headers, MARKER_REASON)) or _first(headers, KV_OPERATION) == "PURGE"


def marker_header(cfg: StreamConfig) -> bytes:
    """The header of the marker left when max_age or a TTL empties a subject.

    A rollup so it replaces whatever the subject still has once it commits,
    and a TTL so markers do not pile up.
    """
    seconds = marker_ttl(cfg)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        duration = f"{hours}h{minutes}m{secs}s"  # Go's Duration.String
    elif minutes:
        duration = f"{minutes}m{secs}s"
    else:
        duration = f"{secs}s"
    return (
        f"NATS/1.0\r\n{MARKER_REASON}: MaxAge\r\n{TTL}: {duration}\r\n{ROLLUP}: sub\r\n\r\n"
    ).encode()


def parse_ttl(text: str) -> int:
    """Seconds from a Nats-TTL value ("never", a Go duration of at least 1s, or seconds)."""
    ttl = _ttl_or_zero(text)
    if ttl == 0:
        raise errors.ttl_invalid()
    return ttl


def _ttl_or_zero(text: str) -> int:
    """The reference's reading of Nats-TTL, with 0 for anything it cannot use."""
    if text.lower() == "never":
        return NEVER
    ns = go_duration_ns(text)
    if ns is not None:
        return ns // 1_000_000_000 if ns >= 1_000_000_000 else 0
    return int(text) if text.isdigit() else 0


def go_duration_ns(text: str) -> int | None:
    """Parse Go's time.ParseDuration syntax (e.g. "1h30m", "1.5s"); None if it is not one."""
    body = text.lstrip("+-")
    if not body or _DURATION_RE.sub("", body) != "":
        return None
    total = sum(float(num) * _UNIT_NS[unit] for num, unit in _DURATION_RE.findall(body))
    return -int(total) if text.startswith("-") else int(total)


def _first(headers: Mapping[str, list[str]], name: str) -> str:
    values = headers.get(name)
    return values[0].strip() if values else ""


def _uint(text: str) -> int:
    """A header's sequence; unparseable values never match, as in the reference."""
    return int(text) if text.isdigit() else -1


@functools.lru_cache(maxsize=1024)
def _ack_prefix(stream: str) -> bytes:
    return b'{"stream":%s,"seq":' % json.dumps(stream).encode()


def pub_ack(stream: str, seq: int) -> bytes:
    return b"%s%d}" % (_ack_prefix(stream), seq)


def pub_acks(stream: str, replies: Sequence[bytes], first: int) -> list[tuple[bytes, bytes]]:
    """The PubAcks of a run's messages, stored from sequence `first` on, to send together:
    one for each that has a reply subject."""
    prefix = _ack_prefix(stream)
    return [(reply, b"%s%d}" % (prefix, seq)) for seq, reply in enumerate(replies, first) if reply]


def counter_ack(stream: str, seq: int, value: str) -> bytes:
    """A counter's PubAck carries its new total as a string (it may exceed 64 bits)."""
    return b'%s%d,"val":"%s"}' % (_ack_prefix(stream), seq, value.encode())


def batch_ack(stream: str, seq: int, batch_id: str, count: int) -> bytes:
    """An atomic batch's PubAck: its last seq, its id and how many messages it stored."""
    return b'%s%d,"batch":%s,"count":%d}' % (
        _ack_prefix(stream),
        seq,
        json.dumps(batch_id).encode(),
        count,
    )


def duplicate_ack(stream: str, seq: int) -> bytes:
    """The reference writes this one by hand, space included; clients parse either."""
    return b'{"stream":%s,"seq":%d,"duplicate": true}' % (json.dumps(stream).encode(), seq)


def error_ack(stream: str, error: ApiError) -> bytes:
    body = {"error": error.to_json(), "stream": stream, "seq": 0}
    return json.dumps(body, separators=(",", ":")).encode()
