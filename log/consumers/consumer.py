"""One consumer's delivery and acknowledgement state machine, without I/O or clocks.

The asyncio shell feeds it events (a pull request, an ack, a committed
message, interest appearing on the deliver subject, a timer firing) with the
current time, and publishes the `Output`s it returns; `next_deadline` says
when to call `pump` again. Keeping the rules here (what acks do is in
`log.consumers.acking`, which `Consumer` inherits) means redelivery, backoff,
max_deliver, max_ack_pending and the pull-request statuses are tested with a
fake clock in microseconds, not with sleeps.

Reading follows the filter through the store's per-subject index
(`start.ReadAhead`), so a consumer of one subject among millions costs
what it delivers. Sequences above the stream's commit index are never read:
a message is not revealed before its publisher could have been acknowledged.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from ingest.parser.outlet import dotted
from ingest.parser.subjects import subject_matches
from log.consumers import errors as cerr
from log.consumers.acking import Acking
from log.consumers.config import ConsumerConfig
from log.consumers.priority import Priority, Verdict, with_pin
from log.consumers.pull import (
    CONSUMER_STALLED,
    LAST_CONSUMER,
    LAST_STREAM,
    BadPullRequest,
    PullRequest,
    WaitQueue,
    parse_request,
    refusal,
    status,
)
from log.consumers.push import FlowControl
from log.consumers.start import ReadAhead, count_from, seq_at_time, start_position
from log.consumers.store import ACKED, DELIVERED, RESET
from log.consumers.wire import (
    ACK_PREFIX,
    Deliveries,
    Output,
    Status,
    StoreReader,
    headers_only,
)
from log.segments.api import StoredMsg

_NS = 1_000_000_000
# Deliveries per pump: the owner writes each slice before the next is read, so the client
# works meanwhile (a whole flow-control window in one pump idled it for tens of ms). A pull
# batch of up to a slice goes out in one write, as the reference's does: a client whose
# pending limit is below the batch drops the excess as the reference's clients do (smaller
# pull slices got a few % on pull fetch + ack, but let such a client take the batch whole).
SLICE = 256


class Consumer(Acking):
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
        self._adopt(cfg)
        self.store = store
        self.created = created
        self.committed = committed
        self.active = not cfg.is_push  # push: someone listens on the deliver subject
        self.dirty = False  # state changed since the owner last persisted it
        # Durable only: changes since the owner last persisted, as `store`'s int64
        # records (a list: extending an array converts each int, five times the cost).
        self.journal: list[int] | None = None
        # Stream seqs this consumer is done with since the owner last took them (retention).
        self.finished: list[int] = []
        self._ack_prefix = f"{ACK_PREFIX}.{stream}.{name}.".encode("utf-8", "surrogateescape")
        self._reader = ReadAhead(store, cfg.filters)
        self.dseq = 1  # next consumer sequence
        self.adflr = 0
        self.asflr = 0
        # Stream seq -> (consumer seq, ns the ack wait counts from), in ascending seq order.
        self.pending: dict[int, tuple[int, int]] = {}
        self.redelivered: dict[int, int] = {}  # stream seq -> delivery count (> 1)
        self._rdq: deque[int] = deque()
        self._rdq_set: set[int] = set()
        self.waiting = WaitQueue(cfg.max_waiting)
        # Whether anyone listens on a reply subject (the owner's subscriptions); None:
        # everyone, as where no server is around.
        self.listening: Callable[[str], bool] | None = None
        self.priority = Priority(stream, name, cfg)
        self.waiting.ranked = self.priority.ranked
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
        self._sliced = False  # the last pump stopped at SLICE deliveries, not for want of work
        self._sized = False  # this pump's deliveries need their size (see `_deliver`)
        self._stalled = False  # this pump has a message no waiting request may take
        self._advisories: list[Output] = []
        self.sseq, self._lps = start_position(store, cfg, committed)
        self.asflr = self.sseq - 1  # the reference's floor: nothing before the start is owed
        self._lps_resume = committed if cfg.deliver_policy == "last_per_subject" else 0
        # Messages matching the filter at or after sseq.
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
        if not self.matches(subject):
            return
        self._reader.committed(seq)
        if seq >= self.sseq and not (self._lps and seq <= self._lps_resume):
            self.npc += 1

    def refresh(self, committed: int) -> None:
        """Re-read positions from the store (messages committed without a callback to us)."""
        self.committed = max(self.committed, committed)
        self._reader.refilter(self.cfg.filters)
        self.npc = self.count_pending()

    def update_config(self, cfg: ConsumerConfig) -> None:
        """Adopt an already-checked update (only the editable fields differ)."""
        self._adopt(cfg)
        self._reader.refilter(cfg.filters)
        self.waiting.limit = cfg.max_waiting
        self.priority.adopt(cfg)
        self.waiting.ranked = self.priority.ranked

    def reset(self, seq: int) -> int:
        """`CONSUMER.RESET`: deliver again from `seq` (0: from just above the ack floor) as
        if nothing had been delivered yet; returns that seq. A deliver policy that names a
        start keeps the consumer from going below it, and the policies that start from the
        stream's end (new, last, last per subject) only allow the ack floor: the reference's
        rules."""
        cfg = self.cfg
        if seq == 0:
            seq = self.asflr + 1
        elif cfg.deliver_policy == "by_start_sequence":
            if seq < cfg.opt_start_seq:
                raise cerr.invalid_reset("below start seq")
        elif cfg.deliver_policy == "by_start_time":
            first = max(self.store.state().first_seq, 1)
            if seq < seq_at_time(self.store, cfg.opt_start_time or 0, first, self.committed):
                raise cerr.invalid_reset("below start time")
        elif cfg.deliver_policy != "all":
            raise cerr.invalid_reset("not allowed")
        seq = max(seq, 1)
        self.pending.clear()
        self.redelivered.clear()
        self._rdq.clear()
        self._rdq_set.clear()
        self._held = None
        self._lps.clear()
        self._lps_resume = 0
        self.sseq, self.dseq = seq, 1
        self.adflr, self.asflr = 0, seq - 1
        self.last_delivered = self.last_acked = 0
        self._next_check = 0
        self._reader.refilter(cfg.filters)
        self._reader.clear()
        self.npc = self.count_pending()
        if self.journal is not None:
            self.journal.extend((RESET, seq))
        self.dirty = True
        return seq

    def _adopt(self, cfg: ConsumerConfig) -> None:
        """Keep per-message branches off the config's properties."""
        self.cfg = cfg
        self._push = cfg.is_push
        self._timed = bool(cfg.rate_limit_bps) or cfg.replay_policy == "original"

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
        denied = self.priority.refusal(req.pg, now)
        if denied is not None:
            return [Status(reply, status(*denied))]
        self.last_request = now
        out: list[Output] = []
        if self.waiting.full:
            self.waiting.expire(now, out)
            out += self.waiting.sweep(now, self._heartbeat, None)
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

    def drop_deaf(self) -> None:
        """Drop, unanswered, the requests whose reply subject nobody listens on any more,
        as the reference does before it delivers: a message sent there would count as
        delivered (num_pending down, ack pending up) though no client got it. A client that
        unsubscribed and then asked (its request was in flight) leaves the messages pending."""
        listening = self.listening
        if listening is None:
            return
        for req in self.waiting:
            if not listening(req.reply):
                self.waiting.remove(req)

    def set_active(self, active: bool, now: int) -> None:
        """Push: interest on the deliver subject came or went (the reference's rules)."""
        self.active = active
        if active:
            self._fc.reset()
            if self.cfg.idle_heartbeat:
                self._next_hb = now + self.cfg.idle_heartbeat

    # -- delivery -------------------------------------------------------------

    def pump(self, now: int) -> list[Output]:
        """Deliver everything that can go now; answer expired requests; send heartbeats."""
        out: list[Output] = []
        if self.pending and self._next_check and now >= self._next_check:
            self._check_pending(now)
        cfg = self.cfg
        self._sliced = self._stalled = False
        self.priority.expire(now)
        if not self._push and len(self.waiting):
            self.drop_deaf()
            self.waiting.expire(now, out)
        if cfg.pause_until is None or now >= cfg.pause_until:
            sent = self.dseq
            self._deliver(now, out)
            if self.dseq != sent:
                self.last_delivered = now
                self.dirty = True
                if self._push and cfg.idle_heartbeat:
                    self._next_hb = now + cfg.idle_heartbeat
        if not self._push:
            out += self.waiting.sweep(now, self._heartbeat, self._exhausted)
        elif cfg.idle_heartbeat and self.active and now >= self._next_hb:
            out.append(Status(cfg.deliver_subject, self._heartbeat()))
            self._next_hb = now + cfg.idle_heartbeat
            if cfg.ack_policy == "flow_control" and self.pending and not self._fc.reply:
                ask = self._fc.ask()  # acks come only with confirmations: ask for one
                out.append(Status(cfg.deliver_subject, status(100, "FlowControl Request"), ask))
        self._reader.clear()  # a run serves one pump: the store may change before the next
        out += self._advisories + self.priority.advisories
        self._advisories, self.priority.advisories = [], []
        return out

    def _deliver(self, now: int, out: list[Output]) -> None:
        timed, fc, cfg = self._timed, self._fc, self.cfg
        # Whether a delivery's size counts: requests come only between pumps, and a
        # request's max_bytes only shrinks, so one look per pump is exact.
        self._sized = bool(cfg.rate_limit_bps) or (
            cfg.flow_control if self._push else any(r.max_bytes > 0 for r in self.waiting)
        )
        # A fetch or an ordered consumer's request: nothing to decide per message, so
        # what is read ahead goes out in runs (see `_send_run`).
        runs = not (self._push or self._sized or timed or cfg.headers_only or self.priority.gated)
        budget = SLICE
        while budget > 0:
            if self._push:  # only to listeners, and within the flow-control window
                if not self.active or (self.cfg.flow_control and fc.blocked):
                    return
            elif not len(self.waiting):
                return
            if runs and (sent := self._send_run(now, out, budget)):
                budget -= sent
                continue
            budget -= 1
            item = self._take()
            if item is None:
                return
            if timed and not self._ready(item[0], now):
                self._held = item
                return
            if not self._send(item[0], item[1], now, out):
                self._stalled = True
                return
        self._sliced = True

    def _send_run(self, now: int, out: list[Output], budget: int) -> int:
        """Deliver up to `budget` read-ahead messages to the only waiting request at once;
        0 where one at a time must decide (redeliveries, a held or per-subject message,
        another request to take turns with, a byte budget, nothing read yet)."""
        run = self._reader.run
        if not run or self._rdq or self._held is not None or self._lps:
            return 0
        req = self.waiting.only()  # without a byte budget: the caller saw none (`_sized`)
        if req is None:
            return 0
        n = min(budget, req.batch, len(run))
        if self.cfg.max_ack_pending > 0:
            n = min(n, self.cfg.max_ack_pending - len(self.pending))
        if n <= 0:
            return 0
        msgs = [run.popleft() for _ in range(n)]
        self.sseq = msgs[-1].seq + 1
        self.npc -= n
        self.waiting.charge(req, n, now)
        self._record(req.reply, msgs, 1, now, out)
        return n

    def _take(self) -> tuple[StoredMsg, int] | None:
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
                self._move_floor(self.pending.pop(seq)[0], seq)
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
            return self._take()
        run = self._reader.run
        if not run and self._load_next() is None:
            self.npc = 0
            return None
        msg = run.popleft()
        self.sseq = msg.seq + 1
        self.npc -= 1
        return msg, 1

    def _load_next(self) -> StoredMsg | None:
        """The first committed message at or after sseq that the filter selects (a peek)."""
        return self._reader.peek(self.sseq, self.committed, self._run_size())

    def _run_size(self) -> int:
        """How many messages to read at once: about what this pump can deliver, a slice."""
        cfg = self.cfg
        if cfg.rate_limit_bps or self.sseq <= self._replay_end:
            return 1
        n = SLICE if self._push else min(self.waiting.outstanding(), SLICE)
        if cfg.max_ack_pending > 0:
            n = min(n, cfg.max_ack_pending - len(self.pending))
        return max(n, 1)

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

    def _send(self, msg: StoredMsg, dc: int, now: int, out: list[Output]) -> bool:
        """Deliver msg; False when no waiting request may take it (it is held back)."""
        cfg = self.cfg
        dseq = self.dseq
        seq = msg.seq
        npc = self.npc if self.npc > 0 else 0
        subject = msg.subject.encode("utf-8", "surrogateescape")
        hdr, data = msg.hdr, msg.data
        if cfg.headers_only:
            hdr, data = headers_only(hdr, len(data)), b""
        size = 0  # the reference's: subject, ack reply, headers and payload; used only
        if self._sized:  # by max_bytes, flow control and rate limits (see `_deliver`)
            reply = dotted(self._ack_prefix, dc, seq, dseq, msg.ts, npc)
            size = len(subject) + len(reply) + (len(hdr) if hdr else 0) + len(data)
        if self._push:
            target = cfg.deliver_subject
        else:
            gate = self._gate if self.priority.gated else None
            req = self.waiting.claim(size, now, out, gate)
            if req is None:  # no request could take it: put it back
                self._put_back(msg, dc)
                return False
            target = req.reply
            if self.priority.pinning:
                self.priority.served(req.pg, now)
                hdr = with_pin(hdr, self.priority.pin)
        self._record(target, [msg], dc, now, out, (hdr, data))
        if cfg.rate_limit_bps:
            self._rate_next = max(self._rate_next, now) + size * 8 * _NS // cfg.rate_limit_bps
        full = cfg.ack_policy == "flow_control" and len(self.pending) >= cfg.max_ack_pending
        if self._push and cfg.flow_control and (ask := self._fc.sent(size, full=full)):
            out.append(Status(cfg.deliver_subject, status(100, "FlowControl Request"), ask))
        return True

    def _record(
        self,
        target: str,
        msgs: list[StoredMsg],
        dc: int,
        now: int,
        out: list[Output],
        shown: tuple[bytes | None, bytes] | None = None,
    ) -> None:
        """Count `msgs` (taken in order, `npc` already lowered by all of them) delivered to
        `target` and queue them; `shown` replaces a lone message's headers and payload."""
        cfg = self.cfg
        dseq = self.dseq
        top = self.npc + len(msgs) - 1  # the first message's num_pending
        acked = cfg.ack_policy != "none"
        pending, journal = self.pending, self.journal
        wires = []
        for i, msg in enumerate(msgs):
            seq, d = msg.seq, dseq + i
            if acked:
                pending[seq] = (d, now)  # a redelivery keeps its place: seq order holds
                if journal is not None:
                    journal.extend((DELIVERED, seq, d, dc, now))
            hdr, data = shown if shown is not None else (msg.hdr, msg.data)
            subject = msg.subject.encode("utf-8", "surrogateescape")
            wires.append((subject, hdr or None, data, dc, seq, d, msg.ts, max(top - i, 0)))
        self.dseq = dseq + len(msgs)
        if not acked:
            self.adflr, self.asflr = self.dseq - 1, msgs[-1].seq
            self.finished += [msg.seq for msg in msgs]
        else:
            deadline = now + (self._ack_wait(dc) if cfg.backoff else cfg.ack_wait)
            if not self._next_check or deadline < self._next_check:
                self._next_check = deadline
        if dc > 1:
            self.redelivered[msgs[0].seq] = dc  # a redelivery goes alone
        last = out[-1] if out else None
        if type(last) is Deliveries and last.subject == target:
            last.msgs += wires
        else:
            out.append(Deliveries(target, self._ack_prefix, wires))

    def _put_back(self, msg: StoredMsg, dc: int) -> None:
        """Undo taking msg, as the reference rewinds, so INFO does not count it delivered."""
        if dc > 1:
            self._rdq.appendleft(msg.seq)
            self._rdq_set.add(msg.seq)
        elif not self._lps and msg.seq == self.sseq - 1:
            self._reader.run.appendleft(msg)
            self.sseq = msg.seq
            self.npc += 1
        else:
            self._held = (msg, dc)
            self._hold_until = 0

    def _gate(self, req: PullRequest) -> Verdict:
        return self.priority.verdict(req.pg, self.npc + 1, len(self.pending))

    def _heartbeat(self) -> bytes:
        headers = {LAST_CONSUMER: str(self.dseq - 1), LAST_STREAM: str(self.sseq - 1)}
        if self._fc.reply:
            headers[CONSUMER_STALLED] = self._fc.reply
        return status(100, "Idle Heartbeat", headers)

    def _exhausted(self) -> bool:
        """Nothing can go out now; asked only for a no_wait request (it may read ahead)."""
        if self._stalled:  # the reference's end of stream: nothing more goes out now
            return True
        if self._rdq or self._held is not None:
            return False
        full = 0 < self.cfg.max_ack_pending <= len(self.pending)
        return full or (not self._lps and self._load_next() is None)

    def next_deadline(self, now: int) -> int | None:
        """When `pump` has timed work next (ns), or None."""
        if self._sliced:
            return now
        times = [self._next_check] if self.pending and self._next_check else []
        if self._held is not None and self._hold_until > now:
            times.append(self._hold_until)
        if self.cfg.pause_until is not None and now < self.cfg.pause_until:
            times.append(self.cfg.pause_until)
        if self.cfg.is_push:
            if self.cfg.idle_heartbeat and self.active:
                times.append(self._next_hb)
        else:
            if (pin_deadline := self.priority.deadline()) is not None:
                times.append(pin_deadline)
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
            "pending": [[s, d, ts] for s, (d, ts) in self.pending.items()],
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
        self.pending = {int(s): (int(d), int(ts)) for s, d, ts in sorted(state["pending"])}
        self.redelivered = {int(s): int(n) for s, n in state["redelivered"]}
        self._lps = deque(int(s) for s in state.get("lps", []))
        self._lps_resume = int(state.get("lps_resume", 0))
        self.last_delivered = int(state.get("last_delivered", 0))
        self.last_acked = int(state.get("last_acked", 0))
        self._reader.refilter(self.cfg.filters)
        self.npc = self.count_pending()
        self._next_check = min(map(self._deadline, self.pending), default=0)
