"""Direct get: stored messages answered as messages, not JSON (what KV `get` uses).

The reply carries the stored payload and the stored header block extended with
Nats-Stream / Nats-Subject / Nats-Sequence / Nats-Time-Stamp; misses and bad
requests are status-only replies (404, 408) the clients map to errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from log.segments.api import StoredMsg
from log.stream import Stream
from log.timefmt import rfc3339

NOT_FOUND = b"NATS/1.0 404 Message Not Found\r\n\r\n"
EMPTY_REQUEST = b"NATS/1.0 408 Empty Request\r\n\r\n"
MALFORMED = b"NATS/1.0 408 Malformed Request\r\n\r\n"
BAD_REQUEST = b"NATS/1.0 408 Bad Request\r\n\r\n"
DEFAULT_MAX_BYTES = 64 * 1024 * 1024  # the reference's max pending per client


@dataclass(frozen=True, slots=True)
class Reply:
    hdr: bytes
    data: bytes = b""


class BadDirectRequest(Exception):
    """The request is refused with a status-only reply (`reply.hdr`)."""

    def __init__(self, hdr: bytes) -> None:
        super().__init__(hdr.decode())
        self.hdr = hdr


def parse_request(body: bytes, subject_key: str) -> dict[str, Any]:
    """Validate a DIRECT.GET body; `subject_key` is the subject in the request subject."""
    if subject_key:
        req = _decode(body) if body else {}
        if any(req.get(k) for k in ("last_by_subj", "next_by_subj", "multi_last", "seq", "batch")):
            raise BadDirectRequest(BAD_REQUEST)
        req["last_by_subj"] = subject_key
        return req
    if not body:
        raise BadDirectRequest(EMPTY_REQUEST)
    req = _decode(body)
    seq, last, nxt = req.get("seq"), req.get("last_by_subj"), req.get("next_by_subj")
    if not (seq or last or nxt or req.get("multi_last") or req.get("start_time")):
        raise BadDirectRequest(EMPTY_REQUEST)
    if (seq and last) or (last and nxt) or (last and req.get("batch")):
        raise BadDirectRequest(BAD_REQUEST)
    if req.get("multi_last") or req.get("start_time"):
        raise BadDirectRequest(BAD_REQUEST)  # not implemented by jetlake yet
    return req


def _decode(body: bytes) -> dict[str, Any]:
    try:
        req = json.loads(body)
    except ValueError:
        raise BadDirectRequest(MALFORMED) from None
    if not isinstance(req, dict):
        raise BadDirectRequest(MALFORMED)
    return req


def lookup(stream: Stream, req: dict[str, Any]) -> Iterator[StoredMsg]:
    """The messages a request selects, in order (one unless `batch` is set)."""
    store = stream.store
    last = req.get("last_by_subj")
    if last:
        msg = store.load_last(last)
        if msg is not None:
            yield msg
        return
    seq = int(req.get("seq") or 0)
    subject = req.get("next_by_subj") or ">"
    batch = int(req.get("batch") or 0)
    if not batch and not req.get("next_by_subj"):
        msg = store.load(seq)
        if msg is not None:
            yield msg
        return
    for _ in range(max(batch, 1)):
        msg = store.load_next(seq, subject)
        if msg is None:
            return
        yield msg
        seq = msg.seq + 1


def replies(stream: Stream, req: dict[str, Any], msgs: list[StoredMsg]) -> list[Reply]:
    """Build the reply messages; batches add pending counts and an end-of-batch marker."""
    if not msgs:
        return [Reply(NOT_FOUND)]
    if not req.get("batch"):
        return [_reply(stream.name, msgs[0], {}, no_hdr=bool(req.get("no_hdr")))]
    limit = int(req.get("max_bytes") or DEFAULT_MAX_BYTES)
    subject = req.get("next_by_subj") or ">"
    pending = sum(1 for _ in stream.store.seqs_for(subject, msgs[0].seq))
    out: list[Reply] = []
    sent = 0
    last_seq = 0
    for msg in msgs:
        pending -= 1
        extra = {"Nats-Num-Pending": str(pending), "Nats-Last-Sequence": str(last_seq)}
        out.append(_reply(stream.name, msg, extra, no_hdr=bool(req.get("no_hdr"))))
        last_seq = msg.seq
        sent += len(msg.subject) + len(msg.hdr or b"") + len(msg.data)
        if sent >= limit:
            break
    eob = f"NATS/1.0 204 EOB\r\nNats-Num-Pending: {pending}\r\nNats-Last-Sequence: {last_seq}"
    out.append(Reply(eob.encode() + b"\r\n\r\n"))
    return out


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
