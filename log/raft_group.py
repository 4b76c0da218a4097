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

from consensus.commits import OnCommit, settle
from consensus.driver import Apply, RaftNode
from consensus.types import Entry, EntryKind, NotLeaderError, RaftError, Role
from log.replication import GroupClosedError

E = TypeVar("E")
CLOSE_SECONDS = 5.0  # how long close waits for in-flight proposals before giving up on them


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
        name: str = "",
    ) -> None:
        self._apply = apply
        self._encode = encode
        self._decode = decode
        self._name = name
        self.committed = 0
        self._closed = False
        self.node = node(self._apply_entries)
        self.node.start()

    def _apply_entries(self, entries: list[Entry]) -> None:
        decode = self._decode
        batch = [decode(e.data) for e in entries if e.kind is EntryKind.NORMAL]
        if batch:
            self._apply(batch)
            self.committed += len(batch)

    def propose(self, entries: Sequence[E], on_commit: OnCommit | None = None) -> None:
        if self._closed:
            if on_commit is not None:
                on_commit(GroupClosedError(f"{self} closed"))
            return
        if self.node.role is not Role.LEADER:
            if on_commit is not None:
                on_commit(NotLeaderError(self.node.leader))
            return
        encode = self._encode
        self.node.propose([encode(e) for e in entries], on_commit)

    def barrier(self) -> asyncio.Future[int]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.node.propose((), lambda error: settle(future, self.committed, error))
        return future

    async def flush(self) -> None:
        """Wait for what this node proposed, then fsync; failures went to their proposers."""
        with contextlib.suppress(RaftError):
            await self.barrier()
        await asyncio.to_thread(self.node.sync)

    async def close(self) -> None:
        self._closed = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.flush(), CLOSE_SECONDS)
        await self.node.close()

    def __str__(self) -> str:
        return self._name or f"raft group on {self.node}"
