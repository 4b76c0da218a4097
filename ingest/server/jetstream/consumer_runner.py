"""One live consumer on the event loop: its subscriptions, its timer, its store.

The rules live in `log.consumers.consumer.Consumer`; this shell feeds it what happens
(pull requests, acks, flow-control replies, commits, interest changes, its
timer) and publishes what it returns. Work is coalesced per loop turn: many
commits or acks in one read schedule one `pump` and one state write.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from log.consumers.consumer import Consumer
from log.consumers.store import POSITION, StateStore
from log.consumers.wire import (
    ACK_PREFIX,
    FC_PREFIX,
    AckResult,
    Advisory,
    Deliveries,
    Output,
    Status,
)
from log.timefmt import now_ns

if TYPE_CHECKING:
    from ingest.server.jetstream.port import Messaging
    from log.streams.stream import Stream

NEXT_PREFIX = "$JS.API.CONSUMER.MSG.NEXT."
DoneSink = Callable[["Runner", list[int]], None]
IdleSink = Callable[["Runner"], None]


class Runner:
    def __init__(
        self,
        consumer: Consumer,
        stream: Stream,
        messaging: Messaging,
        *,
        store: StateStore | None,
        on_done: DoneSink,
        on_idle: IdleSink,
        save_delay: float = 0.0,
    ) -> None:
        """`save_delay`: seconds a turn's records wait for later turns' to join them in
        one write (for a replicated store, where each write is an entry in the stream's
        log on every member; a confirmed ack and a stop write at once)."""
        self.consumer = consumer
        consumer.listening = messaging.has_interest
        self.stream = stream
        self._messaging = messaging
        self.store = store
        self._on_done = on_done
        self._on_idle = on_idle
        self._subs: list[object] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0
        self._scheduled = False
        self._save_scheduled = False
        self._save_delay = save_delay
        self._inactive_since = now_ns()
        ack_prefix = f"{ACK_PREFIX}.{consumer.stream}.{consumer.name}."
        self._ack_cut = len(ack_prefix.encode("utf-8", "surrogateescape"))
        self.closed = False

    @property
    def name(self) -> str:
        return self.consumer.name

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        """Subscribe and start delivering; a durable first compacts its state (after restore)."""
        c, subscribe = self.consumer, self._messaging.subscribe
        if self.store is not None:
            c.journal = []
            self.store.save_state(c.snapshot())
        base = f"{c.stream}.{c.name}"
        on_ack, on_acks = self._on_ack, self._on_acks
        self._subs = [self._messaging.subscribe_raw(f"{ACK_PREFIX}.{base}.>", on_ack, acks=on_acks)]
        if c.cfg.is_push:
            if c.cfg.flow_control:
                self._subs.append(subscribe(f"{FC_PREFIX}.{base}.*", self._on_flow_control))
            self.check_interest()
        else:
            self._subs.append(subscribe(NEXT_PREFIX + base, self._on_next))
        barrier = self.stream.commit_barrier(self.stream.last_seq)
        if barrier is not None:  # messages in flight at creation have no commit callback
            barrier.add_done_callback(lambda _: self._refresh_commit())
        self.schedule()

    def stop(self, *, reason: str = "") -> None:
        """Unsubscribe and stop timers; `reason` answers waiting pull requests (409)."""
        if self.closed:
            return
        self.closed = True
        for token in self._subs:
            self._messaging.unsubscribe(token)
        self._subs = []
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if reason:
            self._publish(self.consumer.drop_requests(reason))
        self.save()
        if self.store is not None:
            self.store.close()

    def save(self) -> None:
        """Append this turn's changes to the durable state; compact when the log is long."""
        self._save_scheduled = False
        c, store = self.consumer, self.store
        if store is None or not c.dirty:
            return
        c.dirty = False
        records, c.journal = c.journal or [], []
        records.extend((POSITION, c.dseq, c.sseq, c.adflr, c.asflr))
        records.extend((c.last_delivered, c.last_acked))
        store.record(records, c.snapshot)

    # -- events ---------------------------------------------------------------------

    def on_commit(self, seq: int, subject: str) -> None:
        self.consumer.on_commit(seq, subject)
        self.schedule()

    def _refresh_commit(self) -> None:
        self.consumer.refresh(self.stream.committed_seq)
        self.schedule()

    def check_interest(self) -> None:
        """Follow subscriptions: push delivers only to listeners; pull drops deaf requests."""
        c, now = self.consumer, now_ns()
        has = self._messaging.has_interest
        if c.cfg.is_push:
            active = has(c.cfg.deliver_subject)
            if active != c.active:
                c.set_active(active, now)
                if not active:
                    self._inactive_since = now
                self.schedule()
        else:
            c.drop_deaf()
        self._arm(now)

    def _on_next(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if not reply or self.closed:
            return
        self._publish(self.consumer.pull(reply, data, now_ns()))
        self.schedule()

    def _on_ack(self, subject: bytes, reply: bytes, hdr: bytes | None, data: bytes) -> None:
        # The subscription guarantees the `$JS.ACK.<stream>.<consumer>.` prefix; after it
        # come <delivered>.<sseq>.<dseq>.<ts>.<pending> (and possibly more tokens). Bytes,
        # as routed: one ack per message makes every conversion count.
        seqs = subject[self._ack_cut :].split(b".", 4)
        if len(seqs) < 5 or self.closed:
            return
        c, now = self.consumer, now_ns()
        try:
            result = c.ack(int(seqs[0]), int(seqs[1]), int(seqs[2]), data, now)
        except ValueError:
            return
        if c.finished:
            self._hand_over()
        if reply:
            self._answer(reply.decode("utf-8", "surrogateescape"), result, now)
        if not self._scheduled:  # most acks of a read find the pump already scheduled
            self.schedule()

    def _on_acks(self, seqs: list[int]) -> None:
        """Plain acks without a reply, (delivered, stream seq, consumer seq) flat: what
        `_on_ack` does for each, once for the run."""
        if self.closed:
            return
        c = self.consumer
        c.plain_acks(seqs, now_ns())
        if c.finished:
            self._hand_over()
        if not self._scheduled:
            self.schedule()

    def _answer(self, reply: str, result: AckResult, now: int) -> None:
        """An ack with a reply subject: serve the pull request riding on it, or confirm it."""
        if result.request is not None:
            self._publish(self.consumer.pull(reply, result.request, now))
        if result.confirm:
            self.save()  # a confirmed ack is durable before the client hears of it
            if self.store is None:
                self._messaging.publish(reply, None, None, b"")
            else:
                self.store.confirm(partial(self._confirmed, reply))

    def _confirmed(self, reply: str, error: BaseException | None) -> None:
        """Unconfirmed (the stream lost its leader first): no answer, the client retries."""
        if error is None:
            self._messaging.publish(reply, None, None, b"")

    def _on_flow_control(
        self, subject: str, reply: str | None, hdr: bytes | None, data: bytes
    ) -> None:
        c = self.consumer
        c.flow_control_reply(subject, hdr, now_ns())
        if c.finished:  # acknowledged by the reply (`ack_policy: flow_control`)
            self._hand_over()
        self.schedule()

    # -- the pump -------------------------------------------------------------------

    def schedule(self) -> None:
        """Pump once in the next turn of the loop, however many events arrived (or
        sooner: `pump_due`)."""
        if not self._scheduled and not self.closed:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.pump_due)

    def pump_due(self) -> None:
        """Pump now if a pump is scheduled: the stream calls it once a run of messages is
        stored, so their deliveries are written out with the PubAcks of that turn."""
        if self._scheduled:
            self._run()

    def _run(self) -> None:
        self._scheduled = False
        if self.closed:
            return
        now = now_ns()
        self._publish(self.consumer.pump(now))
        if self.consumer.finished:
            self._hand_over()
        if self.consumer.dirty and self.store is not None and not self._save_scheduled:
            self._save_scheduled = True
            if self._save_delay:
                asyncio.get_running_loop().call_later(self._save_delay, self.save)
            else:
                asyncio.get_running_loop().call_soon(self.save)
        self._arm(now)

    def _hand_over(self) -> None:
        """Tell the owner which messages this consumer is done with (retention)."""
        done, self.consumer.finished = self.consumer.finished, []
        self._on_done(self, done)

    def _arm(self, now: int) -> None:
        if self.closed:
            return
        deadline = self.consumer.next_deadline(now)
        idle_at = self._idle_deadline()
        if idle_at is not None:
            deadline = idle_at if deadline is None else min(deadline, idle_at)
        if deadline is None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            return
        if self._timer is not None and self._timer_at == deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        delay = max(deadline - now, 0) / 1e9
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        idle_at = self._idle_deadline()
        if idle_at is not None and now_ns() >= idle_at:
            self._on_idle(self)
            return
        self._run()

    def _idle_deadline(self) -> int | None:
        """When an unused consumer with an inactive_threshold is removed."""
        c = self.consumer
        threshold = c.cfg.inactive_threshold
        if not threshold:
            return None
        if c.cfg.is_push:
            return None if c.active else self._inactive_since + threshold
        if len(c.waiting):
            return None
        return max(c.last_request, c.last_delivered) + threshold

    # -- output ---------------------------------------------------------------------

    def _publish(self, out: list[Output]) -> None:
        publish = self._messaging.publish
        for item in out:
            if isinstance(item, Deliveries):
                self._messaging.deliver(item)
            elif isinstance(item, Status):
                publish(item.subject, item.reply or None, item.hdr, b"")
            elif isinstance(item, Advisory):
                publish(item.subject, None, None, json.dumps(item.body).encode())
