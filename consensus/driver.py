"""`RaftNode`: the asyncio shell that gives a pure `RaftCore` a clock, a disk and a network.

Everything that touches the core runs in one task, the Ready loop: ticks,
incoming messages, proposals and reads are queued by whoever produces them
and handed to the core between two Readies, so the core never sees a call
while the caller is still carrying out its last Ready. How a Ready is carried
out (persist, send, apply, serve reads, under which fsync) and how the
proposals it commits are settled is `consensus.driver_ready`. Group commit
falls out of the loop: whatever is proposed while a Ready is being persisted
is proposed as one batch next time round, so it becomes one append (and one
fsync) on every node.

A power loss under a sync window may take entries this node acknowledged; the log
store notices the reboot (`consensus.power_loss`) and the core holds the node
back until it is safe again, when the loop tells the store (`release_hold`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

from consensus.commits import OnCommit, notify, refuse
from consensus.core import Config, RaftCore
from consensus.driver_ready import LogStorage, Pending, ReadyWork
from consensus.durability import DEFAULT_SYNC_INTERVAL_NS, sync_delay
from consensus.ticker import Ticker
from consensus.transport import Transport
from consensus.types import (
    ConfChange,
    Entry,
    HardState,
    Message,
    MessageType,
    NodeId,
    NotLeaderError,
    RaftError,
    Ready,
    Restored,
    Role,
    Snapshot,
)

log = logging.getLogger("jetlake.raft")

TICK_SECONDS = 0.1  # with Config's 10 election ticks: a dead leader is replaced in 1-2 s

Apply = Callable[[list[Entry]], None]
# An application whose state lives partly elsewhere (a stream's messages, fetched from a
# peer) restores asynchronously: the node does nothing else until it has.
Restore = Callable[[bytes], Awaitable[None] | None]
LeaderListener = Callable[[NodeId | None, int], None]


class NodeClosedError(RaftError):
    """A proposal or read reached a node that is shutting down (or whose disk failed)."""


class RaftNode(ReadyWork):
    """One member of a Raft group: propose, read linearizably, and apply what commits.

    `apply` receives every committed entry in log order (NOOP and CONFIG
    entries too, so an application can track indexes); `snapshot` returns the
    application's state as bytes and `restore` replaces it, both needed once
    `snapshot_entries` is set (a snapshot every that many applied entries,
    after which the log before the previous one is dropped) or a leader sends one.
    Give each node its own `config.seed`: nodes sharing one draw the same
    election timeouts and keep splitting the vote.
    """

    def __init__(
        self,
        config: Config,
        voters: Iterable[NodeId],
        store: LogStorage,
        restored: Restored,
        transport: Transport,
        *,
        apply: Apply,
        snapshot: Callable[[], bytes] | None = None,
        restore: Restore | None = None,
        sync_interval_ns: int | None = DEFAULT_SYNC_INTERVAL_NS,
        tick_seconds: float = TICK_SECONDS,
        snapshot_entries: int = 0,
    ) -> None:
        self._core = RaftCore(config, voters, restored)
        self._store = store
        self._transport = transport
        self._apply = apply
        self._snapshot = snapshot
        self._restore = restore
        self._always = sync_interval_ns is None
        self._delay = sync_delay(sync_interval_ns)
        self._tick_seconds = tick_seconds
        self._snapshot_entries = snapshot_entries
        meta = restored.snapshot
        self._applied = meta.index if meta else 0
        self._applied_term = meta.term if meta else 0
        self._snapshot_index = self._applied
        self._restoring: Snapshot | None = None  # the first thing the loop does
        self._in_restore = False  # an application's restore is under way
        if meta is not None:
            held = self._restoring = store.load_snapshot()
            if held is None or held.meta != meta:
                raise RaftError(f"raft node {config.id}: its log lost the snapshot at {meta}")
            self._core.compact(held)  # so the core has the bytes to send to a laggard
        self._trailing: Snapshot | None = None  # the latest own snapshot, not yet compacted to
        self._inbox: list[Message] = []
        self._ticks = 0
        self._idle = 0  # ticks the core may be handed late (`RaftCore.idle_ticks`)
        # In a `lazy_commit` group a hard state that only moved the commit is written once
        # a tick (`_write`): the next one due, and the newest one held back since, written
        # at `close`. Elsewhere every one is (`_commit_due` stays set).
        self._lazy_commit = config.lazy_commit
        self._commit_due = True
        self._unwritten: HardState | None = None
        self._proposals: list[bytes] = []
        # (entries before + own, callback, whether it runs before the apply)
        self._proposal_waiters: list[tuple[int, OnCommit, bool]] = []
        self._pending: list[Pending] = []  # heap by index: proposals awaiting apply
        self._early: list[Pending] = []  # heap by index: proposals awaiting their commit
        self._order = itertools.count()
        self._last_proposed = 0
        self._reads: dict[bytes, asyncio.Future[int]] = {}  # context -> awaiting its ReadState
        self._read_queue: list[bytes] = []
        self._read_applied: list[tuple[int, int, asyncio.Future[int]]] = []  # awaiting apply
        self._transfers: list[NodeId | None] = []
        self._changes: list[tuple[ConfChange, OnCommit | None]] = []
        self._listeners: list[LeaderListener] = []
        self._leader: tuple[NodeId | None, int] = (None, 0)
        self._wake = asyncio.Event()
        self._parked = False  # the loop waits for work: an input may be taken in place
        self._ticker: Ticker | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False  # refusing work: closing, or failed
        self._shut = False  # close() ran: transport and store released
        self._error: BaseException | None = None

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        """Start ticking and listening; call on the event loop that will run the node."""
        self._transport.set_handler(self._receive, beat=self._beat)
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run(), name=f"raft {self.id}")
        self._ticker = Ticker.of(loop, self._tick_seconds)
        self._core.align_clock(self._ticker.fired)
        self._ticker.join(self)
        self._wake.set()  # a restored node may have committed entries to apply

    async def close(self) -> None:
        """Stop after the Ready in progress; what is pending fails with NodeClosedError."""
        if self._shut:
            return
        self._shut = self._closed = True
        self._stop_ticking()
        self._wake.set()
        if self._task is not None:
            if self._in_restore:  # it may wait on peers for long: what it did is redone
                self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._fail_all(self._error or NodeClosedError(f"raft node {self.id} closed"))
        await self._transport.close()
        if self._unwritten is not None and self._error is None:
            self._store.set_hard_state(self._unwritten)  # a clean stop keeps the commit
        await asyncio.to_thread(self._store.close)  # it syncs first

    def sync(self) -> None:
        """Make everything written so far durable (blocks: call it off the loop)."""
        self._store.sync()

    # -- the application's calls -------------------------------------------------

    def propose(
        self,
        data: Sequence[bytes],
        on_commit: OnCommit | None = None,
        *,
        early: OnCommit | None = None,
    ) -> None:
        """Append `data` as entries; `on_commit` runs once they are applied here (None) or
        can no longer commit (NotLeaderError naming the leader, ProposalDroppedError).

        `early` hears the same, but as soon as the entries committed, before this node
        applies them, and what it queued is flushed before the apply: a publisher's
        PubAck need not wait for the leader's own store, since a quorum's logs hold the
        message. Whatever reads the applied state waits for `on_commit`. Both run in the
        same turn of the loop, so a reader the early answer prompts is read after the
        apply. An empty `data` is a barrier: it commits once everything proposed before
        it did (its `early` runs with its `on_commit`).
        """
        if self._closed:
            error = self._error or NodeClosedError(f"raft node {self.id} closed")
            refuse(error, early, on_commit)
            return
        self._proposals.extend(data)
        upto = len(self._proposals)
        if early is not None:
            self._proposal_waiters.append((upto, early, bool(data)))
        if on_commit is not None:
            self._proposal_waiters.append((upto, on_commit, False))
        self._wake.set()

    async def read_index(self) -> int:
        """A linearizable read point: returns once this node applied everything committed
        when the read began (the leader confirmed its leadership with a quorum).

        A read in flight when the leader changes is asked again of the new leader, and
        one that starts while no leader is known waits for the next one: an election
        (one a loaded machine's slow leader provoked, say) ends within a few ticks, and
        refusing the read at once would leave its reader with nothing to retry on but its
        own timeout. The caller bounds the wait: no quorum may be reachable from here.
        """
        if self._closed:
            raise self._error or NodeClosedError(f"raft node {self.id} closed")
        context = next(self._order).to_bytes(8, "big")
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._reads[context] = future
        self._read_queue.append(context)
        self._wake.set()
        try:
            return await future
        finally:
            self._reads.pop(context, None)

    def change_membership(self, change: ConfChange, on_commit: OnCommit | None = None) -> None:
        """Propose one membership change (the leader only, one at a time); `on_commit` runs
        once it is applied here, or with the core's refusal (`ChangeInProgressError`,
        `NotCaughtUpError` for a learner promoted too early, `NotLeaderError`)."""
        if self._closed:
            if on_commit is not None:
                on_commit(self._error or NodeClosedError(f"raft node {self.id} closed"))
            return
        self._changes.append((change, on_commit))
        self._wake.set()

    def transfer_leadership(self, to: NodeId | None = None) -> None:
        """Ask the leader to hand over (to the most caught-up voter if `to` is None)."""
        self._transfers.append(to)
        self._wake.set()

    def campaign(self) -> None:
        """Start an election now instead of waiting for a timeout (bootstrap, tests)."""
        self._transfers.append(_CAMPAIGN)
        self._wake.set()

    def on_leader_change(self, listener: LeaderListener) -> None:
        """`listener(leader, term)` after every change of known leader or term."""
        self._listeners.append(listener)

    @property
    def id(self) -> NodeId:
        return self._core.id

    @property
    def role(self) -> Role:
        return self._core.role

    @property
    def leader(self) -> NodeId | None:
        return self._core.leader

    @property
    def term(self) -> int:
        return self._core.term

    @property
    def applied(self) -> int:
        return self._applied

    def status(self) -> dict[str, object]:
        return {**self._core.status(), "applied": self._applied, "pending": len(self._pending)}

    def __str__(self) -> str:
        return f"raft node {self.id}"

    # -- the loop ----------------------------------------------------------------

    def _receive(self, msg: Message) -> None:
        if self._closed:
            return
        if self._parked and not self._wake.is_set():
            self._in_place(msg)
        else:
            self._inbox.append(msg)
            self._wake.set()

    def _beat(self, kind: MessageType, src: NodeId, term: int, value: int) -> int | None:
        """A plain heartbeat (`value` its commit) or answer (`value` the follower's last
        index) from a transport that carries them without a `Message` (`BeatHandler`).
        Taken in place by the core's quiet path while the loop waits with nothing
        queued: for a heartbeat, the index to answer with; for an answer, 0. None: not
        taken (the loop is busy, or the beat says more than liveness), and the transport
        hands over the whole message instead. Ticks held back go first, as in `_in_place`."""
        if self._closed or not self._parked or self._wake.is_set():
            return None
        core = self._core
        try:
            core.pass_idle(self._ticks)  # parked, not woken: only idle ones
            self._ticks = 0
            if kind == MessageType.HEARTBEAT:
                answer = core.quiet_heartbeat(src, term, value)
            else:
                answer = 0 if core.quiet_answer(src, term, value) else None
            self._idle = core.idle_ticks()
        except Exception as exc:
            self._fail(exc)
            return None
        return answer

    def on_tick(self) -> None:
        """From the loop's `Ticker`: counted, and the core stepped only for a tick that acts."""
        self._ticks += 1
        self._commit_due = True
        if self._ticks > self._idle:
            if self._parked and not self._wake.is_set():
                self._in_place(None)
            else:
                self._wake.set()

    def _in_place(self, msg: Message | None) -> None:
        """Step the core in the caller's turn while the loop waits with nothing queued.

        An idle group's traffic is heartbeats, their answers and the ticks that send
        them: a Ready of messages alone, which needs no disk and no application, so it
        is sent from here. With a thousand groups, waking each one's task for it cost
        more than the step itself. So is a Ready that waits on no disk (`_now`): with
        one publish at a time that is every Ready of the round trip (a follower's
        append and answer, the leader's commit, apply and PubAck), and a wake-up of the
        task for each was a turn of the event loop on the publish's path. A follower's
        plain APPEND and the leader's plain answer to one are taken whole
        (`RaftCore.in_order`), their Ready made without the general one's bookkeeping.
        A snapshot, a term or vote to fsync, or entries under `always` wake the loop,
        which takes the core's Ready as ever."""
        core = self._core
        try:
            ticks, self._ticks = self._ticks, 0
            idle = min(ticks, self._idle)  # held back as idle, then the one that acts
            core.pass_idle(idle)
            for _ in range(ticks - idle):  # before msg
                core.tick()
            ready = None
            if msg is not None and not self._always:
                ready = core.in_order(msg)
            if ready is not None:
                self._now(ready)  # the core advanced it
            else:
                if msg is not None:
                    core.step(msg)
                if core.needs_io() and (self._always or core.needs_wait()):
                    self._wake.set()
                    return
                if core.has_ready():
                    ready = core.ready()
                    self._now(ready)
                    self._advance(ready)
            if ready is not None and ready.committed:
                self._transport.flush()  # what the apply answered
                if self._snapshot_due():
                    self._wake.set()  # the loop saves it, off this turn
            self._idle = core.idle_ticks()
            self._notice_leader()
        except Exception as exc:
            self._fail(exc)

    def _stop_ticking(self) -> None:
        if self._ticker is not None:
            self._ticker.leave(self)

    async def _run(self) -> None:
        core = self._core
        try:
            if self._restoring is not None:
                await self._restore_app(self._restoring)
                self._restoring = None
            while not self._closed:
                self._parked = True
                await self._wake.wait()
                self._parked = False
                self._wake.clear()
                await self._maybe_snapshot()  # one due after an apply in place
                self._feed()
                while core.has_ready() and not self._closed:
                    ready = core.ready()
                    await self._handle(ready)
                    self._advance(ready)
                    await self._maybe_snapshot()
                    self._feed()
                self._transport.flush()  # what the apply answered, before the loop reads on
                self._notice_leader()
        except Exception as exc:  # a disk or application failure: this node stops here
            self._fail(exc)

    def _advance(self, ready: Ready) -> None:
        self._core.advance(ready)
        if self._store.held and not self._core.held_back:
            self._store.release_hold()  # refilled: a restart may vote again

    def _fail(self, exc: Exception) -> None:
        log.exception("%s failed; it stops taking part in its group", self)
        self._error = NodeClosedError(f"raft node {self.id} failed: {exc}")
        self._closed = True
        self._parked = False
        self._stop_ticking()
        self._fail_all(self._error)
        self._wake.set()  # the loop, if it waits, ends

    def _feed(self) -> None:
        """Hand the core everything queued since the last Ready.

        The messages go before the ticks that act: both piled up while the loop waited (a
        save, a snapshot), and ticks first would have a leader count a quorum lost, or a
        follower its leader silent, although their answers and heartbeats had arrived.
        Ticks held back while idle only advance counters, and they passed before the
        messages that woke the loop: they go first."""
        core = self._core
        inbox, self._inbox = self._inbox, []
        early = min(self._ticks, self._idle)
        core.pass_idle(early)
        for msg in inbox:
            core.step(msg)
        for _ in range(self._ticks - early):
            core.tick()
        self._ticks = 0
        self._propose_queued()
        self._propose_changes()
        reads, self._read_queue = self._read_queue, []
        for context in reads:
            future = self._reads.get(context)
            if future is None or future.done():  # the reader gave up
                continue
            try:
                core.read_index(context)
            except NotLeaderError as exc:
                if exc.leader is not None:
                    future.set_exception(exc)
                # else an election is under way: `_notice_leader` asks the one it elects
            except RaftError as exc:
                future.set_exception(exc)
        transfers, self._transfers = self._transfers, []
        for to in transfers:
            try:
                core.campaign() if to is _CAMPAIGN else core.transfer_leadership(to)
            except RaftError as exc:
                log.info("%s: %s", self, exc)
        self._idle = core.idle_ticks()

    def _propose_changes(self) -> None:
        changes, self._changes = self._changes, []
        for change, on_commit in changes:
            try:
                index = self._core.propose_conf_change(change)
            except RaftError as exc:
                if on_commit is not None:
                    notify([on_commit], exc)
                continue
            self._last_proposed = index
            if on_commit is not None:
                self._await(index, self._core.term, on_commit)

    def _propose_queued(self) -> None:
        data, self._proposals = self._proposals, []
        waiters, self._proposal_waiters = self._proposal_waiters, []
        if not data:
            for _, on_commit, _ in waiters:
                self._await(self._last_proposed, 0, on_commit)
            return
        try:
            last = self._core.propose(data)
        except RaftError as exc:
            notify([on_commit for _, on_commit, _ in waiters], exc)
            return
        first, term = last - len(data) + 1, self._core.term
        self._last_proposed = last
        for upto, on_commit, early in waiters:
            if upto == 0:
                self._await(first - 1, 0, on_commit)
            else:
                self._await(first + upto - 1, term, on_commit, early)

    def _notice_leader(self) -> None:
        now = (self._core.leader, self._core.term)
        if now == self._leader:
            return
        if now[0] != self._leader[0] and now[0] is not None:
            # a read forwarded to (or being confirmed by) the old leader is lost: ask the new
            # one; should the old one answer after all, the first answer serves the read
            self._read_queue += [c for c, f in self._reads.items() if not f.done()]
            self._wake.set()
        self._leader = now
        for listener in self._listeners:
            try:
                listener(*now)
            except Exception:
                log.exception("%s: leader listener failed", self)

    def _fail_all(self, error: BaseException) -> None:
        pending = sorted(self._early + self._pending)
        self._early, self._pending = [], []
        waiters, self._proposal_waiters = self._proposal_waiters, []
        changes, self._changes = self._changes, []
        self._proposals = []
        callbacks = [p[3] for p in pending] + [cb for _, cb, _ in waiters]
        notify(callbacks + [cb for _, cb in changes if cb is not None], error)
        waiting, self._read_applied = self._read_applied, []
        for future in [*self._reads.values(), *(f for _, _, f in waiting)]:
            if not future.done():
                future.set_exception(error)


_CAMPAIGN = "\0campaign"  # a transfer queue marker: not a valid node id in any cluster
