"""Distributed counters (`allow_msg_counter`): a subject's last message holds its total.

A publish carries `Nats-Incr: <signed integer>` and no body; the stream stores
it with the body `{"val":"<new total>"}` and answers with the total in the
PubAck's `val`. The total is read from the subject's newest message, or from
the newest publish still in flight (two increments in one group commit must
add up), so the running totals in flight are kept here until they apply.

A counter stream that sources other counter streams stores each copy's value
as the difference from the last value seen from that origin subject, and
records those last values in `Nats-Counter-Sources`, as the reference does,
so the aggregate is the sum of the origins however often each is copied.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ingest.parser.headers import set_header
from log import errors
from log.segments.api import StoredMsg
from log.sources import SOURCE_HEADER

INCR = "Nats-Incr"
SOURCES = "Nats-Counter-Sources"
_INCR_HEADER = INCR.encode()
_SOURCES_HEADER = SOURCES.encode()
_INTEGER = re.compile(r"[+-]?\d+")  # Go's big.Int SetString(s, 10): no spaces, no underscores
# Headers whose promise an increment cannot keep: it never replaces or expects a state.
_INCOMPATIBLE = (
    "Nats-Rollup",
    "Nats-Expected-Stream",
    "Nats-Expected-Last-Msg-Id",
    "Nats-Expected-Last-Subject-Sequence-Subject",
    "Nats-Expected-Last-Sequence",
    "Nats-Expected-Last-Subject-Sequence",
)

Sources = dict[str, dict[str, str]]  # origin stream -> origin subject -> last value copied


@dataclass(frozen=True, slots=True)
class Counter:
    total: int = 0
    sources: Sources = field(default_factory=dict)


def increment(
    allowed: bool, headers: Mapping[str, list[str]], data: bytes, *, sourced: bool
) -> int | None:
    """The publish's increment after the reference's checks (None: it carries none).

    A copy from a source is stored verbatim apart from the arithmetic, so only
    a publisher's own increment is held to the counter rules.
    """
    text = _first(headers, INCR)
    if not text:
        if allowed:
            raise errors.incr_missing()
        return None
    if _INTEGER.fullmatch(text) is None:
        raise errors.incr_invalid()
    if sourced:
        return int(text)
    if not allowed:
        raise errors.incr_disabled()
    if data:
        raise errors.incr_payload()
    if any(_first(headers, name) for name in _INCOMPATIBLE):
        raise errors.incr_invalid()
    return int(text)


def stored(
    msg: StoredMsg | None, read_headers: Callable[[bytes], Mapping[str, list[str]]]
) -> Counter:
    """The counter a subject's newest message holds; a body that is not one is broken."""
    if msg is None:
        return Counter()
    try:
        body = json.loads(msg.data)
    except (ValueError, UnicodeDecodeError):
        raise errors.counter_broken() from None
    if not isinstance(body, dict) or not isinstance(body.get("val", ""), str):
        raise errors.counter_broken()
    sources: Sources = {}
    text = _first(read_headers(msg.hdr), SOURCES) if msg.hdr else ""
    if text:
        sources = _sources(text)
    value = body.get("val", "")
    return Counter(int(value) if _INTEGER.fullmatch(value) else 0, sources)


def _sources(text: str) -> Sources:
    try:
        raw = json.loads(text)
    except ValueError:
        raise errors.counter_broken() from None
    if not isinstance(raw, dict) or not all(
        isinstance(subjects, dict) and all(isinstance(v, str) for v in subjects.values())
        for subjects in raw.values()
    ):
        raise errors.counter_broken()
    return {str(k): dict(v) for k, v in raw.items()}


def add(
    counter: Counter,
    incr: int,
    subject: str,
    hdr: bytes | None,
    data: bytes,
    headers: Mapping[str, list[str]],
) -> tuple[Counter, bytes | None, bytes]:
    """The new counter and the message to store: its body the total, and for a copy from
    a source the increment rewritten to the difference since that origin's last copy."""
    sources = counter.sources
    origin = _first(headers, SOURCE_HEADER)
    if origin:
        fields = origin.split(" ")
        stream = fields[0]
        origin_subject = fields[4] if len(fields) >= 5 else subject
        try:
            body = json.loads(data)
            value = body["val"]
        except (ValueError, UnicodeDecodeError, TypeError, KeyError):
            raise errors.counter_broken() from None
        if not isinstance(value, str):
            raise errors.counter_broken()
        copied = int(value) if _INTEGER.fullmatch(value) else 0
        before = sources.get(stream, {}).get(origin_subject, "")
        incr = copied - (int(before) if _INTEGER.fullmatch(before) else 0)
        sources = {**sources, stream: {**sources.get(stream, {}), origin_subject: str(copied)}}
        hdr = set_header(hdr, _INCR_HEADER, str(incr).encode())
    total = counter.total + incr
    if sources:
        text = json.dumps(sources, separators=(",", ":"), sort_keys=True)
        hdr = set_header(hdr, _SOURCES_HEADER, text.encode())
    return Counter(total, sources), hdr, b'{"val":"%d"}' % total


class InFlight:
    """Running totals of counters with publishes proposed but not applied yet."""

    def __init__(self) -> None:
        self._totals: dict[str, tuple[int, Counter]] = {}  # subject -> (seq, counter)

    def __bool__(self) -> bool:
        return bool(self._totals)

    def get(self, subject: str) -> Counter | None:
        entry = self._totals.get(subject)
        return entry[1] if entry else None

    def propose(self, subject: str, seq: int, counter: Counter) -> None:
        self._totals[subject] = (seq, counter)

    def settle(self, applied: Iterable[tuple[str, int]]) -> None:
        """Forget a subject's total once its newest proposal applied (the store has it)."""
        totals = self._totals
        for subject, seq in applied:
            entry = totals.get(subject)
            if entry is not None and entry[0] <= seq:
                del totals[subject]

    def snapshot(self) -> dict[str, tuple[int, Counter]]:
        return dict(self._totals)

    def restore(self, saved: dict[str, tuple[int, Counter]]) -> None:
        self._totals = saved

    def clear(self) -> None:
        self._totals.clear()


def _first(headers: Mapping[str, list[str]], name: str) -> str:
    values = headers.get(name)
    return values[0].strip() if values else ""
