"""Direct get: stored messages answered as messages, not JSON (what KV `get` uses).

The reply carries the stored payload and the stored header block extended with
Nats-Stream / Nats-Subject / Nats-Sequence / Nats-Time-Stamp; misses and bad
requests are status-only replies (404, 408, 413) the clients map to errors.
Batches and `multi_last` add Nats-Num-Pending / Nats-Last-Sequence to each
message and end with a `204 EOB` status, as the reference does.

Requests are decoded the way Go's encoding/json fills the reference's
JSApiMsgGetRequest (case-insensitive keys, typed fields, RFC 3339 times): a
request the reference refuses as malformed is refused here too, and the other
way round.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from ingest.parser.subjects import is_valid_subject
from ingest.server.jetstream.direct_multi import (
    TooManyResults,
    count,
    last_seqs,
    seq_at_time,
)
from log.segments.api import MsgStore, StoredMsg
from log.streams.stream import Stream
from log.timefmt import parse_rfc3339, rfc3339

NOT_FOUND = b"NATS/1.0 404 Message Not Found\r\n\r\n"
NO_RESULTS = b"NATS/1.0 404 No Results\r\n\r\n"
EMPTY_REQUEST = b"NATS/1.0 408 Empty Request\r\n\r\n"
MALFORMED = b"NATS/1.0 408 Malformed Request\r\n\r\n"
BAD_REQUEST = b"NATS/1.0 408 Bad Request\r\n\r\n"
TOO_MANY = b"NATS/1.0 413 Too Many Results\r\n\r\n"
REQUIRED_API_LEVEL = b"NATS/1.0 412 Required Api Level\r\n\r\n"
DEFAULT_MAX_BYTES = 64 * 1024 * 1024  # the reference's max pending per client


@dataclass(frozen=True, slots=True)
class Reply:
    hdr: bytes
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class Answer:
    """The replies to send, and the highest sequence they reveal.

    The sender waits for `reveal` to commit first, so a reader never sees a
    write its publisher has not been acknowledged for (0: nothing to wait for).
    """

    replies: list[Reply]
    reveal: int = 0


class BadDirectRequest(Exception):
    """The request is refused with a status-only reply (`reply.hdr`)."""

    def __init__(self, hdr: bytes) -> None:
        super().__init__(hdr.decode())
        self.hdr = hdr


@dataclass(slots=True)
class DirectRequest:
    """JSApiMsgGetRequest: zero values mean "not set", as the reference reads them."""

    seq: int = 0
    last_by_subj: str = ""
    next_by_subj: str = ""
    batch: int = 0
    max_bytes: int = 0
    start_time: int | None = None  # ns since the epoch
    multi_last: list[str] = field(default_factory=list)
    up_to_seq: int = 0
    up_to_time: int | None = None
    no_hdr: bool = False


# -- request decoding -------------------------------------------------------------------

_U64 = (0, 2**64 - 1)
_I64 = (-(2**63), 2**63 - 1)
_KINDS: dict[str, str] = {
    "seq": "u64",
    "last_by_subj": "str",
    "next_by_subj": "str",
    "batch": "int",
    "max_bytes": "int",
    "start_time": "time",
    "multi_last": "strs",
    "up_to_seq": "u64",
    "up_to_time": "time",
    "no_hdr": "bool",
}


class _IntLit(str):
    """An integer literal as written: Go checks it against the field's type."""


class _FloatLit(str):
    """A number with a fraction or exponent: never valid for the integer fields."""


class _Object(list[tuple[str, Any]]):
    """A JSON object's members in document order (Go lets the last duplicate win)."""


