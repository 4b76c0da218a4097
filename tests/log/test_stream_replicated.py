"""A stream replicated by Raft: every change is an entry, and every member's store is the same.

Three `Stream`s, each over its own `RaftGroup` (stream entries through their
binary codec), follow the group's leadership as a server does, from the
node's leader-change listener. Replay is tested without Raft: the entries a
stream applied are applied again, as a restarted member re-applies its log.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from consensus.commits import OnCommit
from consensus.types import NodeId, NotLeaderError, Role
from log.config import from_request
from log.raft_group import RaftGroup
from log.replication import ReplicationGroup, SingleNodeGroup
from log.segments.api import MEMORY_OVERHEAD, MsgStore, NewMsg, StoreError, msg_size
from log.segments.filestore import FileStore
from log.segments.memstore import MemoryStore
from log.streams.entries import (
    Entry,
    Publish,
    RawRun,
    Run,
    decode_deferring_runs,
    encode,
    own_entry,
    unpack_runs,
)
from log.streams.stream import Stream, StreamNotLeaderError
from log.timefmt import now_ns
from tests.consensus.cluster import Cluster, until
from tests.log.raft_members import NodeFactory, raft_members
from tests.log.test_stream import NS, pub_headers, read_headers

CONFIG = {
    "name": "s",
    "subjects": ["s.>"],
    "allow_rollup_hdrs": True,
    "allow_msg_ttl": True,
    "subject_delete_marker_ttl": 60 * NS,
    "max_msgs_per_subject": 3,
    "max_msgs": 12,
}
Members = dict[NodeId, Stream]


def dump(store: MsgStore) -> tuple[Any, ...]:
    """Everything a reader can tell of a store."""
    state = store.state()
    msgs = [store.load(seq) for seq in store.seqs_for(">", 0)]
    return state.first_seq, state.last_seq, state.msgs, state.bytes, msgs


def member(n: NodeId, node: NodeFactory, ops: dict[NodeId, list[tuple[str, bytes]]]) -> Stream:
    rafts: list[RaftGroup[Entry]] = []

    def group(apply: Callable[[list[Entry]], None], _: object) -> RaftGroup[Entry]:
        rafts.append(
            RaftGroup(
                apply,
                node,
                encode=encode,
                decode=decode_deferring_runs,
                own=own_entry,
                name=f"s on {n}",
            )
        )
        return rafts[0]

    stream = Stream(
        from_request(CONFIG),
        MemoryStore(name=n),
        created_ns=0,
        read_headers=read_headers,
        group=group,
    )
    rafts[0].node.on_leader_change(lambda leader, _term: stream.set_leader(leader == n))
    ops[n] = []
    stream.consumer_ops = lambda consumer, op: ops[n].append((consumer, op))
    return stream


@pytest.fixture
async def cluster(
    tmp_path: Path,
) -> AsyncIterator[tuple[Cluster, Members, dict[NodeId, list[tuple[str, bytes]]]]]:
    ops: dict[NodeId, list[tuple[str, bytes]]] = {}
    async with raft_members(tmp_path, lambda n, node: member(n, node, ops)) as (c, members):
        yield c, members, ops


async def leading(c: Cluster, members: Members) -> Stream:
    """The leader's stream, once it accepts."""
    node = await c.leader()
    stream = members[node.id]
    await until(lambda: stream.accepting, f"{node.id} accepts")
    return stream


async def pub(stream: Stream, subject: str, data: bytes = b"x", **headers: str) -> Any:
    acks: list[bytes] = []
    block, hdrs = pub_headers(headers)
    stream.publish(subject, block, data, hdrs, acks.append)
    await until(lambda: bool(acks), f"an ack for {subject}")
    return json.loads(acks[0])


async def converged(members: Members, leader: Stream) -> tuple[Any, ...]:
    """Wait until every member's store is the leader's; return it."""
    await until(
        lambda: all(dump(s.store) == dump(leader.store) for s in members.values()),
        "every member stores the same",
    )
    return dump(leader.store)


def live(stream: Stream) -> list[int]:
    return list(stream.store.seqs_for(">", 0))


async def test_publishes_dedup_rollups_and_limits_are_the_same_everywhere(
    cluster: tuple[Cluster, Members, Any],
) -> None:
    c, members, _ = cluster
    leader = await leading(c, members)
    assert (await pub(leader, "s.a", Nats_Msg_Id="one"))["seq"] == 1
    assert await pub(leader, "s.b", Nats_Msg_Id="one") == {
        "stream": "s",
        "seq": 1,
        "duplicate": True,
    }
    for i in range(5):  # s.a keeps its newest three
        await pub(leader, "s.a", b"a%d" % i)
    for i in range(10):  # max_msgs 12 drops the oldest
        await pub(leader, f"s.n{i}")
    await pub(leader, "s.r", Nats_Rollup="sub")
    await converged(members, leader)
    assert live(leader) == list(range(6, 18))  # 4 and 5: max_msgs, 1-3: s.a's limit
    await pub(leader, "s.a", Nats_Rollup="sub")
    await pub(leader, "s.z")
    await pub(leader, "s.all", Nats_Rollup="all")
    await converged(members, leader)
    assert live(leader) == [20]
    for stream in members.values():  # followers keep the dedup window for when they lead
        assert stream.proposed.dedup_seq("one") == 1


