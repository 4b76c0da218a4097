"""Three RaftNodes in one process over real loopback TCP, with their real logs on disk."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from consensus.driver import NodeClosedError, RaftNode
from consensus.log_store import LogStore
from consensus.types import ConfChange, ConfOp, Entry, NotLeaderError, Role
from tests.consensus.cluster import DEADLINE, Cluster, until


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    group = Cluster(tmp_path)
    await group.start()
    try:
        yield group
    finally:
        await group.close()


def payloads(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


async def propose_all(cluster: Cluster, leader_id: str, data: list[bytes]) -> None:
    """All in flight at once, as a stream's publishers do; every one must commit."""
    await asyncio.gather(*(cluster.propose(cluster.nodes[leader_id], d) for d in data))


async def test_elect_then_commit_and_apply_in_order_on_all(cluster: Cluster) -> None:
    leader = await cluster.leader()
    data = payloads("a", 200)
    await propose_all(cluster, leader.id, data)
    assert cluster.journals[leader.id].items == data  # acked means applied on the leader
    for n in cluster.ids:
        await until(lambda n=n: len(cluster.journals[n].items) == 200, f"{n} applied all")
        assert cluster.journals[n].items == data
        indexes = cluster.journals[n].indexes
        assert indexes == list(range(1, len(indexes) + 1))  # no gap, no repeat


async def test_a_follower_refuses_naming_the_leader(cluster: Cluster) -> None:
    leader = await cluster.leader()
    follower = next(cluster.nodes[n] for n in cluster.ids if n != leader.id)
    with pytest.raises(NotLeaderError, match=f"leader: {leader.id}") as caught:
        await cluster.propose(follower, b"x")
    assert caught.value.leader == leader.id


async def test_leader_killed_a_new_one_takes_over_and_nothing_acked_is_lost(
    cluster: Cluster,
) -> None:
    first = await cluster.leader()
    before = payloads("before", 50)
    await propose_all(cluster, first.id, before)
    await cluster.kill(first.id)
    survivors = tuple(n for n in cluster.ids if n != first.id)
    second = await cluster.leader(survivors)
    assert second.term > first.term
    after = payloads("after", 50)
    await propose_all(cluster, second.id, after)
    for n in survivors:
        await until(lambda n=n: len(cluster.journals[n].items) == 100, f"{n} applied all")
        assert cluster.journals[n].items == before + after


async def test_a_restarted_node_catches_up_from_its_disk_and_the_leader(
    cluster: Cluster,
) -> None:
    leader = await cluster.leader()
    lagging = next(n for n in cluster.ids if n != leader.id)
    first = payloads("one", 30)
    await propose_all(cluster, leader.id, first)
    await until(lambda: len(cluster.journals[lagging].items) == 30, "follower applied")
    await cluster.kill(lagging)
    second = payloads("two", 30)
    await propose_all(cluster, leader.id, second)
    restarted = await cluster.restart(lagging)
    await until(lambda: len(cluster.journals[lagging].items) == 60, "caught up")
    assert cluster.journals[lagging].items == first + second
    assert restarted.term == leader.term and restarted.leader == leader.id


async def test_read_index_after_failover_is_never_stale(cluster: Cluster) -> None:
    first = await cluster.leader()
    await propose_all(cluster, first.id, payloads("w", 20))
    await cluster.kill(first.id)
    survivors = tuple(n for n in cluster.ids if n != first.id)
    await cluster.leader(survivors)
    for n in survivors:  # on the new leader and on a follower (forwarded) alike
        node, journal = cluster.nodes[n], cluster.journals[n]
        applied = await asyncio.wait_for(node.read_index(), DEADLINE)
        assert applied >= 21  # the 20 acked entries and the first leader's no-op at least
        assert journal.items[:20] == payloads("w", 20)  # visible the moment the read returns


async def test_a_snapshot_compacts_the_log_and_a_late_node_installs_it(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, snapshot_entries=10)
    await cluster.start()
    try:
        leader = await cluster.leader()
        lagging = next(n for n in cluster.ids if n != leader.id)
        await cluster.kill(lagging)
        data = payloads("s", 45)
        for chunk in range(0, 45, 5):  # several Readies, so snapshots are taken between them
            await propose_all(cluster, leader.id, data[chunk : chunk + 5])
        assert leader.status()["applied"] == cluster.nodes[leader.id].applied
        await cluster.restart(lagging)
        await until(lambda: len(cluster.journals[lagging].items) == 45, "caught up")
        assert cluster.journals[lagging].items == data
        assert 20 not in cluster.journals[lagging].indexes  # a snapshot covered it, no replay
        await cluster.kill(leader.id)  # and a node restarts from its own snapshot
        again = await cluster.restart(leader.id)
        await until(lambda: cluster.journals[leader.id].items == data, "restored + replayed")
        assert again.applied >= 46
    finally:
        await cluster.close()


async def test_sync_always_commits_and_a_closed_node_refuses(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, sync_interval_ns=None)
    await cluster.start()
    try:
        leader = await cluster.leader()
        data = payloads("f", 100)
        await propose_all(cluster, leader.id, data)
        assert cluster.journals[leader.id].items == data
        await cluster.kill(leader.id)
        with pytest.raises(NodeClosedError, match=leader.id):
            await cluster.propose(leader, b"late")
    finally:
        await cluster.close()