def parse_request(body: bytes, subject_key: str) -> DirectRequest:
    """Validate a DIRECT.GET body; `subject_key` is the subject in the request subject."""
    if subject_key:
        req = _decode(body) if body else DirectRequest()
        if (
            req.last_by_subj
            or req.next_by_subj
            or req.multi_last
            or req.seq
            or req.batch
            or req.start_time is not None
            or req.up_to_seq
            or req.up_to_time is not None
        ):
            raise BadDirectRequest(BAD_REQUEST)
        req.last_by_subj = subject_key
        return req
    if not body:
        raise BadDirectRequest(EMPTY_REQUEST)
    req = _decode(body)
    seq, last, nxt, multi = req.seq, req.last_by_subj, req.next_by_subj, req.multi_last
    timed = req.start_time is not None
    if not (seq or last or nxt or multi or timed):
        raise BadDirectRequest(EMPTY_REQUEST)
    if (
        (seq and (last or timed))
        or (last and (timed or nxt or req.batch > 0 or multi))
        or (nxt and multi)
        or (req.up_to_seq and req.up_to_time is not None)
    ):
        raise BadDirectRequest(BAD_REQUEST)
    return req


def _decode(body: bytes) -> DirectRequest:
    try:
        doc = json.loads(
            body.decode("utf-8", "replace"),
            object_pairs_hook=_Object,
            parse_int=_IntLit,
            parse_float=_FloatLit,
            parse_constant=_no_constant,
        )
        req = DirectRequest()
        if doc is None:  # Go decodes `null` into a struct as "nothing set"
            return req
        if not isinstance(doc, _Object):
            raise ValueError("not an object")
        for key, value in doc:
            name = key.casefold()
            kind = _KINDS.get(name)
            if kind is not None and value is not None:
                setattr(req, name, _field(kind, value))
        return req
    except ValueError:
        raise BadDirectRequest(MALFORMED) from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _field(kind: str, value: Any) -> Any:
    """One member converted as Go converts it into the field's type (ValueError if not)."""
    if kind in ("u64", "int"):
        lo, hi = _U64 if kind == "u64" else _I64
        if not isinstance(value, _IntLit) or not lo <= int(value) <= hi:
            raise ValueError(f"not a {kind}")
        if kind == "u64" and value.startswith("-"):  # "-0" is no uint64 either
            raise ValueError("negative")
        return int(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError("not a bool")
        return value
    if kind == "str":
        if type(value) is not str:
            raise ValueError("not a string")
        return value
    if kind == "strs":
        if not isinstance(value, list) or isinstance(value, _Object):
            raise ValueError("not an array")
        if any(v is not None and type(v) is not str for v in value):
            raise ValueError("not an array of strings")
        return [v or "" for v in value]
    if type(value) is not str:
        raise ValueError("not a time")
    return parse_rfc3339(value)


# -- answers ----------------------------------------------------------------------------


def answer(stream: Stream, req: DirectRequest) -> Answer:
    """Everything the reference sends back for a valid request, in order."""
    if req.multi_last:
        return _multi_last(stream, req)
    return _get(stream, req)


def _get(stream: Stream, req: DirectRequest) -> Answer:
    """seq / last_by_subj / next_by_subj / start_time, alone or as a batch."""
    store = stream.store
    seq = seq_at_time(store, req.start_time) if req.start_time is not None else req.seq
    if not req.batch:
        msg = _one(store, req, seq)
        if msg is None:
            return Answer([Reply(NOT_FOUND)])
        return Answer([_reply(stream.name, msg, {}, no_hdr=req.no_hdr)], msg.seq)
    subject = req.next_by_subj or ">"
    valid = is_valid_subject(subject)
    pending = count(store.seqs_for(subject, seq)) if valid else 0
    limit = req.max_bytes or DEFAULT_MAX_BYTES
    out: list[Reply] = []
    sent = last_seq = 0
    for _ in range(req.batch):  # a negative batch sends only the EOB, as the reference does
        msg = store.load_next(seq, subject) if valid else None
        if msg is None:
            if not out:
                return Answer([Reply(NOT_FOUND)])
            break
        seq = msg.seq + 1
        pending = max(pending - 1, 0)
        extra = {"Nats-Num-Pending": str(pending), "Nats-Last-Sequence": str(last_seq)}
        out.append(_reply(stream.name, msg, extra, no_hdr=req.no_hdr))
        last_seq = msg.seq
        sent += _size(msg)
        if sent >= limit:
            break
    eob = f"NATS/1.0 204 EOB\r\nNats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last_seq}"
    out.append(Reply(eob.encode() + b"\r\n\r\n"))
    return Answer(out, last_seq)


def _one(store: MsgStore, req: DirectRequest, seq: int) -> StoredMsg | None:
    if seq > 0 and not req.next_by_subj:
        return store.load(seq)
    subject = req.next_by_subj or req.last_by_subj
    if not is_valid_subject(subject):
        return None
    return store.load_next(seq, subject) if req.next_by_subj else store.load_last(subject)


def _multi_last(stream: Stream, req: DirectRequest) -> Answer:
    """The last message of each matching subject, oldest first, then an EOB.

    The EOB's Nats-UpTo-Sequence is the ceiling used, so a client can page
    through a consistent snapshot by repeating the request with `up_to_seq`.
    """
    store = stream.store
    state = store.state()
    up_to = req.up_to_seq
    if req.up_to_time is not None:
        up_to = seq_at_time(store, req.up_to_time)
        if up_to <= state.first_seq:
            return Answer([Reply(NO_RESULTS)])
        up_to -= 1
    if not up_to:
        up_to = state.last_seq
    elif up_to > state.last_seq and stream.config.storage == "file":
        # The reference's file store finds no block holding such a ceiling.
        return Answer([Reply(NO_RESULTS)])
    try:
        seqs = last_seqs(store, req.multi_last, up_to)
    except TooManyResults:
        return Answer([Reply(TOO_MANY)])
    if not seqs:
        return Answer([Reply(NO_RESULTS)])
    wanted = seqs[bisect_left(seqs, req.seq) :]  # `seq` is a floor: older lasts are skipped
    if req.batch > 0:
        wanted = wanted[: req.batch]
    limit = req.max_bytes or DEFAULT_MAX_BYTES
    out: list[Reply] = []
    pending = sent = last_seq = 0
    for msg in store.load_many(wanted):
        pending = len(seqs) - 1 - bisect_left(seqs, msg.seq)
        extra = {"Nats-Num-Pending": str(pending), "Nats-Last-Sequence": str(last_seq)}
        out.append(_reply(stream.name, msg, extra, no_hdr=False))  # no_hdr is not honoured
        last_seq = msg.seq
        sent += _size(msg)
        if sent >= limit:
            break
    eob = (
        f"NATS/1.0 204 EOB\r\nNats-Num-Pending: {pending}\r\n"
        f"Nats-Last-Sequence: {last_seq}\r\nNats-UpTo-Sequence: {up_to}"
    )
    out.append(Reply(eob.encode() + b"\r\n\r\n"))
    return Answer(out, max(last_seq, min(up_to, state.last_seq)))


def _size(msg: StoredMsg) -> int:
    """What counts against max_bytes: the stored message, not the headers added to it."""
    return len(msg.subject) + len(msg.hdr or b"") + len(msg.data)


def _reply(stream: str, msg: StoredMsg, extra: dict[str, str], *, no_hdr: bool) -> Reply:
    if no_hdr:
        return Reply(b"", msg.data)
    lines = {
        "Nats-Stream": stream,
        "Nats-Subject": msg.subject,
        "Nats-Sequence": str(msg.seq),
        "Nats-Time-Stamp": rfc3339(msg.ts),
        **extra,
    }
    added = "".join(f"{k}: {v}\r\n" for k, v in lines.items()).encode()
    base = msg.hdr[:-2] if msg.hdr else b"NATS/1.0\r\n"
    return Reply(base + added + b"\r\n", msg.data)