async def test_admin_ops_expiry_removals_and_consumer_ops_apply_everywhere(
    cluster: tuple[Cluster, Members, dict[NodeId, list[tuple[str, bytes]]]],
) -> None:
    c, members, ops = cluster
    leader = await leading(c, members)
    for i in range(8):
        await pub(leader, f"s.{i % 4}", b"%d" % i)
    assert await leader.purge("s.>", keep=5) == 3
    await leader.delete_msg(5)
    with pytest.raises(Exception, match="no message found"):
        await leader.delete_msg(5)
    done: list[BaseException | None] = []
    leader.remove([6, 2], done.append)  # 2 went with the purge: skipped
    await until(lambda: done == [None], "the removal commits")
    await pub(leader, "s.t", Nats_TTL="1s")
    await pub(leader, "s.t2", Nats_TTL="1s")
    await pub(leader, "s.t2")  # s.t2 keeps a message: no marker for it
    assert await leader.expire(now_ns() + 61 * NS) == 1  # TTLs raised to the marker's 60s
    await leader.flush()
    final = await converged(members, leader)
    assert [m.seq for m in final[4]] == [4, 7, 8, 11, 12]
    assert final[4][-1].subject == "s.t" and b"Nats-Marker-Reason: MaxAge" in final[4][-1].hdr
    leader.propose_consumer_op("d", b"\x01op")
    leader.propose_consumer_op("e", b"\x02")
    await leader.flush()
    await until(lambda: all(o == [("d", b"\x01op"), ("e", b"\x02")] for o in ops.values()), "ops")


async def test_a_run_of_publishes_is_one_entry_applied_as_each_publish(
    cluster: tuple[Cluster, Members, Any],
) -> None:
    """A client's PUBs read together travel as one Run entry: acked with consecutive seqs,
    stored on every member as if published one by one (the subject's limit included)."""
    c, members, _ = cluster
    leader = await leading(c, members)
    await pub(leader, "s.a", b"first")
    answers: list[tuple[bytes, bytes]] = []
    replies = [b"r%d" % i for i in range(5)]
    leader.publish_run("s.a", replies, [b"%d" % i for i in range(5)], answers.extend)
    await until(lambda: len(answers) == 5, "the run's acks")
    seqs = [json.loads(body)["seq"] for _, body in answers]
    assert [r for r, _ in answers] == replies and seqs == [2, 3, 4, 5, 6]
    store = await converged(members, leader)
    assert live(leader) == [4, 5, 6]  # max_msgs_per_subject 3
    assert [m.data for m in store[4]] == [b"2", b"3", b"4"]


async def test_a_new_leader_continues_the_sequence_and_the_dedup_window(
    cluster: tuple[Cluster, Members, Any],
) -> None:
    c, members, _ = cluster
    old = await leading(c, members)
    for i in range(5):
        await pub(old, "s.a", Nats_Msg_Id=f"id{i}")
    old.publish("s.a", None, b"in flight", {}, None)  # commits during the handover
    target = next(n for n, s in members.items() if s is not old)
    c.nodes[next(n for n, s in members.items() if s is old)].transfer_leadership(target)
    await until(lambda: c.nodes[target].role is Role.LEADER, f"{target} leads")
    new = members[target]
    await until(lambda: new.accepting and not old.accepting, "the gate moved")
    assert new.last_seq == 6
    assert await pub(new, "s.a", Nats_Msg_Id="id2") == {"stream": "s", "seq": 3, "duplicate": True}
    assert (await pub(new, "s.b"))["seq"] == 7
    final = await converged(members, new)
    assert [m.seq for m in final[4]] == [4, 5, 6, 7]  # s.a: its newest three
    acks: list[bytes] = []
    old.publish("s.c", None, b"x", {}, acks.append)
    with pytest.raises(StreamNotLeaderError):
        old.purge()
    await new.flush()
    assert acks == [] and old.last_seq == 7


async def test_a_follower_neither_proposes_nor_expires(
    cluster: tuple[Cluster, Members, Any],
) -> None:
    c, members, _ = cluster
    leader = await leading(c, members)
    await pub(leader, "s.a", Nats_TTL="1s")
    follower = next(s for s in members.values() if s is not leader)
    await until(lambda: follower.last_seq == 1, "the follower applied")
    acks: list[bytes] = []
    follower.publish("s.a", None, b"x", {}, acks.append)
    with pytest.raises(StreamNotLeaderError):
        follower.delete_msg(1)
    assert follower.next_expiry() is None
    assert await follower.expire(now_ns() + 5 * NS) == 0
    await leader.flush()
    assert acks == [] and follower.last_seq == 1  # a proposal would have taken seq 2
    assert live(follower) == [1]


