"""The ReplicationGroup contract, held by the group of one and by a 3-node RaftGroup alike.

The Raft group is real: three RaftNodes with their logs on disk, over loopback
TCP, each applying through its own RaftGroup; proposals go to the leader's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from consensus.driver import Apply
from consensus.types import Message, MessageType, NotLeaderError
from log.raft_group import READ_SECONDS, RaftGroup
from log.replication import GroupClosedError, ReplicationGroup, SingleNodeGroup
from tests.consensus.cluster import DEADLINE, Cluster, until
from tests.log.raft_members import NodeFactory, raft_members

OnCommitLog = list[tuple[int, BaseException | None]]


@dataclass
class Harness:
    group: ReplicationGroup[int]
    batches: list[list[int]] = field(default_factory=list)  # what the proposing member applied
    broken: bool = False

    def apply(self, batch: list[int]) -> None:
        if self.broken:
            raise OSError("disk gone")
        self.batches.append(batch)

    async def close(self) -> None:
        await self.group.close()


def ints(apply: Callable[[list[int]], None], node: Callable[[Apply], object]) -> RaftGroup[int]:
    return RaftGroup(
        apply,
        node,  # type: ignore[arg-type]
        encode=lambda n: n.to_bytes(8, "big"),
        decode=lambda b: int.from_bytes(b, "big"),
    )


def int_member(_: str, node: NodeFactory) -> Harness:
    h = Harness(group=None)  # type: ignore[arg-type]
    h.group = ints(h.apply, node)
    return h


@pytest.fixture(params=["single", "raft"])
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    if request.param == "single":
        h = Harness(group=None)  # type: ignore[arg-type]
        h.group = SingleNodeGroup(h.apply, lambda: None)
        yield h
        await h.group.close()
        return
    async with raft_members(tmp_path, int_member) as (cluster, harnesses):
        leader = await cluster.leader()
        yield harnesses[leader.id]


def recorder(calls: OnCommitLog, n: int) -> Callable[[BaseException | None], None]:
    return lambda error: calls.append((n, error))


async def test_proposals_commit_in_order_each_proposer_hears_once(harness: Harness) -> None:
    calls: OnCommitLog = []
    for n in range(1, 101):
        harness.group.propose([n], recorder(calls, n))
    assert await harness.group.barrier() == 100
    assert calls == [(n, None) for n in range(1, 101)]
    assert [n for batch in harness.batches for n in batch] == list(range(1, 101))
    assert harness.group.committed == 100


async def test_barrier_waits_for_what_was_proposed_before_it(harness: Harness) -> None:
    harness.group.propose([1, 2])
    harness.group.propose([3])
    barrier = harness.group.barrier()
    assert not barrier.done()
    assert await barrier == 3
    assert harness.group.committed == 3
    assert await harness.group.barrier() == 3  # nothing new: resolves at once


async def test_after_close_proposals_are_refused(harness: Harness) -> None:
    calls: OnCommitLog = []
    harness.group.propose([1], recorder(calls, 1))
    await harness.group.close()
    harness.group.propose([2], recorder(calls, 2))
    assert calls[0] == (1, None)
    assert calls[1][0] == 2 and isinstance(calls[1][1], GroupClosedError)


async def test_a_failed_apply_fails_its_proposal_and_everything_after(harness: Harness) -> None:
    calls: OnCommitLog = []
    harness.group.propose([1], recorder(calls, 1))
    await harness.group.barrier()
    harness.broken = True
    harness.group.propose([2], recorder(calls, 2))
    with pytest.raises(Exception, match="disk gone"):
        await asyncio.wait_for(harness.group.barrier(), DEADLINE)
    harness.group.propose([3], recorder(calls, 3))
    assert [n for n, _ in calls] == [1, 2, 3]
    assert calls[0][1] is None
    assert all("disk gone" in str(error) for _, error in calls[1:])


# -- Raft only ------------------------------------------------------------------------


@pytest.fixture
async def members(tmp_path: Path) -> AsyncIterator[tuple[Cluster, dict[str, Harness]]]:
    async with raft_members(tmp_path, int_member) as got:
        yield got


async def test_every_member_applies_the_same_batches_and_followers_name_the_leader(
    members: tuple[Cluster, dict[str, Harness]],
) -> None:
    cluster, harnesses = members
    leader = await cluster.leader()
    for n in range(1, 51):
        harnesses[leader.id].group.propose([n])
    await harnesses[leader.id].group.barrier()
    for name, h in harnesses.items():
        await until(lambda h=h: h.group.committed == 50, f"{name} applied all")
        assert [n for batch in h.batches for n in batch] == list(range(1, 51))
    follower = next(h for name, h in harnesses.items() if name != leader.id)
    calls: OnCommitLog = []
    follower.group.propose([99], recorder(calls, 99))
    error = calls[0][1]
    assert isinstance(error, NotLeaderError) and error.leader == leader.id
    assert f"leader: {leader.id}" in str(error)


async def test_the_leader_applies_what_it_proposed_undecoded(
    members: tuple[Cluster, dict[str, Harness]],
) -> None:
    """The leader skips decoding its own entries: it applies the objects it proposed (equal
    to what the followers decode), and keeps none of them once they applied."""
    cluster, harnesses = members
    leader = await cluster.leader()
    proposed = [10**12 + n for n in range(20)]  # ints this large are new objects when decoded
    for n in proposed:
        harnesses[leader.id].group.propose([n])
    await harnesses[leader.id].group.barrier()
    for name, h in harnesses.items():
        await until(lambda h=h: h.group.committed == 20, f"{name} applied all")
        applied = [n for batch in h.batches for n in batch]
        assert applied == proposed
        mine = name == leader.id
        assert all((a is p) == mine for a, p in zip(applied, proposed, strict=True))
    assert not harnesses[leader.id].group._own


async def test_a_read_point_whose_request_was_lost_is_asked_again(tmp_path: Path) -> None:
    """Raft resends no READ_INDEX: a follower's read whose request a reconnecting route
    dropped is asked again within the read's deadline, not failed at it."""
    async with raft_members(tmp_path, int_member) as (cluster, harnesses):
        leader = await cluster.leader()
        committed: asyncio.Future[BaseException | None] = asyncio.Future()
        harnesses[leader.id].group.propose([7], committed.set_result)
        assert await committed is None
        follower = next(n for n in cluster.ids if n != leader.id)
        transport = cluster.transports[follower]
        send = transport.send
        dropped: list[Message] = []

        def lose_the_first_read(msg: Message) -> None:
            if msg.type is MessageType.READ_INDEX and not dropped:
                dropped.append(msg)
                return
            send(msg)

        transport.send = lose_the_first_read  # type: ignore[method-assign]
        await asyncio.wait_for(harnesses[follower].group.read_point(), READ_SECONDS)  # type: ignore[attr-defined]
        assert len(dropped) == 1
        assert harnesses[follower].batches[-1] == [7]


async def test_read_points_on_every_member_see_what_committed_before(tmp_path: Path) -> None:
    """ReadIndex at the leader and at followers, one after another and many at once:
    each round resolves, and a member answers only once it applied every earlier commit."""
    async with raft_members(tmp_path, int_member) as (cluster, harnesses):
        leader = await cluster.leader()
        for round_ in range(1, 21):
            committed: asyncio.Future[BaseException | None] = asyncio.Future()
            harnesses[leader.id].group.propose([round_], committed.set_result)
            assert await committed is None
            for member in harnesses.values():
                await asyncio.wait_for(member.group.read_point(), DEADLINE)  # type: ignore[attr-defined]
                assert member.batches[-1][-1] == round_
        points = [m.group.read_point() for m in harnesses.values() for _ in range(50)]  # type: ignore[attr-defined]
        await asyncio.wait_for(asyncio.gather(*points), DEADLINE)
        assert len({id(p) for p in points}) == len(harnesses)  # one shared round per member
        for member in harnesses.values():
            assert [n for b in member.batches for n in b] == list(range(1, 21))
