"""Three members of one Raft group in this process, each built around its own apply.

The Raft side is `tests.consensus.cluster.Cluster` (real nodes, logs on disk,
loopback TCP); what each member is (a RaftGroup of ints, a replicated
Stream...) is the caller's: `build(node_id, make_node)` must build a
RaftGroup with `make_node` as its node factory and return something closable.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Protocol, TypeVar

from consensus.driver import Apply, RaftNode
from consensus.types import NodeId
from tests.consensus.cluster import Cluster


class Closable(Protocol):
    async def close(self) -> None: ...


M = TypeVar("M", bound=Closable)
NodeFactory = Callable[[Apply], RaftNode]


@contextlib.asynccontextmanager
async def raft_members(
    tmp_path: Path, build: Callable[[NodeId, NodeFactory], M]
) -> AsyncIterator[tuple[Cluster, dict[NodeId, M]]]:
    """The cluster and its members by node id; every member is closed afterwards."""
    cluster = Cluster(tmp_path)
    members: dict[NodeId, M] = {}

    def member(n: NodeId, _: Apply) -> RaftNode:
        members[n] = build(n, lambda apply: cluster.make_node(n, apply))
        return cluster.nodes[n]

    await cluster.start(node=member)
    try:
        yield cluster, members
    finally:
        for m in members.values():
            await m.close()