# -- replay: a restarted member applies its log again over its store ---------------------------


class Recorded:
    """A group of one that keeps every entry it applied, in log order."""

    def __init__(self) -> None:
        self.log: list[Entry] = []

    def __call__(
        self, apply: Callable[[list[Entry]], None], sync: Callable[[], None]
    ) -> ReplicationGroup[Entry]:
        def recording(entries: list[Entry]) -> None:
            self.log.extend(entries)
            apply(entries)

        return SingleNodeGroup(recording, sync)


def replica(
    store: MsgStore, config: dict[str, Any] = CONFIG
) -> tuple[Stream, Callable[[list[Entry]], None]]:
    """A stream over `store` whose group only hands over its apply function."""
    got: list[Callable[[list[Entry]], None]] = []

    def group(apply: Callable[[list[Entry]], None], sync: Callable[[], None]) -> Any:
        got.append(apply)
        return SingleNodeGroup(apply, sync)

    stream = Stream(
        from_request(config), store, created_ns=0, read_headers=read_headers, group=group
    )
    return stream, got[0]


@pytest.fixture
async def history() -> tuple[Stream, list[Entry]]:
    """A stream's whole repertoire, and the entries it applied."""
    recorded = Recorded()
    source = Stream(
        from_request(CONFIG),
        MemoryStore(name="s"),
        created_ns=0,
        read_headers=read_headers,
        group=recorded,
    )
    source.set_leader(True)
    await until(lambda: source.accepting, "the source accepts")
    for i in range(10):
        await pub(source, f"s.{i % 3}", b"%d" % i, Nats_Msg_Id=f"m{i}")
    await pub(source, "s.t", Nats_TTL="1s")
    await pub(source, "s.1", Nats_Rollup="sub")
    await source.purge(keep=5)
    await source.delete_msg(9)
    source.remove([10])
    await source.expire(now_ns() + 61 * NS)
    await source.flush()
    for i in range(4):  # after the purge: a replay must not let these change what it purged
        await pub(source, "s.later", b"%d" % i)
    answers: list[tuple[bytes, bytes]] = []
    source.publish_run("s.run", [b"r1", b"", b"r3"], [b"1", b"2", b"3"], answers.extend)
    await until(lambda: len(answers) == 2, "the run's acks")
    return source, recorded.log


async def test_applying_the_log_again_changes_nothing(history: tuple[Stream, list[Entry]]) -> None:
    source, log = history
    kinds = {"Purge", "Delete", "Remove", "Expire", "Run"}  # a lone publish: a Run of one
    assert {type(e).__name__ for e in log} >= kinds
    stream, apply = replica(MemoryStore(name="r"))
    apply(log)
    assert dump(stream.store) == dump(source.store)
    apply(log)
    assert dump(stream.store) == dump(source.store)
    restarted, apply_again = replica(stream.store)  # a restart: state recovered from the store
    apply_again(log)
    assert dump(restarted.store) == dump(source.store)
    restarted.set_leader(True)
    await until(lambda: restarted.accepting, "the restarted member accepts")
    assert restarted.last_seq == source.last_seq
    assert (await pub(restarted, "s.x", Nats_Msg_Id="m9"))["duplicate"] is True


async def test_a_follower_appends_runs_from_their_bytes_as_their_publishes(
    history: tuple[Stream, list[Entry]], tmp_path: Path
) -> None:
    """Runs as a follower reads them (RawRun: a plain run's batch straight from its bytes)
    leave the store the leader's Runs leave, in memory and in files, replayed too."""
    _, log = history
    raw = [decode_deferring_runs(encode(e)) if type(e) is Run else e for e in log]
    runs = [e for e in raw if type(e) is RawRun]
    plain = [e for e in runs if not any(p.msg_id or p.ttl or p.rollup for p in e.msgs)]
    assert plain and all(e.rows(MEMORY_OVERHEAD) is not None for e in plain)
    for kind, make in (("memory", MemoryStore), ("file", FileStore)):
        stores = []
        for entries in (log, raw, raw):
            store = (
                make(tmp_path / f"{kind}{len(stores)}", name="r")
                if kind == "file"
                else make(name="r")
            )
            stream, apply = replica(store)
            apply(entries)
            if len(stores) == 2:
                apply(raw)  # a replay: the store holds them, the run is read as its publishes
            stores.append(dump(stream.store))
        assert stores[1] == stores[0] and stores[2] == stores[0], kind


