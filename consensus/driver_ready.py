"""How the Raft driver carries out a Ready, and settles the proposals it commits.

`RaftNode` inherits this; it shares the node's state (declared below,
initialised in `RaftNode.__init__`), and its Ready loop calls `_handle` (or,
in place, `_now`). Each Ready is done in the order the contract fixes: persist
(snapshot, entries, hard state), then send, then apply, then serve reads.

Durability follows `consensus.durability`: under a sync window the entries are
written before anyone hears of them (a kill -9 loses nothing acknowledged)
and the background syncer fsyncs them within the window; under `always`
(`sync_interval_ns=None`) a Ready's entries are fsynced in a worker thread
before its messages leave. A term or vote change (`must_sync`) is fsynced
either way: a vote forgotten in a crash can elect two leaders in one term.
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from consensus.commits import OnCommit, notify
from consensus.core import RaftCore
from consensus.durability import SYNCER
from consensus.transport import Transport
from consensus.types import Entry, HardState, RaftError, Ready, Snapshot, SnapshotMeta

if TYPE_CHECKING:
    from consensus.driver import Apply, Restore


class LogStorage(Protocol):
    """What the driver needs of the durable log (`consensus.log_store.LogStore`).

    `sync` is the one call that may run on another thread (the background
    syncer's), also during or after `close`.
    """

    sync_queued: bool
    held: bool  # a vote floor or a reboot is kept on disk until `release_hold`

    def load_snapshot(self) -> Snapshot | None: ...

    def release_hold(self) -> None: ...

    def append(self, entries: Sequence[Entry]) -> None: ...

    def set_hard_state(self, hard_state: HardState) -> None: ...

    def save_snapshot(self, snapshot: Snapshot) -> None: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...


class ProposalDroppedError(RaftError):
    """A proposal's entry was replaced by another leader's: it never committed."""


# A proposal awaiting its commit or apply: (index, seq, term, on_commit). A tuple, not a
# dataclass: heap order compares it per proposal. `seq` breaks ties in call order (a barrier
# behind a proposal); term 0 marks a barrier, satisfied by whatever entry is at `index`.
Pending = tuple[int, int, int, OnCommit]


class ReadyWork:
    _core: RaftCore
    _store: LogStorage
    _transport: Transport
    _apply: Apply
    _snapshot: Callable[[], bytes] | None
    _restore: Restore | None
    _always: bool
    _delay: float
    _snapshot_entries: int
    _applied: int
    _applied_term: int
    _snapshot_index: int
    _in_restore: bool
    _trailing: Snapshot | None
    _lazy_commit: bool
    _commit_due: bool
    _unwritten: HardState | None
    _pending: list[Pending]
    _early: list[Pending]
    _order: itertools.count[int]
    _reads: dict[bytes, asyncio.Future[int]]
    _read_applied: list[tuple[int, int, asyncio.Future[int]]]

    def _await(self, index: int, term: int, on_commit: OnCommit, early: bool = False) -> None:
        """Queue a callback for the apply of entry `index` (or its commit, `early`)."""
        if term == 0 and index <= self._applied:
            notify([on_commit], None)
        else:
            heap = self._early if early else self._pending
            heapq.heappush(heap, (index, next(self._order), term, on_commit))

    async def _handle(self, ready: Ready) -> None:
        store = self._store
        if ready.snapshot is not None:
            await asyncio.to_thread(store.save_snapshot, ready.snapshot)
        # Under `always` the entries are fsynced before anyone hears of them. A hard state
        # that only moved the commit index is not: a restarted node learns the commit index
        # again from the leader, and waiting for it would add a third fsync to each commit.
        fsync = ready.must_sync or (self._always and bool(ready.entries))
        self._write(ready, fsync)
        if fsync:
            await asyncio.to_thread(store.sync)
        self._send(ready)
        if ready.snapshot is not None:
            await self._restore_app(ready.snapshot)
            self._trailing = None  # older than what the leader sent
        self._finish(ready)

    def _now(self, ready: Ready) -> None:
        """`_handle` of a Ready that waits on no disk: no snapshot, nothing to fsync."""
        self._write(ready, False)
        self._send(ready)
        self._finish(ready)

    def _write(self, ready: Ready, fsync: bool) -> None:
        """Write the entries and hard state; leave their fsync to the syncer unless `fsync`.

        In a `lazy_commit` group (a stream's) a hard state that only moved the commit
        index is written once a tick: with one publish at a time every Ready moves it,
        on the leader and (told by the next APPEND) on each follower, and its write was
        a system call and a checksum per publish on every server. What is on disk may
        then lag the commit by up to a tick's commits after a crash (a clean `close`
        writes the newest), which Raft allows: the commit index is volatile state in the
        Raft paper, every entry up to it is in a quorum's logs and never replaced, so a
        restarted node applies the entries up to its older commit at once and the rest
        when its leader, or its own election's first commit, tells it; a stream's store
        holds what it applied, and replays past a snapshot after any restart anyway. A
        sync window's power cut could already lose it. A group whose members act on what
        commits (the meta group: a restarted server hosts the streams it knew at once)
        writes every commit, and a term or vote is always written (and fsynced:
        `must_sync`). The seeded simulator writes commits once a tick on half its nodes,
        lazy or not."""
        store = self._store
        if ready.entries:
            store.append(ready.entries)
        hs = ready.hard_state
        if hs is not None:
            if ready.must_sync or self._commit_due:
                store.set_hard_state(hs)
                self._commit_due = not self._lazy_commit
                self._unwritten = None
            else:
                self._unwritten, hs = hs, None
        if not fsync and (ready.entries or hs is not None):
            SYNCER.request(store, self._delay)  # a snapshot was fsynced as it was saved

    def _send(self, ready: Ready) -> None:
        if ready.messages:
            send = self._transport.send
            for msg in ready.messages:
                send(msg)
            self._transport.flush()  # before the apply: a peer waits on these, not on it

    def _finish(self, ready: Ready) -> None:
        """Settle the proposals waiting for the commit (and send what they answered), apply
        what committed, then settle the proposals and reads it served."""
        committed = ready.committed
        if committed:
            if self._early and self._settle(self._early, committed, committed[-1].index):
                self._transport.flush()
            self._apply(committed)
            last = committed[-1]
            self._applied, self._applied_term = last.index, last.term
        self._settle(self._early, committed, self._applied)  # those a snapshot covered
        self._settle(self._pending, committed, self._applied)
        for state in ready.read_states:
            future = self._reads.pop(state.context, None)
            if future is not None and not future.done():
                heapq.heappush(self._read_applied, (state.index, next(self._order), future))
        while self._read_applied and self._read_applied[0][0] <= self._applied:
            _, _, future = heapq.heappop(self._read_applied)
            if not future.done():
                future.set_result(self._applied)

    async def _restore_app(self, snapshot: Snapshot) -> None:
        if self._restore is None:
            raise RaftError(f"{self} got a snapshot but has no restore callback")
        pending = self._restore(snapshot.data)
        if inspect.isawaitable(pending):
            self._in_restore = True
            try:
                await pending
            finally:
                self._in_restore = False
        self._applied = self._snapshot_index = snapshot.meta.index
        self._applied_term = snapshot.meta.term

    def _settle(self, pending: list[Pending], committed: list[Entry], upto: int) -> bool:
        """Each proposal of the heap up to index `upto`: committed if its entry is the one
        committed there, lost if another is or a snapshot covered it. Whether any was."""
        if not pending or pending[0][0] > upto:
            return False
        first = committed[0].index if committed else self._applied + 1  # entries are contiguous
        done: list[OnCommit] = []
        while pending and pending[0][0] <= upto:
            index, _, term, on_commit = heapq.heappop(pending)
            found = committed[index - first].term if index >= first else 0
            if term == 0 or found == term:
                done.append(on_commit)
                continue
            notify(done, None)  # keep the order in which proposers hear
            done = []
            why = "replaced by another leader's" if found else "covered by a snapshot"
            lost = ProposalDroppedError(
                f"{self}: the proposal at index {index} (term {term}) was {why}; "
                f"outcome lost (leader: {self._core.leader or 'unknown'})"
            )
            notify([on_commit], lost)
        notify(done, None)
        return True

    async def _maybe_snapshot(self) -> None:
        """Every `snapshot_entries` applied: snapshot the app, then drop the log before the
        previous snapshot (as the store drops its files). A follower a little behind, as
        one of three always is under load, still gets entries, not a whole snapshot.

        Only when everything committed is applied, so the membership the core
        reports is the membership as of the snapshot's index.
        """
        if self._snapshot is None or not self._snapshot_due():
            return
        meta = SnapshotMeta(self._applied, self._applied_term, self._core.conf)
        snapshot = Snapshot(meta, self._snapshot())
        await asyncio.to_thread(self._store.save_snapshot, snapshot)
        if self._trailing is not None:
            self._core.compact(self._trailing)
        self._trailing = snapshot
        self._snapshot_index = self._applied

    def _snapshot_due(self) -> bool:
        return (
            bool(self._snapshot_entries)
            and self._snapshot is not None
            and self._applied - self._snapshot_index >= self._snapshot_entries
            and self._core.commit == self._applied
        )
