"""One consumer's delivery and acknowledgement state machine, without I/O or clocks.

The asyncio shell feeds it events (a pull request, an ack, a committed
message, interest appearing on the deliver subject, a timer firing) with the
current time, and publishes the `Output`s it returns; `next_deadline` says
when to call `pump` again. Keeping the rules here means redelivery, backoff,
max_deliver, max_ack_pending and the pull-request statuses are tested with a
fake clock in microseconds, not with sleeps.

Reading follows the filter through the store's per-subject index
(`load_next(seq, filter)`), so a consumer of one subject among millions costs
what it delivers. Sequences above the stream's commit index are never read:
a message is not revealed before its publisher could have been acknowledged.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import deque
from itertools import chain
from typing import Any

from ingest.parser.subjects import subject_matches
from log.consumer_config import ConsumerConfig
from log.consumer_pull import (
    CONSUMER_STALLED,
    LAST_CONSUMER,
    LAST_STREAM,
    BadPullRequest,
    WaitQueue,
    parse_request,
    refusal,
    status,
)
from log.consumer_push import FlowControl
from log.consumer_start import count_from, start_position
from log.consumer_store import ACKED, DELIVERED, GAVE_UP
from log.consumer_wire import (
    ACK_PREFIX,
    AckResult,
    Delivery,
    Output,
    Pending,
    Status,
    StoreReader,
    headers_only,
    max_deliveries,
    nak_delay,
    terminated,
)
from log.segments.api import StoredMsg

_NS = 1_000_000_000


class Consumer:
    def __init__(
        self,
        stream: str,
        name: str,
        cfg: ConsumerConfig,
        store: StoreReader,
        *,
        created: int,
        now: int,
        committed: int,
    ) -> None:
        self.stream = stream
        self.name = name
        self.cfg = cfg
        self.store = store
        self.created = created
        self.committed = committed
        self.active = not cfg.is_push  # push: someone listens on the deliver subject
        self.dirty = False  # state changed since the owner last persisted it
        # Durable only: pending changes since the owner last persisted (consumer_store records).
        self.journal: array | None = None
        self._ack_prefix = f"{ACK_PREFIX}.{stream}.{name}."
        self._ahead: deque[StoredMsg] = deque()  # read in this pump, not yet taken
        self.dseq = 1  # next consumer sequence
        self.adflr = 0
        self.asflr = 0
        self.pending: dict[int, Pending] = {}  # by stream seq, in ascending order
        self.redelivered: dict[int, int] = {}  # stream seq -> delivery count (> 1)
        self._rdq: deque[int] = deque()
        self._rdq_set: set[int] = set()
        self.npc = 0  # messages matching the filter at or after sseq
        self.waiting = WaitQueue(cfg.max_waiting)
        self.last_delivered = 0  # ns
        self.last_acked = 0  # ns
        self.last_request = now
        self._held: tuple[StoredMsg, int] | None = None  # fetched, waiting on replay/rate
        self._hold_until = 0
        self._replay_anchor: tuple[int, int] | None = None  # (wall ns, msg ts)
        self._replay_end = committed if cfg.replay_policy == "original" else 0
        self._rate_next = 0
        self._fc = FlowControl(stream, name)
        self._next_hb = now + cfg.idle_heartbeat if cfg.idle_heartbeat else 0
        self._next_check = 0  # earliest ack deadline among pending, 0 = none
        self._upcoming: list[int] = []  # filtered: matching seqs known to the store, ascending
        self._upcoming_pos = 0
        self._upcoming_upto = 0  # the store's last seq when _upcoming was read
        self._upcoming_stale = True
        self._advisories: list[Output] = []
        self.sseq, self._lps = start_position(store, cfg, committed)
        self._lps_resume = committed if cfg.deliver_policy == "last_per_subject" else 0
        self.npc = len(self._lps) if self._lps else self.count_pending()

    # -- start position and pending count -------------------------------------

    @property
    def _filters(self) -> tuple[str, ...]:
        return self.cfg.filters or (">",)

    def count_pending(self) -> int:
        """Exact count of matching committed messages from sseq on, via the subject index."""
        if self._lps:
            return len(self._lps) + count_from(
                self.store, self._filters, self._lps_resume + 1, self.committed
            )
        return count_from(self.store, self._filters, self.sseq, self.committed)

    def needs(self, seq: int, subject: str) -> bool:
        """Whether this consumer still has to see or settle message seq (retention)."""
        if not self.matches(subject) or seq <= self.asflr:
            return False
        if self.cfg.ack_policy == "explicit":
            return seq >= self.sseq or seq in self.pending or seq in self._lps
        return True

    def matches(self, subject: str) -> bool:
        return not self.cfg.filters or any(subject_matches(f, subject) for f in self.cfg.filters)

    # -- events -----------------------------------------------------------------

    def on_commit(self, seq: int, subject: str) -> None:
        """A message was committed: count it if it is ahead of us and ours."""
        if seq > self.committed:
            self.committed = seq
        if (
            self.cfg.filters
            and not self._upcoming_stale
            and seq > self._upcoming_upto
            and self.matches(subject)
        ):
            self._upcoming.append(seq)
            if self._upcoming_pos > 4096:
                del self._upcoming[: self._upcoming_pos]
                self._upcoming_pos = 0
        if (
            seq >= self.sseq
            and self.matches(subject)
            and not (self._lps and seq <= self._lps_resume)
        ):
            self.npc += 1

    def refresh(self, committed: int) -> None:
        """Re-read positions from the store (messages committed without a callback to us)."""
        self.committed = max(self.committed, committed)
        self._upcoming_stale = True
        self.npc = self.count_pending()

    def update_config(self, cfg: ConsumerConfig) -> None:
        """Adopt an already-checked update (only the editable fields differ)."""
        self.cfg = cfg
        self._upcoming_stale = True
        self.waiting.limit = cfg.max_waiting

    def pull(self, reply: str, body: bytes, now: int) -> list[Output]:
        """A MSG.NEXT request: refuse it with a status, or queue it for `pump`."""
        cfg = self.cfg
        if cfg.is_push:
            return [Status(reply, status(409, "Consumer is push based"))]
        try:
            req = parse_request(reply, body, now)
        except BadPullRequest as bad:
            return [Status(reply, status(400, f"Bad Request - {bad}"))]
        refused = refusal(cfg, req, now)
        if refused:
            return [Status(reply, status(409, refused))]
        self.last_request = now
        out: list[Output] = []
        if self.waiting.full:
            out += self._expire_requests(now, eos=False)
        if req.no_wait:
            available = self.npc + len(self._rdq)
            if available == 0 and not req.expires:
                return [*out, Status(reply, status(404, "No Messages"))]
            if available and available < self.waiting.outstanding():
                return [*out, Status(reply, status(408, "Requests Pending"))]
        if self.waiting.full:
            if not req.heartbeat:
                out.append(Status(reply, status(409, "Exceeded MaxWaiting")))
            return out
        self.waiting.add(req)
        return out

    def drop_requests(self, description: str) -> list[Output]:
        """Answer every waiting request (consumer deleted, stream gone)."""
        return [Status(r.reply, status(409, description)) for r in self.waiting.drain()]

    def forget_request(self, reply: str) -> None:
        """Nobody listens on this reply subject any more: stop serving it."""
        for req in self.waiting:
            if req.reply == reply:
                self.waiting.remove(req)

    def ack(self, tokens: list[str], body: bytes, now: int) -> AckResult:
        """An ack on `$JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<dseq>.<ts>.<pending>`."""
        dc, sseq, dseq = int(tokens[4]), int(tokens[5]), int(tokens[6])
        kind = body.strip()
        if not kind or kind in (b"+ACK", b"+OK"):
            return self._ack(sseq, dseq, now)
        if kind.startswith(b"+NXT"):
            result = self._ack(sseq, dseq, now)
            return AckResult(False, result.done, body.strip()[4:] or b"")
        if kind.startswith(b"-NAK"):
            self._nak(sseq, dseq, kind[4:].strip(), now)
            return AckResult(True)
        if kind == b"+WPI":
            p = self.pending.get(sseq)
            if p is not None:
                p.ts = now
            return AckResult(True)
        if kind.startswith(b"+TERM"):
            if sseq not in self.pending:
                return AckResult(True)
            reason = kind[5:].strip().decode("utf-8", "replace")
            result = self._ack(sseq, dseq, now)
            result.confirm = True
            self._advisories.append(terminated(self.stream, self.name, sseq, dseq, dc, reason, now))
            return result
        return AckResult(False)

    def _ack(self, sseq: int, dseq: int, now: int) -> AckResult:
        if sseq >= self.sseq:
            return AckResult(False)
        policy = self.cfg.ack_policy
        done: list[int] = []
        if policy == "explicit":
            p = self.pending.pop(sseq, None)
            if p is not None:
                done.append(sseq)
                self._move_floor(p.dseq, sseq)
            if (self.redelivered.pop(sseq, None) or p) and self.journal is not None:
                self.journal.extend((ACKED, sseq))
            self._unqueue(sseq)
        elif policy == "all":
            if dseq <= self.adflr or sseq <= self.asflr:
                return AckResult(True)
            while self.pending:
                first = next(iter(self.pending))
                if first > sseq:
                    break
                del self.pending[first]
                self.redelivered.pop(first, None)
                self._unqueue(first)
                done.append(first)
                if self.journal is not None:
                    self.journal.extend((ACKED, first))
            self.adflr, self.asflr = dseq, sseq
        else:
            return AckResult(False)
        self.last_acked = now
        self.dirty = True
        return AckResult(True, done)

    def _move_floor(self, dseq: int, sseq: int) -> None:
        """The reference's moveAckFloor: advance only from the floor itself, up to the next gap."""
        if not self.pending:
            self.adflr, self.asflr = self.dseq - 1, self.sseq - 1
        elif dseq == self.adflr + 1:
            self.adflr, self.asflr = dseq, sseq
            for seq, p in self.pending.items():
                if seq > sseq:
                    self.adflr, self.asflr = p.dseq - 1, seq - 1
                    break

    def _nak(self, sseq: int, dseq: int, arg: bytes, now: int) -> None:
        p = self.pending.get(sseq)
        if p is None or dseq <= self.adflr or dseq >= self.dseq:
            return
        delay = nak_delay(arg)
        if delay is not None:
            self._unqueue(sseq)
            p.ts = now - self.cfg.ack_wait + delay
            self._next_check = min(self._next_check or p.ts, now + delay)
            return
        self._queue_redelivery(sseq)

    def set_active(self, active: bool, now: int) -> None:
        """Push: interest on the deliver subject came or went (the reference's rules)."""
        self.active = active
        if active:
            self._fc.reset()
            if self.cfg.idle_heartbeat:
                self._next_hb = now + self.cfg.idle_heartbeat

    def flow_control_reply(self, subject: str) -> None:
        self._fc.confirmed(subject)

    # -- delivery -------------------------------------------------------------

    def pump(self, now: int) -> list[Output]:
        """Deliver everything that can go now; answer expired requests; send heartbeats."""
        out: list[Output] = []
        if self.pending and self._next_check and now >= self._next_check:
            self._check_pending(now)
        paused = self.cfg.pause_until is not None and now < self.cfg.pause_until
        while not paused and self._can_send():
            item = self._take(now)
            if item is None:
                break
            msg, dc = item
            if not self._ready(msg, now):
                self._held = item
                break
            self._send(msg, dc, now, out)
        if not self.cfg.is_push:
            out += self._expire_requests(now, eos=True)
        elif self.cfg.idle_heartbeat and self.active and now >= self._next_hb:
            out.append(Status(self.cfg.deliver_subject, self._heartbeat()))
            self._next_hb = now + self.cfg.idle_heartbeat
        self._ahead.clear()  # read ahead for this pump only: the store may change before the next
        out += self._advisories
        self._advisories = []
        return out

    def _can_send(self) -> bool:
        if self.cfg.is_push:
            if not self.active:
                return False
            return not (self.cfg.flow_control and self._fc.blocked)
        return len(self.waiting) > 0

    def _take(self, now: int) -> tuple[StoredMsg, int] | None:
        """The next message and its delivery count: redeliveries first, then new ones."""
        if self._held is not None:
            held, self._held = self._held, None
            return held
        while self._rdq:
            seq = self._rdq.popleft()
            self._rdq_set.discard(seq)
            if seq not in self.pending:
                continue
            dc = self.redelivered.get(seq, 1) + 1
            msg = self.store.load(seq)
            if msg is None:  # deleted meanwhile (limits, purge): nothing to redeliver
                self.redelivered.pop(seq, None)
                self._move_floor(self.pending.pop(seq).dseq, seq)
                if self.journal is not None:
                    self.journal.extend((ACKED, seq))
                self.dirty = True
                continue
            return msg, dc
        if 0 < self.cfg.max_ack_pending <= len(self.pending):
            return None
        if self._lps:
            seq = self._lps.popleft()
            self.sseq = seq + 1 if self._lps else self._lps_resume + 1
            msg = self.store.load(seq)
            if msg is not None:
                self.npc -= 1
                return msg, 1
            return self._take(now)
        msg = self._load_next()
        if msg is None:
            self.npc = 0
            return None
        if self._ahead:
            self._ahead.popleft()
        self.sseq = msg.seq + 1
        self.npc -= 1
        return msg, 1

    def _load_next(self) -> StoredMsg | None:
        """The first committed message at or after sseq that the filter selects (a peek).

        Unfiltered, the store's next live sequence is O(1). Filtered, the matching
        sequences come from the subject index once (`seqs_for`) and commits append
        to that list, so a consumer never rescans the stream per message. Either
        way a run of messages is read at once (converting Arrow rows one by one
        costs more than delivering them) and kept in `_ahead` for this pump only.
        """
        if not self.cfg.filters:
            ahead = self._ahead
            if not ahead:
                ahead.extend(self.store.load_run(self.sseq, self.committed, self._run_size()))
            return ahead[0] if ahead else None
        if self._ahead:
            return self._ahead[0]
        if self._upcoming_stale:
            self._refill()
        upcoming, pos = self._upcoming, self._upcoming_pos
        while pos < len(upcoming) and upcoming[pos] < self.sseq:
            pos += 1
        while pos < len(upcoming):
            hi = min(pos + self._run_size(), len(upcoming))
            end = bisect_right(upcoming, self.committed, pos, hi)
            if end == pos:
                break
            self._upcoming_pos = pos
            self._ahead.extend(self.store.load_many(upcoming[pos:end]))
            if self._ahead:
                return self._ahead[0]
            pos = end  # all deleted meanwhile
        self._upcoming_pos = pos
        return None

    def _run_size(self) -> int:
        """How many messages to read at once: about what this pump can deliver, at most 256."""
        cfg = self.cfg
        if cfg.rate_limit_bps or self.sseq <= self._replay_end:
            return 1
        n = 256 if cfg.is_push else min(self.waiting.outstanding(), 256)
        if cfg.max_ack_pending > 0:
            n = min(n, cfg.max_ack_pending - len(self.pending))
        return max(n, 1)

    def _refill(self) -> None:
        self._upcoming_stale = False
        runs = [self.store.seqs_for(f, self.sseq) for f in self.cfg.filters]
        merged = runs[0] if len(runs) == 1 else sorted(set(chain.from_iterable(runs)))
        self._upcoming = list(merged)
        self._upcoming_pos = 0
        self._upcoming_upto = self.store.state().last_seq

    def _ready(self, msg: StoredMsg, now: int) -> bool:
        """Replay original and rate limits hold a fetched message until its time."""
        if self._replay_anchor is not None and msg.seq <= self._replay_end:
            wall, ts = self._replay_anchor
            due = wall + (msg.ts - ts)
            if now < due:
                self._hold_until = due
                return False
        elif self.cfg.replay_policy == "original" and msg.seq <= self._replay_end:
            self._replay_anchor = (now, msg.ts)
        if self.cfg.rate_limit_bps and now < self._rate_next:
            self._hold_until = self._rate_next
            return False
        return True

    def _send(self, msg: StoredMsg, dc: int, now: int, out: list[Output]) -> None:
        cfg = self.cfg
        dseq = self.dseq
        seq = msg.seq
        reply = f"{self._ack_prefix}{dc}.{seq}.{dseq}.{msg.ts}.{max(self.npc, 0)}"
        hdr, data = msg.hdr, msg.data
        if cfg.headers_only:
            hdr, data = headers_only(hdr, len(data)), b""
        size = len(msg.subject) + len(reply) + (len(hdr) if hdr else 0) + len(data)
        if cfg.is_push:
            target = cfg.deliver_subject
        else:
            target = self.waiting.claim(size, now, out)
            if target is None:  # no request could take it: put it back
                self._held = (msg, dc)
                self._hold_until = 0
                return
        self.dseq = dseq + 1
        if cfg.ack_policy == "none":
            self.adflr, self.asflr = dseq, seq
        else:
            p = self.pending.get(seq)
            if p is None:
                self.pending[seq] = Pending(dseq, now)
            else:
                p.dseq, p.ts = dseq, now
            if self.journal is not None:
                self.journal.extend((DELIVERED, seq, dseq, dc, now))
            deadline = now + self._ack_wait(dc)
            self._next_check = min(self._next_check or deadline, deadline)
        if dc > 1:
            self.redelivered[seq] = dc
        self.last_delivered = now
        self.dirty = True
        out.append(Delivery(target, reply, msg, hdr, data))
        if cfg.rate_limit_bps:
            self._rate_next = max(self._rate_next, now) + size * 8 * _NS // cfg.rate_limit_bps
        if cfg.is_push:
            if cfg.idle_heartbeat:
                self._next_hb = now + cfg.idle_heartbeat
            if cfg.flow_control and (ask := self._fc.sent(size)):
                out.append(Status(cfg.deliver_subject, status(100, "FlowControl Request"), ask))

    def _heartbeat(self) -> bytes:
        headers = {LAST_CONSUMER: str(self.dseq - 1), LAST_STREAM: str(self.sseq - 1)}
        if self._fc.reply:
            headers[CONSUMER_STALLED] = self._fc.reply
        return status(100, "Idle Heartbeat", headers)

    def _expire_requests(self, now: int, *, eos: bool) -> list[Output]:
        """Answer requests that expired (408) or, at the end of the stream, no_wait ones (404)."""
        out: list[Output] = []
        idle = eos and not self._rdq and self._held is None and not self._more_available()
        for req in self.waiting:
            if req.expires and now >= req.expires:
                self.waiting.remove(req)
                out.append(Status(req.reply, status(408, "Request Timeout", req.remaining())))
            elif req.no_wait and idle and (not req.expires or req.delivered > 0):
                self.waiting.remove(req)
                out.append(Status(req.reply, status(404, "No Messages")))
            elif req.heartbeat and now >= req.next_heartbeat:
                out.append(Status(req.reply, self._heartbeat()))
                req.next_heartbeat = now + req.heartbeat
        return out

    def _more_available(self) -> bool:
        if 0 < self.cfg.max_ack_pending <= len(self.pending):
            return False
        return bool(self._lps) or self._load_next() is not None

    # -- ack deadlines --------------------------------------------------------

    def _ack_wait(self, dc: int) -> int:
        backoff = self.cfg.backoff
        if backoff:
            return backoff[min(max(dc - 1, 0), len(backoff) - 1)]
        return self.cfg.ack_wait

    def _check_pending(self, now: int) -> None:
        """Queue every message whose ack wait ran out, in stream order."""
        expired: list[int] = []
        nxt = 0
        for seq, p in self.pending.items():
            deadline = p.ts + self._ack_wait(self.redelivered.get(seq, 1))
            if deadline <= now:
                if seq not in self._rdq_set:
                    expired.append(seq)
            elif not nxt or deadline < nxt:
                nxt = deadline
        for seq in expired:
            dc = self.redelivered.get(seq, 1)
            if 0 < self.cfg.max_deliver <= dc:  # its last delivery went unacked: give up on it
                self._advisories.append(max_deliveries(self.stream, self.name, seq, dc, now))
                self._move_floor(self.pending.pop(seq).dseq, seq)
                if self.journal is not None:
                    self.journal.extend((GAVE_UP, seq))
                self.dirty = True
                continue
            self._queue_redelivery(seq)
            self.pending[seq].ts = now  # until it goes out again, it cannot expire twice
        self._next_check = nxt

    def _queue_redelivery(self, seq: int) -> None:
        if seq not in self._rdq_set:
            self._rdq.append(seq)
            self._rdq_set.add(seq)

    def _unqueue(self, seq: int) -> None:
        if seq in self._rdq_set:
            self._rdq_set.discard(seq)
            self._rdq.remove(seq)

    def next_deadline(self, now: int) -> int | None:
        """When `pump` has timed work next (ns), or None."""
        times = [self._next_check] if self.pending and self._next_check else []
        if self._held is not None and self._hold_until > now:
            times.append(self._hold_until)
        if self.cfg.pause_until is not None and now < self.cfg.pause_until:
            times.append(self.cfg.pause_until)
        if self.cfg.is_push:
            if self.cfg.idle_heartbeat and self.active:
                times.append(self._next_hb)
        else:
            for req in self.waiting:
                if req.expires:
                    times.append(req.expires)
                if req.heartbeat:
                    times.append(req.next_heartbeat)
        return min(times) if times else None

    # -- persistence ------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything a durable needs to resume exactly after a crash."""
        return {
            "dseq": self.dseq,
            "sseq": self.sseq,
            "adflr": self.adflr,
            "asflr": self.asflr,
            "pending": [[s, p.dseq, p.ts] for s, p in self.pending.items()],
            "redelivered": [[s, n] for s, n in self.redelivered.items()],
            "lps": list(self._lps),
            "lps_resume": self._lps_resume,
            "last_delivered": self.last_delivered,
            "last_acked": self.last_acked,
        }

    def restore(self, state: dict[str, Any], now: int) -> None:
        """Resume from a snapshot: unacked messages are redelivered once their ack wait runs out."""
        self.dseq, self.sseq = int(state["dseq"]), int(state["sseq"])
        self.adflr, self.asflr = int(state["adflr"]), int(state["asflr"])
        self.pending = {int(s): Pending(int(d), int(ts)) for s, d, ts in sorted(state["pending"])}
        self.redelivered = {int(s): int(n) for s, n in state["redelivered"]}
        self._lps = deque(int(s) for s in state.get("lps", []))
        self._lps_resume = int(state.get("lps_resume", 0))
        self.last_delivered = int(state.get("last_delivered", 0))
        self.last_acked = int(state.get("last_acked", 0))
        self._upcoming_stale = True
        self.npc = self.count_pending()
        self._next_check = min(
            (p.ts + self._ack_wait(self.redelivered.get(s, 1)) for s, p in self.pending.items()),
            default=0,
        )
