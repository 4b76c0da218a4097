"""Fast batch publish (`allow_batched`, API level 4): the reply-subject protocol and its flow.

Unlike an atomic batch nothing is staged: each message is checked and proposed
as it comes, so a batch has no size limit and is not atomic. What makes it a
batch is its reply subject, `<prefix>.<id>.<flow>.<gap>.<seq>.<op>.$FI`, where
op 0 starts, 1 appends, 2 commits with this message, 3 commits without it
(end of batch) and 4 pings. Instead of a PubAck per message the publisher gets
flow acks (`{"type":"ack","seq":n,"msgs":m}`: batch messages up to n are
stored, the next ack comes m messages later), a gap report when a sequence
is missing (`gap: fail` then ends the batch, `gap: ok` goes on), an error
report for a message the stream refused, and one PubAck at the end. m starts
at the flow the publisher asked for (at most 500) when the batch is the
stream's only one, else at 1, and moves toward 500 / batches in flight.

The leader runs the batches. On a replicated stream each message's entry also
carries where its batch stands (`log.streams.entries.FastMark`), which every other
member records as it applies (`follow`), so a new leader carries the batches on:
it tells each publisher, with a flow ack for the last message stored, where to
go on from (`lead`), as the reference's new leader does. Pure: time comes in as
an argument and every reply goes out through the `Send` it is given, in the
reference's order (nats-server 2.14, `jetstream_batching.go`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from log import errors, publish
from log.batches.limits import SERVER, ServerBatches
from log.errors import ApiError
from log.streams.entries import FastMark, Publish

SUFFIX = ".$FI"
OP_START, OP_APPEND, OP_COMMIT, OP_COMMIT_EOB, OP_PING = range(5)
MAX_ID_LEN = 64
MAX_FLOW = 500  # the most messages one flow ack covers
DEFAULT_FLOW = 10  # a flow token that is not a positive number
MAX_INFLIGHT = 1000  # batches in flight per stream, the reference's default
TIMEOUT_NS = 10_000_000_000  # a batch silent this long is forgotten
_UINT16 = 65_535

Send = Callable[[bytes], None]
SendTo = Callable[[str, bytes | None, bytes], None]  # subject, header block, body


def disabled() -> ApiError:
    return ApiError(400, 10205, "batch publish is disabled")


def invalid_pattern() -> ApiError:
    return ApiError(400, 10206, "batch publish pattern is invalid")


def invalid_id() -> ApiError:
    return ApiError(400, 10207, "batch publish ID is invalid")


def unknown_id() -> ApiError:
    return ApiError(400, 10208, "batch publish ID unknown")


def too_many_inflight() -> ApiError:
    return ApiError(429, 10211, "batch publish too many inflight")


@dataclass(frozen=True, slots=True)
class FastRef:
    """What a `$FI` reply subject says about its message (`valid` False: malformed)."""

    batch_id: str = ""
    seq: int = 0
    flow: int = DEFAULT_FLOW
    gap_ok: bool = False
    op: int = OP_START
    valid: bool = True
    reply: str = field(default="", compare=False)  # the subject it was parsed from

    @property
    def commit(self) -> bool:
        return self.op in (OP_COMMIT, OP_COMMIT_EOB)


_MALFORMED = FastRef(valid=False)


def parse(reply: str | None) -> FastRef | None:
    """The fast batch a reply subject names; None for an ordinary reply.

    Read from the right, as the reference reads it, so the prefix may hold dots."""
    if not reply or len(reply) <= len(SUFFIX) or not reply.endswith(SUFFIX):
        return None
    tokens = reply[: -len(SUFFIX)].split(".")
    if len(tokens) < 6:  # prefix, id, flow, gap, seq, op
        return _MALFORMED
    batch_id, flow_text, gap, seq_text, op_text = tokens[-5:]
    op, seq = _go_int(op_text), _go_int(seq_text)
    if op is None or op > OP_PING or seq is None or not 0 < seq < 2**64 - 1:
        return _MALFORMED
    if (op == OP_START) != (seq == 1) and op in (OP_START, OP_APPEND):
        return _MALFORMED  # start is seq 1, append comes after it
    if (op == OP_COMMIT_EOB and seq == 1) or gap not in ("ok", "fail"):
        return _MALFORMED  # an end marker needs something to end
    flow = _go_int(flow_text) or 0
    flow = DEFAULT_FLOW if flow <= 0 else min(flow, _UINT16)
    return FastRef(batch_id, seq, flow, gap == "ok", op, reply=reply)


def _go_int(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() else None


def flow_ack(seq: int, msgs: int) -> bytes:
    return b'{"type":"ack","seq":%d,"msgs":%d}' % (seq, msgs)


def flow_gap(expected: int, seq: int) -> bytes:
    return b'{"type":"gap","last_seq":%d,"seq":%d}' % (expected, seq)


def flow_err(seq: int, error: ApiError) -> bytes:
    body = {"type": "err", "seq": seq, "error": error.to_json()}
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass(slots=True)
class Batch:
    """One batch in flight: `lseq` the last batch seq taken, `pseq` the last stored (all
    before it too, unless gaps were allowed), `fseq` the last one a flow ack covered."""

    batch_id: str
    gap_ok: bool
    max_flow: int
    flow: int
    deadline: int
    lseq: int = 0
    pseq: int = 0
    fseq: int = 0
    sseq: int = 0  # the stream seq of the last message stored
    pending: int = 0  # proposed, not yet stored
    committing: bool = False
    reply: str = ""  # where a new leader sends its flow ack (known from `follow`)


class FastBatches:
    """A stream leader's fast batches in flight."""

    def __init__(self, stream: str, server: ServerBatches = SERVER) -> None:
        self.stream = stream
        self._batches: dict[str, Batch] = {}
        self._server = server
        server.track_fast(self)

    def __len__(self) -> int:
        return len(self._batches)

    def clear(self) -> None:
        self._batches.clear()

    def begin(self, ref: FastRef, now: int, send: Send, *, above_level: bool) -> Batch | None:
        """Take one message (`ref` valid, its id checked); the batch if the message is
        to be checked and proposed, None if this call answered all there was to answer."""
        b = self._batches.get(ref.batch_id)
        if b is not None and not b.committing and b.deadline <= now:
            del self._batches[ref.batch_id]
            b = None
        if b is None:
            if ref.seq != 1:
                send(publish.error_ack(self.stream, unknown_id()))
                return None
            self._sweep(now)
            if len(self._batches) >= MAX_INFLIGHT or self._server.fast_full():
                send(publish.error_ack(self.stream, too_many_inflight()))
                return None
            flow = min(MAX_FLOW, ref.flow) if not self._batches else 1
            b = Batch(ref.batch_id, ref.gap_ok, ref.flow, flow, now + TIMEOUT_NS)
            self._batches[ref.batch_id] = b
        if above_level:
            del self._batches[ref.batch_id]
            send(publish.error_ack(self.stream, errors.required_api_level()))
            return None
        if not b.committing:
            b.deadline = now + TIMEOUT_NS
        if ref.op == OP_PING:
            self._ping(b, ref, send)
            return None
        if b.committing:
            return None  # the publisher waits for the PubAck; nothing more is taken
        b.lseq += 1
        if b.lseq != ref.seq:
            if ref.seq > b.lseq:
                send(flow_gap(b.lseq, ref.seq))
            if not (b.gap_ok and ref.seq > b.lseq):
                b.lseq -= 1
                self._commit(b, send)
                return None
            b.lseq = ref.seq
        if ref.commit:
            if ref.op == OP_COMMIT_EOB:
                b.lseq -= 1
                if b.pending == 0:
                    b.pseq = b.lseq
            self._commit(b, send)
            if ref.op == OP_COMMIT_EOB:
                return None
        elif ref.seq == 1:
            send(flow_ack(0, b.flow))
        return b

    def mark(self, ref: FastRef) -> FastMark:
        """What the message's entry carries for the other members."""
        return FastMark(ref.batch_id, ref.seq, ref.gap_ok, ref.flow, ref.commit, ref.reply)

    def follow(self, run: Sequence[Publish], now: int) -> None:
        """Another member's messages applied here: record where their batches stand."""
        for entry in run:
            mark = entry.fast
            if mark is None:
                continue
            if mark.commit:
                self._batches.pop(mark.batch_id, None)
                continue
            b = self._batches.get(mark.batch_id)
            if b is None:
                self._sweep(now)
                b = Batch(mark.batch_id, mark.gap_ok, mark.flow, 1, now)
                self._batches[mark.batch_id] = b
            b.deadline = now + TIMEOUT_NS
            b.sseq, b.pseq, b.lseq = entry.seq, mark.seq, mark.seq
            b.reply = mark.reply

    def lead(self, now: int, send_to: SendTo | None) -> None:
        """This member leads now, with every earlier entry applied: each batch goes on from
        its last stored message, and its publisher hears so (a flow ack for that message,
        the flow started afresh)."""
        self._sweep(now)
        for b in self._batches.values():
            b.flow = min(MAX_FLOW, b.max_flow) if len(self._batches) == 1 else 1
            b.committing, b.pending = False, 0
            b.fseq = b.lseq = b.pseq
            b.deadline = now + TIMEOUT_NS
            if b.reply and send_to is not None:
                send_to(b.reply, None, flow_ack(b.fseq, b.flow))

    def proposed(self, b: Batch) -> None:
        b.pending += 1

    def refused(
        self, b: Batch, ref: FastRef, error: ApiError | None, duplicate_of: int, send: Send
    ) -> None:
        """The stream refused the message (`error`), or it repeats a msg id stored at
        `duplicate_of` (error None): the batch goes on only where gaps are allowed."""
        if error is None:
            if b.pending == 0:
                b.pseq = ref.seq
                self._flow(b, send)
            if not ref.commit:
                return
        if not b.gap_ok and b.lseq == 1:  # its first message: answered as a plain publish
            del self._batches[b.batch_id]
            if error is None:
                ack = publish.duplicate_ack(self.stream, duplicate_of)[:-1]
                send(b'%s,"batch":%s,"count":%d}' % (ack, _quoted(b.batch_id), ref.seq))
            else:
                send(publish.error_ack(self.stream, error))
            return
        if error is not None:
            send(flow_err(ref.seq, error))
            if b.gap_ok and not ref.commit:
                return
            b.lseq -= 1
            if b.pending == 0:
                b.pseq = b.lseq
        self._commit(b, send)

    def stored(self, ref: FastRef, stream_seq: int, send: Send) -> None:
        """A message of the batch committed at `stream_seq`: a flow ack when one is due,
        the PubAck once a committing batch has everything stored."""
        b = self._batches.get(ref.batch_id)
        if b is None:
            return
        if b.pending > 0:
            b.pending -= 1
        b.sseq = stream_seq
        b.pseq = b.lseq if b.pending == 0 else ref.seq
        if b.committing and b.lseq == b.pseq:
            del self._batches[b.batch_id]
            send(publish.batch_ack(self.stream, stream_seq, b.batch_id, b.lseq))
            return
        self._flow(b, send)

    def _ping(self, b: Batch, ref: FastRef, send: Send) -> None:
        """A ping reports a gap up to the publisher's last seq, then repeats the last
        flow ack (unless a new one or the PubAck just went out)."""
        repeat = True
        if ref.seq > b.lseq:
            send(flow_gap(b.lseq + 1, ref.seq + 1))
            if b.gap_ok:
                b.lseq = ref.seq
                if b.pending == 0:
                    b.pseq = b.lseq
                repeat = not self._flow(b, send)
            elif self._commit(b, send):
                repeat = False
        if repeat:
            send(flow_ack(b.fseq, b.flow))

    def _commit(self, b: Batch, send: Send) -> bool:
        """End the batch; True if everything is stored and the PubAck went out now."""
        b.committing = True
        if b.lseq != b.pseq:
            return False  # the PubAck goes out as the last message is stored
        self._batches.pop(b.batch_id, None)
        send(publish.batch_ack(self.stream, b.sseq, b.batch_id, b.lseq))
        return True

    def _flow(self, b: Batch, send: Send) -> bool:
        """A flow ack if `flow` more messages were stored since the last, with the flow
        moved (doubled or halved) toward this batch's share; True if one went out."""
        if b.pseq < b.fseq + b.flow:
            return False
        b.fseq += (b.pseq - b.fseq) // b.flow * b.flow
        share = min(max(MAX_FLOW // len(self._batches), 1), b.max_flow)
        if b.flow < share:
            b.flow = min(b.flow * 2, share)
        elif b.flow > share:
            b.flow = max(b.flow // 2, share)
        send(flow_ack(b.fseq, b.flow))
        return True

    def _sweep(self, now: int) -> None:
        """Forget the batches silent past their deadline (the reference's timers)."""
        for batch_id in [k for k, b in self._batches.items() if b.deadline <= now]:
            if not self._batches[batch_id].committing:
                del self._batches[batch_id]


def _quoted(text: str) -> bytes:
    return json.dumps(text).encode()