async def test_leadership_moves_on_request_and_listeners_hear_of_it(cluster: Cluster) -> None:
    heard: dict[str, list[tuple[str | None, int]]] = {n: [] for n in cluster.ids}
    for n, node in cluster.nodes.items():
        node.on_leader_change(lambda leader, term, n=n: heard[n].append((leader, term)))
    first = await cluster.leader()
    await propose_all(cluster, first.id, payloads("x", 10))
    target = next(n for n in cluster.ids if n != first.id)
    first_term = first.term
    first.transfer_leadership(target)
    await until(lambda: cluster.nodes[target].role is Role.LEADER, f"{target} leads")
    second = await cluster.leader()
    assert second.id == target
    await propose_all(cluster, target, payloads("y", 10))
    for n in cluster.ids:
        await until(lambda n=n: heard[n][-1:] == [(target, second.term)], f"{n} heard")
    assert second.term > first_term
    assert any(leader == first.id for leader, _ in heard[target])  # it knew the old one first


async def test_a_burst_of_proposals_is_one_append_and_one_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commit under `always`: proposals that arrive together share a write and an
    fsync on the leader instead of paying one each."""
    calls: Counter[tuple[str, str]] = Counter()
    append, sync = LogStore.append, LogStore.sync

    def counted_append(store: LogStore, entries: Sequence[Entry]) -> None:
        calls[store.name, "append"] += 1
        append(store, entries)

    def counted_sync(store: LogStore) -> None:
        if threading.current_thread().name != "background-sync":  # the commit-index window's
            calls[store.name, "sync"] += 1
        sync(store)

    monkeypatch.setattr(LogStore, "append", counted_append)
    monkeypatch.setattr(LogStore, "sync", counted_sync)
    cluster = Cluster(tmp_path, sync_interval_ns=None)
    await cluster.start()
    try:
        leader = await cluster.leader()
        await propose_all(cluster, leader.id, payloads("warm", 1))
        before = calls.copy()
        await propose_all(cluster, leader.id, payloads("g", 300))
        appends = calls[leader.id, "append"] - before[leader.id, "append"]
        syncs = calls[leader.id, "sync"] - before[leader.id, "sync"]
        assert 1 <= appends <= 2 and 1 <= syncs <= 2, (appends, syncs)
    finally:
        await cluster.close()


async def test_a_read_lost_with_the_old_leader_is_asked_of_the_new_one(cluster: Cluster) -> None:
    first = await cluster.leader()
    await propose_all(cluster, first.id, payloads("r", 10))
    follower = next(cluster.nodes[n] for n in cluster.ids if n != first.id)
    await cluster.transports[first.id].close()  # the forwarded read goes nowhere
    read = asyncio.ensure_future(follower.read_index())
    await cluster.kill(first.id)
    applied = await asyncio.wait_for(read, DEADLINE)
    assert applied >= 11
    assert cluster.journals[follower.id].items[:10] == payloads("r", 10)


async def test_a_read_begun_before_any_leader_is_served_once_one_is_elected(
    tmp_path: Path,
) -> None:
    """Reads that start while no leader is known (a group just started, or one whose
    leader stalled long enough for an election) wait for the next leader, on every member:
    none is refused for an election that is about to end."""
    group = Cluster(tmp_path)
    await group.start()
    try:
        nodes = [group.nodes[n] for n in group.ids]
        assert all(node.leader is None for node in nodes)  # no election timeout has passed
        reads = [asyncio.ensure_future(node.read_index()) for node in nodes]
        leader = await group.leader()
        await group.propose(leader, b"after")
        applied = await asyncio.wait_for(asyncio.gather(*reads), DEADLINE)
        assert all(index >= 1 for index in applied)  # the leader's no-op at least
    finally:
        await group.close()


async def test_a_member_is_replaced_one_change_at_a_time(cluster: Cluster) -> None:
    """Remove a voter, add a learner that catches up from the log, promote it: what a
    stream's peer removal does. The newcomer starts from the group's original voters,
    as a joining server must, and learns every change from the log."""
    leader = await cluster.leader()
    await propose_all(cluster, leader.id, payloads("before", 50))
    gone = next(n for n in cluster.ids if n != leader.id)
    await cluster.kill(gone)
    await change(leader, ConfChange(ConfOp.REMOVE, gone))
    newcomer = await cluster.join("n4")
    await change(leader, ConfChange(ConfOp.ADD_LEARNER, "n4"))
    await until(lambda: len(cluster.journals["n4"].items) == 50, "the learner caught up")
    await until(
        lambda: learner_match(leader, "n4") >= int(leader.status()["commit"]),  # type: ignore[call-overload]
        "the leader knowing it",
    )
    await change(leader, ConfChange(ConfOp.PROMOTE, "n4"))
    assert leader.status()["voters"] == sorted({*cluster.ids, "n4"} - {gone})
    await propose_all(cluster, leader.id, payloads("after", 20))
    await until(lambda: len(cluster.journals["n4"].items) == 70, "the new voter applied all")
    assert newcomer.status()["voters"] == leader.status()["voters"]


def learner_match(leader: RaftNode, node: str) -> int:
    peers = leader.status().get("peers") or {}
    return int(peers.get(node, {}).get("match", 0))  # type: ignore[union-attr]


async def change(node: RaftNode, change: ConfChange) -> None:
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    node.change_membership(change, lambda e: done.set_exception(e) if e else done.set_result(None))
    await done
