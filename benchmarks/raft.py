"""Raft: what replication costs a commit, beside a group of one on the same log.

Three processes on this machine: the leader runs in the benchmark's own
process (its proposals are what a stream's publishes would be, without a
client protocol in the way), the two followers are `consensus.node_process`
children; loopback TCP between them, each with its own `LogStore` in the
run's store dir. The group of one is `SingleNodeGroup` over a `LogStore`,
so both columns pay for the same log writes and fsyncs. Each figure comes
from 128-byte entries (--size), one proposal per entry as a stream makes
them: entries/s with --window in flight for --count entries, then commit
latency one at a time for --sync-count entries. No server: `Profile.OFFLINE`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from time import perf_counter

from benchmarks.client import latency_metrics
from benchmarks.model import Incomplete, Params
from consensus.commits import OnCommit
from consensus.core import Config
from consensus.driver import RaftNode
from consensus.durability import DEFAULT_SYNC_INTERVAL_NS
from consensus.log_store import LogStore
from consensus.node_client import Client, NodeProcess, start_group
from consensus.tcp import TcpTransport
from consensus.types import Entry, Role
from log.replication import SingleNodeGroup

Propose = Callable[[bytes, OnCommit], None]
LEADER = "n1"
FOLLOWERS = ("n2", "n3")
ELECTION_SECONDS = 10.0
WARM_UP = 1_000  # entries committed before timing: connections up, followers in REPLICATE


async def window(_url: str, p: Params) -> dict[str, float]:
    """The default sync window (10 ms): acks follow the write, fsync follows within it."""
    return await _both(p, DEFAULT_SYNC_INTERVAL_NS)


async def always(_url: str, p: Params) -> dict[str, float]:
    """`sync_interval: always`: every commit waits for the fsync on each node that counts."""
    return await _both(p, None)


async def _both(p: Params, sync_interval_ns: int | None) -> dict[str, float]:
    assert p.store is not None, "the harness sets the store of every run"
    figures: dict[str, float] = {}
    async with _group_of_one(p.store / "single", sync_interval_ns) as propose:
        figures |= _prefixed("one", await _drive(propose, p))
    async with _group_of_three(p.store, sync_interval_ns) as propose:
        figures |= _prefixed("three", await _drive(propose, p))
    return figures


def _prefixed(prefix: str, figures: dict[str, float]) -> dict[str, float]:
    return {f"{prefix}_{key}": value for key, value in figures.items()}


@asynccontextmanager
async def _group_of_one(path: Path, sync_interval_ns: int | None) -> AsyncIterator[Propose]:
    store, restored = LogStore.open(path, name="single")
    next_index = [len(restored.entries) + 1]

    def apply(batch: list[bytes]) -> None:
        first = next_index[0]
        store.append([Entry(1, first + i, data=data) for i, data in enumerate(batch)])
        next_index[0] = first + len(batch)

    group: SingleNodeGroup[bytes] = SingleNodeGroup(
        apply, store.sync, sync_interval_ns=sync_interval_ns, name="bench group of one"
    )
    try:
        yield lambda data, on_commit: group.propose((data,), on_commit)
    finally:
        await group.close()
        store.close()


@asynccontextmanager
async def _group_of_three(root: Path, sync_interval_ns: int | None) -> AsyncIterator[Propose]:
    sync = "always" if sync_interval_ns is None else str(sync_interval_ns)
    transport = TcpTransport(LEADER)
    port = (await transport.start())[1]
    followers = await start_group(root, FOLLOWERS, ["--sync", sync], local=(LEADER, port))
    for follower in followers:
        transport.add_peer(follower.id, ("127.0.0.1", follower.raft_port))
    store, restored = LogStore.open(root / LEADER, name=LEADER)
    node = RaftNode(
        Config(LEADER, seed=int.from_bytes(os.urandom(4), "big")),
        (LEADER, *FOLLOWERS),
        store,
        restored,
        transport,
        apply=lambda _: None,
        sync_interval_ns=sync_interval_ns,
    )
    node.start()
    try:
        await _lead(node, followers)
        yield lambda data, on_commit: node.propose((data,), on_commit)
    finally:
        await node.close()
        for follower in followers:
            await follower.stop()


async def _lead(node: RaftNode, followers: list[NodeProcess]) -> None:
    """Make the in-process node the leader: campaign while nobody leads, and ask a
    follower that won (its timer may fire first) to hand over."""
    clients = {f.id: await Client.connect(f.client_port) for f in followers}
    try:
        deadline = perf_counter() + ELECTION_SECONDS
        asked = 0.0
        while node.role is not Role.LEADER:
            if perf_counter() > deadline:
                raise Incomplete(f"{node.id} not elected within {ELECTION_SECONDS:g} s")
            if perf_counter() - asked > 0.5:
                asked = perf_counter()
                if node.leader in clients:
                    await clients[node.leader].send("t", node.id)
                elif node.leader is None:
                    node.campaign()
            await asyncio.sleep(0.01)
    finally:
        for client in clients.values():
            await client.close()


async def _drive(propose: Propose, p: Params) -> dict[str, float]:
    """Entries/s with a window in flight, then p50/p99 commit latency one at a time."""
    payload = p.payload
    await _flood(propose, payload, WARM_UP, p.window)
    start = perf_counter()
    await _flood(propose, payload, p.count, p.window)
    rate = p.count / (perf_counter() - start)
    samples = []
    loop = asyncio.get_running_loop()
    for _ in range(p.sync_count):
        done: asyncio.Future[BaseException | None] = loop.create_future()
        began = perf_counter()
        propose(payload, done.set_result)
        if error := await done:
            raise Incomplete(f"a commit failed: {error}")
        samples.append(perf_counter() - began)
    return {"eps": rate, **latency_metrics(samples)}


async def _flood(propose: Propose, payload: bytes, count: int, window: int) -> None:
    """`count` proposals, at most `window` uncommitted at a time; every one must commit."""
    room = asyncio.Event()
    state = {"sent": 0, "acked": 0, "failed": 0}

    def on_commit(error: BaseException | None) -> None:
        state["acked"] += 1
        if error is not None:
            state["failed"] += 1
        if state["sent"] - state["acked"] <= window // 2 or state["acked"] == count:
            room.set()

    while state["acked"] < count:
        room.clear()  # before proposing: a proposal refused at once sets it again
        while state["sent"] < count and state["sent"] - state["acked"] < window:
            state["sent"] += 1
            propose(payload, on_commit)
        await room.wait()
    if state["failed"]:
        raise Incomplete(f"{state['failed']} of {count} commits failed")
