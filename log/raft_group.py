"""`RaftGroup`: the `ReplicationGroup` of a replicated stream, over a `RaftNode`.

A stream proposes and hears of commits exactly as with `SingleNodeGroup`;
what changes is who decides: the entries go into the Raft log of the node,
commit once a quorum holds them, and are applied on every member in the same
order, so every member's store ends up the same. Only the leader accepts
proposals: elsewhere a proposal fails at once with `NotLeaderError`, which
names the leader to redirect to. The entries themselves cross the network,
hence `encode`/`decode`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from consensus.commits import OnCommit, refuse, settle
from consensus.driver import Apply, RaftNode
from consensus.types import Entry, EntryKind, NotLeaderError, RaftError, Role
from log.replication import GroupClosedError

E = TypeVar("E")
CLOSE_SECONDS = 5.0  # how long close waits for in-flight proposals before giving up on them
OWN_LIMIT = 65_536  # own proposals kept for apply; only lost ones (a deposed leader's) pile up
READ_SECONDS = 2.0  # a ReadIndex round unanswered by then: no quorum reachable from here
# A round unanswered this long is asked again (a fresh ReadIndex): its request or the
# leader's heartbeat for it may have been lost (a route reconnecting), and Raft resends
# neither. Several heartbeat intervals, so a slow answer is rarely asked twice.
READ_RETRY_SECONDS = 0.5
_NORMAL = EntryKind.NORMAL


class RaftGroup(Generic[E]):
    """`committed` counts this group's own entries applied here (not NOOP or CONFIG ones).

    `node` builds the RaftNode around the apply function it is given; it is
    started at once, so build the group on the event loop that will run it.
    """

    def __init__(
        self,
        apply: Callable[[list[E]], None],
        node: Callable[[Apply], RaftNode],
        *,
        encode: Callable[[E], bytes],
        decode: Callable[[bytes], E],
        own: Callable[[bytes, E], E] | None = None,
        name: str = "",
    ) -> None:
        """`own` makes what this member applies of an entry it proposed from its bytes and
        the entry proposed (default: the entry as proposed)."""
        self._apply = apply
        self._encode = encode
        self._decode = decode
        self._name = name
        self.committed = 0
        self._closed = False
        # What this member proposed, by the identity of its encoded bytes (kept alive here,
        # so an identity is never reused): the leader applies its own entries undecoded.
        self._own: dict[int, tuple[bytes, E]] = {}
        self._adopt = own
        self._next_read: asyncio.Future[None] | None = None  # readers the next round serves
        self._reading: asyncio.Task[None] | None = None
        self.node = node(self._apply_entries)
        self.node.start()

    def _apply_entries(self, entries: list[Entry]) -> None:
        """Usually one entry (a sync publish's), so a plain loop: no comprehension's frame."""
        decode, own = self._decode, self._own
        batch: list[E] = []
        for e in entries:
            if e.kind is _NORMAL:
                kept = own.pop(id(e.data), None) if own else None
                batch.append(decode(e.data) if kept is None else kept[1])
        if batch:
            self._apply(batch)
            self.committed += len(batch)

    def propose(
        self,
        entries: Sequence[E],
        on_commit: OnCommit | None = None,
        *,
        early: OnCommit | None = None,
    ) -> None:
        if self._closed or self.node.role is not Role.LEADER:
            error = (
                GroupClosedError(f"{self} closed")
                if self._closed
                else NotLeaderError(self.node.leader)
            )
            refuse(error, early, on_commit)
            return
        encode, own = self._encode, self._own
        if len(own) > OWN_LIMIT:
            own.clear()
        data = []
        adopt = self._adopt
        for entry in entries:
            raw = encode(entry)
            own[id(raw)] = (raw, entry if adopt is None else adopt(raw, entry))
            data.append(raw)
        self.node.propose(data, on_commit, early=early)

    def barrier(self) -> asyncio.Future[int]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.node.propose((), lambda error: settle(future, self.committed, error))
        return future

    def read_point(self) -> asyncio.Future[None]:
        """A linearizable read point (Raft's ReadIndex), on any member, leader or follower.

        Readers share rounds: one round is in flight at a time, and every reader that
        came while it was serves from the next one (a round that began before a reader
        asked may miss a write the reader already saw acknowledged). So many gets in
        flight cost a heartbeat quorum per round trip, not one each. A round fails
        (RaftError, TimeoutError) where no quorum is reachable: a reader never answers
        from a copy it cannot show is current.
        """
        if self._next_read is None:
            self._next_read = asyncio.get_running_loop().create_future()
            if self._reading is None:
                self._reading = asyncio.get_running_loop().create_task(self._read_rounds())
        return self._next_read

    async def _read_rounds(self) -> None:
        try:
            while (readers := self._next_read) is not None:
                self._next_read = None
                try:
                    await self._read_round()
                except (RaftError, TimeoutError) as exc:
                    if not readers.done():
                        readers.set_exception(exc)
                except asyncio.CancelledError:
                    readers.cancel()
                    raise
                else:
                    if not readers.done():
                        readers.set_result(None)
        finally:
            self._reading = None

    async def _read_round(self) -> None:
        """One read point within READ_SECONDS, asked again each READ_RETRY_SECONDS."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READ_SECONDS
        while True:
            left = deadline - loop.time()
            try:
                await asyncio.wait_for(self.node.read_index(), min(READ_RETRY_SECONDS, left))
                return
            except TimeoutError:
                if left <= READ_RETRY_SECONDS:
                    raise

    async def flush(self) -> None:
        """Wait for what this node proposed, then fsync; failures went to their proposers."""
        with contextlib.suppress(RaftError):
            await self.barrier()
        await asyncio.to_thread(self.node.sync)

    async def close(self) -> None:
        self._closed = True
        if self._reading is not None:
            self._reading.cancel()
        if self._next_read is not None:
            self._next_read.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.flush(), CLOSE_SECONDS)
        await self.node.close()

    def __str__(self) -> str:
        return self._name or f"raft group on {self.node}"