async def test_a_store_that_lost_its_tail_gets_it_back_but_a_gap_raises(
    history: tuple[Stream, list[Entry]],
) -> None:
    source, log = history
    publishes = [e for e in unpack_runs(log) if isinstance(e, Publish)]
    short = MemoryStore(name="short")
    short.append([e.msg for e in publishes[:6]])  # what survived of unsynced writes
    stream, apply = replica(short)
    apply(log)
    assert dump(stream.store) == dump(source.store)
    _, apply_gapped = replica(MemoryStore(name="gap"))
    with pytest.raises(StoreError, match="stream s: store assigned seq 1, log expected 2"):
        apply_gapped(publishes[1:])


async def test_limits_do_not_depend_on_how_the_log_is_split_into_batches() -> None:
    """With max_bytes and a per-subject limit together, trimming s.b frees bytes that
    trimming at the end of a batch would not have needed: message by message it is."""
    cfg = {"name": "s", "subjects": ["s.>"], "max_msgs_per_subject": 1}
    sizes = [msg_size(s, None, d, MEMORY_OVERHEAD) for s, d in (("s.a", b"1"), ("s.b", b"2" * 99))]
    cfg["max_bytes"] = sum(sizes) - 1
    log: list[Entry] = [
        Publish(NewMsg("s.a", None, b"1", 1), 1),
        Publish(NewMsg("s.b", None, b"2" * 99, 2), 2),
        Publish(NewMsg("s.b", None, b"3", 3), 3),
    ]
    outcomes = []
    for batches in ([log], [[e] for e in log], [log[:2], log[2:]]):
        stream, apply = replica(MemoryStore(name="s"), cfg)
        for batch in batches:
            apply(batch)
        outcomes.append(live(stream))
    # each a run of one as a follower reads it (a KV put): appended whole, as one message
    stream, apply = replica(MemoryStore(name="s"), cfg)
    whole: list[int] = []
    append_rows = stream.store.append_rows
    stream.store.append_rows = lambda rows: (whole.append(rows.first), append_rows(rows))[1]  # type: ignore[method-assign]
    for entry in log:
        apply([decode_deferring_runs(encode(Run((entry,))))])
    outcomes.append(live(stream))
    assert whole == [1, 2, 3]
    assert outcomes == [[3], [3], [3], [3]]


class Manual:
    """A group the test drives: proposals wait until it commits or drops them all."""

    def __init__(self, apply: Callable[[list[Entry]], None]) -> None:
        self.apply = apply
        self.committed = 0
        self.proposed: list[tuple[list[Entry], list[OnCommit]]] = []

    def propose(
        self,
        entries: Sequence[Entry],
        on_commit: OnCommit | None = None,
        *,
        early: OnCommit | None = None,
    ) -> None:
        self.proposed.append((list(entries), [cb for cb in (early, on_commit) if cb]))

    def settle(self, *, commit: bool) -> None:
        proposed, self.proposed = self.proposed, []
        for entries, callbacks in proposed:
            if commit:
                self.apply(entries)
                self.committed += len(entries)
            for on_commit in callbacks:
                on_commit(None if commit else NotLeaderError("n2"))

    async def close(self) -> None:
        self.proposed = []


async def test_a_new_leader_assigns_nothing_before_it_applied_what_came_before() -> None:
    groups: list[Manual] = []

    def manual(apply: Callable[[list[Entry]], None], _: object) -> Any:
        groups.append(Manual(apply))
        return groups[0]

    stream = Stream(
        from_request(CONFIG),
        MemoryStore(name="s"),
        created_ns=0,
        read_headers=read_headers,
        group=manual,
    )
    group = groups[0]
    assert not stream.accepting
    stream.set_leader(True)
    acks: list[bytes] = []
    stream.publish("s.a", None, b"early", {}, acks.append)  # before the barrier: ignored
    group.apply([Publish(NewMsg("s.a", None, b"old term", now_ns()), 1, msg_id="x")])  # elsewhere's
    assert [type(e).__name__ for batch, _ in group.proposed for e in batch] == ["Barrier"]
    group.settle(commit=True)
    assert stream.accepting and stream.last_seq == 1 and stream.proposed.dedup_seq("x") == 1
    stream.publish("s.a", None, b"mine", {}, acks.append)
    stream.publish("s.a", None, b"mine too", {}, acks.append)
    stream.set_leader(False)  # lost before they commit: they never will
    group.settle(commit=False)
    assert acks == [] and not stream.accepting
    with pytest.raises(StreamNotLeaderError):
        stream.purge()
    stream.set_leader(True)
    group.settle(commit=True)
    stream.publish("s.a", None, b"again", {}, acks.append)
    group.settle(commit=True)
    assert [json.loads(a)["seq"] for a in acks] == [2]  # no gap where the lost ones were
    await stream.close()
