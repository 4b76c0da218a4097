"""A Raft group of real RaftNodes in this process: real logs on disk, real TCP between them.

Each node applies into a `Journal` (the payloads it applied, in order), which
is also what it snapshots and restores. Waiting is by polling with a
deadline, never by sleeping a fixed time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from consensus.core import Config
from consensus.driver import Apply, RaftNode
from consensus.log_store import LogStore
from consensus.node_process import Journal
from consensus.tcp import Address, TcpTransport
from consensus.types import NodeId, Role
from tests.support.poll import poll_async

DEADLINE = 10.0
TICK = 0.02  # fast ticks: elections in 0.2-0.4 s keep the tests short


async def until(check: Callable[[], bool], what: str, deadline: float = DEADLINE) -> None:
    """Poll every 5 ms: with ticks this fast, a check must see the states between them."""
    await poll_async(check, what, deadline, interval=0.005)


class Cluster:
    def __init__(
        self,
        root: Path,
        ids: tuple[NodeId, ...] = ("n1", "n2", "n3"),
        *,
        sync_interval_ns: int | None = 10_000_000,
        snapshot_entries: int = 0,
    ) -> None:
        self.root = root
        self.ids = ids
        self.sync_interval_ns = sync_interval_ns
        self.snapshot_entries = snapshot_entries
        self.addresses: dict[NodeId, Address] = {}
        self.nodes: dict[NodeId, RaftNode] = {}
        self.journals: dict[NodeId, Journal] = {}
        self.transports: dict[NodeId, TcpTransport] = {}

    async def start(self, *, node: Callable[[NodeId, Apply], RaftNode] | None = None) -> None:
        for n in self.ids:
            transport = TcpTransport(n)
            self.addresses[n] = await transport.start()
            self.transports[n] = transport
        for n in self.ids:
            for peer, address in self.addresses.items():
                self.transports[n].add_peer(peer, address)
            self.journals[n] = Journal()
            if node is None:
                self.nodes[n] = self.make_node(n, self.journals[n].apply)
                self.nodes[n].start()
            else:  # the caller (a RaftGroup) builds and starts it around its own apply
                node(n, self.journals[n].apply)

    def make_node(self, n: NodeId, apply: Apply) -> RaftNode:
        """A node on the transport already bound for `n`, its log under root/n."""
        store, restored = LogStore.open(
            self.root / n, name=n, acks_unsynced=self.sync_interval_ns is not None
        )
        journal = self.journals[n]
        node = RaftNode(
            Config(n, seed=hash(n) & 0xFFFF),
            self.ids,
            store,
            restored,
            self.transports[n],
            apply=apply,
            snapshot=journal.snapshot,
            restore=journal.restore,
            sync_interval_ns=self.sync_interval_ns,
            tick_seconds=TICK,
            snapshot_entries=self.snapshot_entries,
        )
        self.nodes[n] = node
        return node

    async def leader(self, among: tuple[NodeId, ...] | None = None) -> RaftNode:
        """The one leader every live node agrees on."""
        live = [self.nodes[n] for n in (among or tuple(self.nodes))]
        found: list[RaftNode] = []

        def agreed() -> bool:
            leaders = [n for n in live if n.role is Role.LEADER]
            if len(leaders) != 1:
                return False
            found[:] = leaders
            return all(n.leader == leaders[0].id for n in live)

        await until(agreed, "one leader all live nodes know")
        return found[0]

    async def kill(self, n: NodeId) -> None:
        """Stop a node (its transport closes with it): peers see it vanish."""
        node = self.nodes.pop(n)
        await node.close()

    async def restart(self, n: NodeId) -> RaftNode:
        """The node again, from its log on disk, listening where it did."""
        return await self._spawn(n, self.addresses[n][1])

    async def join(self, n: NodeId) -> RaftNode:
        """A new server for the group: empty log, the group's original voters (it learns
        the changes since from the log), reachable by every member."""
        return await self._spawn(n, 0)

    async def _spawn(self, n: NodeId, port: int) -> RaftNode:
        transport = TcpTransport(n, port=port)
        self.addresses[n] = await transport.start()
        for peer, address in self.addresses.items():
            transport.add_peer(peer, address)
            if peer in self.transports:
                self.transports[peer].add_peer(n, self.addresses[n])
        self.transports[n] = transport
        self.journals[n] = Journal()
        node = self.make_node(n, self.journals[n].apply)
        node.start()
        return node

    async def propose(self, node: RaftNode, data: bytes) -> None:
        """Propose and wait for the commit callback; raise what it reports."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def on_commit(error: BaseException | None) -> None:
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)

        node.propose([data], on_commit)
        await asyncio.wait_for(done, DEADLINE)

    async def close(self) -> None:
        for n in list(self.nodes):
            await self.kill(n)
