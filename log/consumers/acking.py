"""A consumer's acknowledgements and redeliveries: acks of every kind, the ack floor,
ack-wait deadlines, backoff, max_deliver.

Kept apart from delivery (`log.consumers.consumer`) because the two change for
different reasons: what a client may say about a message it holds, and what goes
out next. `Consumer` inherits these rules; the attributes below are its own,
named here so each half reads on its own. Pure like the consumer: time comes in.
"""

from __future__ import annotations

from collections import deque
from itertools import takewhile

from ingest.parser.headers import header_value
from log.consumers.acks import moved_floor
from log.consumers.config import ConsumerConfig
from log.consumers.pull import LAST_CONSUMER, LAST_STREAM
from log.consumers.push import FlowControl
from log.consumers.store import ACKED, GAVE_UP
from log.consumers.wire import (
    CONFIRMED,
    IGNORED,
    AckResult,
    Output,
    max_deliveries,
    nak_delay,
    terminated,
)


class Acking:
    """Ack and redelivery rules over the consumer's pending state."""

    stream: str
    name: str
    cfg: ConsumerConfig
    journal: list[int] | None
    finished: list[int]
    dirty: bool
    dseq: int
    sseq: int
    adflr: int
    asflr: int
    pending: dict[int, tuple[int, int]]
    redelivered: dict[int, int]
    last_acked: int
    _rdq: deque[int]
    _rdq_set: set[int]
    _fc: FlowControl
    _next_check: int
    _advisories: list[Output]

    def ack(self, dc: int, sseq: int, dseq: int, body: bytes, now: int) -> AckResult:
        """An ack on `$JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<dseq>.<ts>.<pending>`.

        What the ack settles lands in `finished` for the owner's retention rules.
        """
        if self.cfg.ack_policy == "flow_control":
            return IGNORED  # acks ride on flow-control replies only
        kind = body.strip()
        if not kind or kind == b"+ACK" or kind == b"+OK":
            return self._ack(sseq, dseq, now)
        if kind.startswith(b"+NXT"):
            self._ack(sseq, dseq, now)
            return AckResult(False, kind[4:])
        if kind.startswith(b"-NAK"):
            self._nak(sseq, dseq, kind[4:].strip(), now)
            return CONFIRMED
        if kind == b"+WPI":
            p = self.pending.get(sseq)
            if p is not None:
                self.pending[sseq] = (p[0], now)
            return CONFIRMED
        if kind.startswith(b"+TERM"):
            if sseq not in self.pending:
                return CONFIRMED
            reason = kind[5:].strip().decode("utf-8", "replace")
            self._ack(sseq, dseq, now)
            self._advisories.append(terminated(self.stream, self.name, sseq, dseq, dc, reason, now))
            return CONFIRMED
        return IGNORED

    def plain_acks(self, seqs: list[int], now: int) -> None:
        """`+ACK`s without a reply, (delivered, stream seq, consumer seq) flat, as `ack`
        takes each; under the explicit policy (a fetch + ack's, one per message) in one
        loop rather than a call of `ack` per message."""
        if self.cfg.ack_policy != "explicit":
            for i in range(0, len(seqs), 3):
                self.ack(seqs[i], seqs[i + 1], seqs[i + 2], b"", now)
            return
        top = self.sseq
        sent = [sseq for sseq in seqs[1::3] if sseq < top]  # later ones were never sent
        if sent:
            self._ack_explicit(sent, now)

    def _ack_explicit(self, seqs: list[int], now: int) -> None:
        pending, redelivered, finished = self.pending, self.redelivered, self.finished
        journal, queued = self.journal, self._rdq_set
        for sseq in seqs:
            p = pending.pop(sseq, None)
            if p is not None:
                finished.append(sseq)
                self._move_floor(p[0], sseq)
            if (redelivered.pop(sseq, None) or p) and journal is not None:
                journal.extend((ACKED, sseq))
            if sseq in queued:
                self._unqueue(sseq)
        self.last_acked = now
        self.dirty = True

    def _ack(self, sseq: int, dseq: int, now: int) -> AckResult:
        if sseq >= self.sseq:
            return IGNORED
        policy = self.cfg.ack_policy
        if policy == "explicit":
            self._ack_explicit([sseq], now)
            return CONFIRMED
        if policy not in ("all", "flow_control"):
            return IGNORED
        if dseq <= self.adflr or sseq <= self.asflr:
            return CONFIRMED
        journal = self.journal
        covered = list(takewhile(lambda seq: seq <= sseq, self.pending))
        for seq in covered:
            del self.pending[seq]
            self.redelivered.pop(seq, None)
            self._unqueue(seq)
            if journal is not None:
                journal.extend((ACKED, seq))
        self.finished += covered
        self.adflr, self.asflr = dseq, sseq
        self.last_acked = now
        self.dirty = True
        return CONFIRMED

    def _move_floor(self, dseq: int, sseq: int) -> None:
        moved = moved_floor(self.pending, self.adflr, dseq, sseq, self.dseq, self.sseq)
        if moved is not None:
            self.adflr, self.asflr = moved

    def _nak(self, sseq: int, dseq: int, arg: bytes, now: int) -> None:
        p = self.pending.get(sseq)
        if p is None or dseq <= self.adflr or dseq >= self.dseq:
            return
        delay = nak_delay(arg)
        if delay is not None:
            self._unqueue(sseq)
            ts = now - self.cfg.ack_wait + delay
            self.pending[sseq] = (p[0], ts)
            self._next_check = min(self._next_check or ts, now + delay)
            return
        self._queue_redelivery(sseq)

    def flow_control_reply(self, subject: str, hdr: bytes | None, now: int) -> None:
        """A flow-control reply; with `ack_policy: flow_control` its Nats-Last-Stream and
        Nats-Last-Consumer headers acknowledge everything up to them (as an ack-all)."""
        if self._fc.confirmed(subject) and hdr and self.cfg.ack_policy == "flow_control":
            sseq = _header_int(hdr, LAST_STREAM)
            if sseq > 0:
                self._ack(sseq, max(_header_int(hdr, LAST_CONSUMER), 0), now)

    # -- ack deadlines --------------------------------------------------------

    def _ack_wait(self, dc: int) -> int:
        backoff = self.cfg.backoff
        if backoff:
            return backoff[min(max(dc - 1, 0), len(backoff) - 1)]
        return self.cfg.ack_wait

    def _deadline(self, seq: int) -> int:
        """When a pending message's ack wait runs out."""
        return self.pending[seq][1] + self._ack_wait(self.redelivered.get(seq, 1))

    def _check_pending(self, now: int) -> None:
        """Queue every message whose ack wait ran out, in stream order."""
        if self.cfg.ack_policy == "flow_control":  # no ack wait: nothing is redelivered
            self._next_check = 0
            return
        expired: list[int] = []
        nxt = 0
        for seq in self.pending:
            deadline = self._deadline(seq)
            if deadline <= now:
                if seq not in self._rdq_set:
                    expired.append(seq)
            elif not nxt or deadline < nxt:
                nxt = deadline
        for seq in expired:
            dc = self.redelivered.get(seq, 1)
            if 0 < self.cfg.max_deliver <= dc:  # its last delivery went unacked: give up on it
                self._advisories.append(max_deliveries(self.stream, self.name, seq, dc, now))
                self._move_floor(self.pending.pop(seq)[0], seq)
                if self.journal is not None:
                    self.journal.extend((GAVE_UP, seq))
                self.dirty = True
                continue
            self._queue_redelivery(seq)
            self.pending[seq] = (self.pending[seq][0], now)  # it cannot expire twice meanwhile
        self._next_check = nxt

    def _queue_redelivery(self, seq: int) -> None:
        if seq not in self._rdq_set:
            self._rdq.append(seq)
            self._rdq_set.add(seq)

    def _unqueue(self, seq: int) -> None:
        if seq in self._rdq_set:
            self._rdq_set.discard(seq)
            self._rdq.remove(seq)


def _header_int(hdr: bytes, name: str) -> int:
    value = header_value(hdr, name.encode())
    return int(value) if value and value.isdigit() else 0
