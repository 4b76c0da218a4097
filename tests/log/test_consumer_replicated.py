"""Consumer state carried in the stream's log: proposed by the leader, applied everywhere.

`OpLog` stands in for the stream's Raft group where a test must decide when
an entry commits (an AckSync unanswered until then, a leader lost in between):
proposals wait for `commit`, then every member applies them in log order. The
last test runs the same failover over three real streams in one Raft group.
The consumers are real throughout: `Consumers` of a `JetStream` engine per
member (behind the engine tests' fake Messaging port), each with its own
stream and folder.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from consensus.commits import OnCommit
from consensus.types import NotLeaderError, Role
from ingest.server.jetstream import JetStream
from log.config import from_request
from log.consumers import store as cstore
from log.consumers.ops import ConsumerOpError, encode_records
from log.consumers.replicated import ConsumerFiles, ReplicatedStore
from log.consumers.store import (
    ACKED,
    ASIDE_FILE,
    DELIVERED,
    META_FILE,
    POSITION,
    STATE_FILE,
    consumers_dir,
    load_all,
)
from log.errors import ApiError
from log.raft_group import RaftGroup
from log.segments.memstore import MemoryStore
from log.state_file import read_state
from log.streams.stream import Stream
from tests.consensus.cluster import Cluster
from tests.jetstream.test_engine import FakeMessaging, engine_config
from tests.support.poll import poll_async

Apply = Callable[[str, bytes], None]
CONFIG = {"durable_name": "d", "ack_policy": "explicit"}
STATE = {
    "dseq": 1,
    "sseq": 1,
    "adflr": 0,
    "asflr": 0,
    "pending": [],
    "redelivered": [],
    "lps": [],
    "lps_resume": 0,
    "last_delivered": 0,
    "last_acked": 0,
}

FAST = 0.005  # in-process members on fast ticks: a wait costs only loop turns


@dataclass
class OpLog:
    members: list[Apply] = field(default_factory=list)
    entries: list[tuple[str, bytes]] = field(default_factory=list)  # committed, in order
    proposed: list[tuple[str, bytes, OnCommit | None]] = field(default_factory=list)
    leader: bool = True

    def propose_consumer_op(self, consumer: str, op: bytes, on_commit: OnCommit | None) -> None:
        if not self.leader:
            if on_commit is not None:
                on_commit(NotLeaderError(None))
            return
        self.proposed.append((consumer, op, on_commit))

    def commit(self) -> int:
        batch, self.proposed = self.proposed, []
        for name, op, on_commit in batch:
            self.entries.append((name, op))
            for apply in self.members:
                apply(name, op)
            if on_commit is not None:
                on_commit(None)
        return len(batch)

    def lose_leadership(self) -> None:
        batch, self.proposed, self.leader = self.proposed, [], False
        for _, _, on_commit in batch:
            if on_commit is not None:
                on_commit(NotLeaderError("B"))


def _files(root: Path, name: str = "d") -> dict[str, bytes]:
    folder = consumers_dir(root) / name
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.is_dir() else {}


# -- the store: proposals in, the same files on every member -------------------------------


def _members(tmp_path: Path, n: int = 3) -> tuple[OpLog, list[Path], list[ConsumerFiles]]:
    oplog = OpLog()
    roots = [tmp_path / f"m{i}" for i in range(n)]
    files = [ConsumerFiles("S", root, sync_interval_ns=10**8) for root in roots]
    oplog.members = list(files)
    return oplog, roots, files


def test_ops_reach_the_files_of_every_member_only_once_committed(tmp_path: Path) -> None:
    oplog, roots, files = _members(tmp_path)
    store = ReplicatedStore("d", oplog)
    store.create(CONFIG, "2026-01-01T00:00:00.1Z", STATE)
    store.record(
        [DELIVERED, 1, 1, 1, 10, DELIVERED, 2, 2, 1, 11, POSITION, 3, 3, 0, 0, 11, 0], dict
    )
    store.save_state({"ignored": True})  # the leader's memory never reaches the files
    assert all(not _files(root) for root in roots)
    assert oplog.commit() == 2
    store.record([ACKED, 1, POSITION, 3, 3, 1, 1, 11, 12], dict)
    store.save_meta({**CONFIG, "description": "x"}, "2026-01-01T00:00:00.1Z")
    oplog.commit()
    states = [load_all(root) for root in roots]
    assert states[0] == states[1] == states[2]
    (saved,) = states[0]
    assert saved.config["description"] == "x"
    assert saved.state is not None
    assert (saved.state["adflr"], saved.state["asflr"], saved.state["dseq"]) == (1, 1, 3)
    assert saved.state["pending"] == [[2, 2, 11]]
    store.delete()
    oplog.commit()
    assert all(not (consumers_dir(root) / "d").exists() for root in roots)
    for f in files:
        f.close()


def test_a_member_counts_the_listed_consumers_its_files_hold(tmp_path: Path) -> None:
    """What a follower reports as the stream's consumer_count: creates and deletes as they
    commit, a sourcing stream's unlisted reader left out, and the same count from the
    files alone after a restart."""
    oplog, roots, files = _members(tmp_path, 2)
    assert [f.listed() for f in files] == [0, 0]
    ReplicatedStore("a", oplog).create(CONFIG, "2026-01-01T00:00:01Z", STATE)
    ReplicatedStore("src", oplog).create({**CONFIG, "direct": True}, "2026-01-01T00:00:02Z", STATE)
    gone = ReplicatedStore("b", oplog)
    gone.create(CONFIG, "2026-01-01T00:00:03Z", STATE)
    assert [f.listed() for f in files] == [0, 0]  # proposed, not committed
    oplog.commit()
    assert [f.listed() for f in files] == [2, 2]
    gone.delete()
    oplog.commit()
    assert [f.listed() for f in files] == [1, 1]
    for f in files:
        f.close()
    assert ConsumerFiles("S", roots[0], sync_interval_ns=10**8).listed() == 1


def test_re_applying_the_whole_log_over_the_files_changes_no_state(tmp_path: Path) -> None:
    """A restart replays the stream's log from its start over files that hold its end:
    a delete and a re-create under the same name, an update, records that trail a delete."""
    oplog, roots, files = _members(tmp_path, 1)
    first = ReplicatedStore("d", oplog)
    first.create(CONFIG, "2026-01-01T00:00:01Z", STATE)
    first.record([DELIVERED, 1, 1, 1, 10, POSITION, 2, 2, 0, 0, 10, 0], dict)
    first.delete()
    first.record([ACKED, 1, POSITION, 2, 2, 1, 1, 10, 11], dict)  # the runner's last turn
    second = ReplicatedStore("d", oplog)
    second.create({**CONFIG, "ack_wait": 5}, "2026-01-01T00:00:02Z", {**STATE, "sseq": 5})
    second.record([DELIVERED, 5, 1, 1, 20, POSITION, 2, 6, 0, 4, 20, 0], dict)
    second.save_meta({**CONFIG, "ack_wait": 9}, "2026-01-01T00:00:02Z")
    second.record([DELIVERED, 5, 2, 2, 30, POSITION, 3, 6, 0, 4, 30, 0], dict)
    oplog.commit()
    before = load_all(roots[0])
    assert before[0].state is not None and before[0].state["redelivered"] == [[5, 2]]
    files[0].close()
    again = ConsumerFiles("S", roots[0], sync_interval_ns=10**8)
    for name, op in oplog.entries:
        again(name, op)
    assert load_all(roots[0]) == before
    recreate = oplog.entries[4]  # the second create, alone again: its files stay as they are
    again(*recreate)
    assert load_all(roots[0]) == before
    fresh = tmp_path / "fresh"  # and a member that starts from nothing agrees
    replayed = ConsumerFiles("S", fresh, sync_interval_ns=10**8)
    for name, op in oplog.entries:
        replayed(name, op)
    assert load_all(fresh) == before
    again.close()
    replayed.close()


def test_a_long_log_compacts_into_the_snapshot_on_every_member(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cstore, "COMPACT_BYTES", 200)
    oplog, roots, files = _members(tmp_path, 2)
    store = ReplicatedStore("d", oplog)
    store.create(CONFIG, "2026-01-01T00:00:00Z", STATE)
    for seq in range(1, 40):
        store.record([DELIVERED, seq, seq, 1, seq, POSITION, seq + 1, seq + 1, 0, 0, seq, 0], dict)
        if seq % 3 == 0:
            store.record([ACKED, seq, POSITION, seq + 1, seq + 1, 0, 0, seq, seq], dict)
        oplog.commit()
    for f in files:
        f.close()  # waits for the compaction under way on the worker thread
    for root in roots:
        folder = consumers_dir(root) / "d"
        assert not (folder / ASIDE_FILE).exists()  # folded into the snapshot
        snapshot = read_state(folder / STATE_FILE)
        # The snapshot, not only the log, moved on (how far depends on the worker's pace:
        # the log keeps growing while a compaction is under way).
        assert snapshot["dseq"] > 1
        (saved,) = load_all(root)
        assert saved.state is not None
        assert [s for s, _, _ in saved.state["pending"]] == [s for s in range(1, 40) if s % 3]


def test_confirm_waits_for_the_commit_and_hears_a_lost_leadership(tmp_path: Path) -> None:
    oplog, _, files = _members(tmp_path, 1)
    store = ReplicatedStore("d", oplog)
    heard: list[BaseException | None] = []
    store.confirm(heard.append)
    assert heard == [None]  # nothing in flight
    store.create(CONFIG, "2026-01-01T00:00:00Z", STATE)
    store.record([DELIVERED, 1, 1, 1, 10, POSITION, 2, 2, 0, 0, 10, 0], dict)
    store.confirm(heard.append)
    assert heard == [None]
    oplog.commit()
    assert heard == [None, None]
    store.record([ACKED, 1, POSITION, 2, 2, 1, 1, 10, 11], dict)
    store.confirm(heard.append)
    oplog.lose_leadership()
    assert isinstance(heard[-1], NotLeaderError)
    store.confirm(heard.append)  # settled by the failure: not left waiting forever
    assert len(heard) == 4 and isinstance(heard[-1], NotLeaderError)
    files[0].close()


def test_bad_entries_raise_a_typed_error_naming_stream_and_consumer(tmp_path: Path) -> None:
    files = ConsumerFiles("S", tmp_path, sync_interval_ns=None)
    with pytest.raises(ConsumerOpError, match="stream S consumer 'd'"):
        files("d", b"\x04garbage")
    with pytest.raises(ConsumerOpError, match="not a consumer name"):
        files("../x", encode_records([ACKED, 1]))
    files("d", encode_records([ACKED, 1]))  # records for a consumer never created: dropped
    assert not (consumers_dir(tmp_path) / "d" / META_FILE).exists()
    assert not (consumers_dir(tmp_path) / "d").exists()


# -- the consumers: leader A fails over to B --------------------------------------------------


class ReplicatedStream(Stream):
    """A real stream whose consumer ops go to the test's `OpLog` instead of its group."""

    oplog: OpLog

    def propose_consumer_op(self, consumer: str, op: bytes, on_commit: OnCommit | None) -> None:
        self.oplog.propose_consumer_op(consumer, op, on_commit)


class Bus(FakeMessaging):
    """The engine tests' port, keeping also the reply subjects of what reached no one."""

    def __init__(self) -> None:
        super().__init__()
        self.replies: dict[str, list[str]] = {}

    def has_interest(self, subject: str) -> bool:
        """The test reads `inbox` as a client listening on its `_INBOX.` subjects would:
        consumers deliver only to reply subjects someone listens on."""
        return subject.startswith("_INBOX.") or super().has_interest(subject)

    def publish(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if reply and not super().has_interest(subject):
            self.replies.setdefault(subject, []).append(reply)
        super().publish(subject, reply, hdr, data)


@dataclass
class Member:
    js: JetStream
    m: Bus
    stream: Stream
    files: ConsumerFiles


@pytest.fixture
async def members(tmp_path: Path) -> AsyncIterator[tuple[OpLog, Member, Member]]:
    oplog = OpLog()
    out: list[Member] = []
    for name in ("A", "B"):
        m = Bus()
        js = JetStream(engine_config(str(tmp_path / name)), m, server_id=name, server_name=name)
        cfg = from_request({"name": "S", "subjects": ["S.>"], "num_replicas": 3})
        stream = ReplicatedStream(
            cfg, MemoryStore(name="S"), created_ns=0, read_headers=lambda _: {}
        )
        stream.oplog = oplog
        folder = js.stream_folder("S")
        files = ConsumerFiles("S", folder, sync_interval_ns=10**8)
        oplog.members.append(files)
        js.streams["S"] = stream
        js.consumers.attach(stream, folder)
        for i in range(1, 11):
            stream.publish(f"S.{i}", None, b"m%d" % i, {}, None)
        await stream.flush()
        out.append(Member(js, m, stream, files))
    a, b = out
    yield oplog, a, b
    for member in out:
        member.js.consumers.detach(member.stream, reason="")
        member.files.close()
        await member.stream.close()


def _info(member: Member) -> dict[str, Any]:
    info = member.js.consumers.info(["CONSUMER", "INFO", "S", "d"], b"")
    return {k: info[k] for k in ("delivered", "ack_floor", "num_ack_pending", "num_pending")}


def _seq(reply: str) -> int:
    return int(reply.split(".")[5])


async def test_a_new_leader_resumes_from_what_committed(
    members: tuple[OpLog, Member, Member],
) -> None:
    oplog, a, b = members
    a.js.consumers.lead(a.stream)
    b.js.consumers.follow(b.stream)
    config = {"durable_name": "d", "ack_policy": "explicit", "ack_wait": 1_000_000_000}
    created = a.js.consumers.create(
        ["CONSUMER", "DURABLE", "CREATE", "S", "d"],
        json.dumps({"stream_name": "S", "config": config}).encode(),
    )
    assert asyncio.iscoroutine(created)  # answered once the create commits
    task = asyncio.ensure_future(created)
    await asyncio.sleep(0)
    assert not task.done() and not (b.js.stream_folder("S") / "obs" / "d").exists()
    oplog.commit()
    assert (await task)["name"] == "d"
    assert (b.js.stream_folder("S") / "obs" / "d" / META_FILE).is_file()

    # A delivers all ten; acks 1-4 and 7 plainly, 5 with a confirmation.
    delivered_at = time.monotonic()
    a.m.publish("$JS.API.CONSUMER.MSG.NEXT.S.d", "_INBOX.pull", None, b'{"batch":10}')
    await poll_async(
        lambda: len(a.m.inbox.get("_INBOX.pull", [])) == 10, "10 messages pulled", 5, interval=FAST
    )
    replies = {_seq(r): r for r in a.m.replies["_INBOX.pull"]}
    assert sorted(replies) == list(range(1, 11))
    for seq in (1, 2, 3, 4, 7):
        a.m.publish(replies[seq], None, None, b"+ACK")
    a.m.publish(replies[5], "_INBOX.ack5", None, b"+ACK")
    assert oplog.proposed and "_INBOX.ack5" not in a.m.inbox  # not before its turn commits
    oplog.commit()
    assert a.m.inbox["_INBOX.ack5"] == [(None, b"")]
    a.m.publish("$JS.API.CONSUMER.MSG.NEXT.S.d", "_INBOX.wait", None, b'{"batch":1}')
    expected = _info(a)
    assert expected["ack_floor"]["stream_seq"] == 5 and expected["num_ack_pending"] == 4

    # A loses the stream's leadership; B takes over from its own files.
    oplog.lose_leadership()
    a.js.consumers.follow(a.stream)
    assert a.m.inbox["_INBOX.wait"] == [(b"NATS/1.0 409 Leadership Change\r\n\r\n", b"")]
    oplog.leader = True
    b.js.consumers.lead(b.stream)
    assert _info(b) == expected
    b.m.publish("$JS.API.CONSUMER.MSG.NEXT.S.d", "_INBOX.b", None, b'{"batch":10}')
    await poll_async(
        lambda: len(b.m.inbox.get("_INBOX.b", [])) == 4, "4 messages pulled on b", 5, interval=FAST
    )
    # Redelivered once A's ack wait ran out, counted from A's deliveries (their
    # timestamps are in the records), not at once: a slow consumer keeps its time.
    assert time.monotonic() - delivered_at >= 1.0
    redelivered = b.m.replies["_INBOX.b"]
    assert sorted(_seq(r) for r in redelivered) == [6, 8, 9, 10]  # never an acked one
    assert {r.split(".")[4] for r in redelivered} == {"2"}  # counted as second deliveries


async def test_updates_and_deletes_answer_after_commit_and_a_lost_create_is_forgotten(
    members: tuple[OpLog, Member, Member],
) -> None:
    oplog, a, b = members
    consumers = a.js.consumers
    consumers.lead(a.stream)
    body = json.dumps({"stream_name": "S", "config": {"durable_name": "d"}}).encode()
    tokens = ["CONSUMER", "DURABLE", "CREATE", "S", "d"]
    created = asyncio.ensure_future(consumers.create(tokens, body))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    oplog.commit()
    await created
    until = "2200-01-01T00:00:00Z"
    paused = consumers.pause(
        ["CONSUMER", "PAUSE", "S", "d"], json.dumps({"pause_until": until}).encode()
    )
    assert asyncio.iscoroutine(paused)
    task = asyncio.ensure_future(paused)
    await asyncio.sleep(0)
    assert not task.done()
    oplog.commit()
    assert (await task)["paused"] is True
    (saved,) = load_all(b.js.stream_folder("S"))
    assert saved.config["pause_until"] == until  # the follower's files have the update
    deleted = consumers.delete(["CONSUMER", "DELETE", "S", "d"], b"")
    assert asyncio.iscoroutine(deleted)
    task = asyncio.ensure_future(deleted)
    await asyncio.sleep(0)
    assert not task.done() and load_all(b.js.stream_folder("S"))
    oplog.commit()
    assert await task == {"success": True}
    assert load_all(b.js.stream_folder("S")) == []

    lost = consumers.create(tokens, body)
    assert asyncio.iscoroutine(lost)
    oplog.lose_leadership()
    with pytest.raises(ApiError) as caught:
        await lost
    assert (caught.value.code, caught.value.err_code) == (503, 10008)
    assert consumers.names(["CONSUMER", "NAMES", "S"], b"")["consumers"] == []
    assert load_all(b.js.stream_folder("S")) == []


# -- the same over three real streams, each a member of one Raft group ------------------------


@pytest.fixture
async def raft_members(tmp_path: Path) -> AsyncIterator[tuple[Cluster, dict[str, Member]]]:
    cluster = Cluster(tmp_path / "raft")
    out: dict[str, Member] = {}
    groups: list[RaftGroup[Any]] = []

    def member(n: str, _: object) -> object:
        def group(apply: Callable[[list[Any]], None], _sync: object) -> RaftGroup[Any]:
            groups.append(
                RaftGroup(
                    apply,
                    lambda a: cluster.make_node(n, a),
                    encode=pickle.dumps,
                    decode=pickle.loads,
                )
            )
            return groups[-1]

        m = Bus()
        js = JetStream(engine_config(str(tmp_path / n)), m, server_id=n, server_name=n)
        cfg = from_request({"name": "S", "subjects": ["S.>"], "num_replicas": 3})
        stream = Stream(
            cfg, MemoryStore(name=n), created_ns=0, read_headers=lambda _: {}, group=group
        )
        folder = js.stream_folder("S")
        files = ConsumerFiles("S", folder, sync_interval_ns=10**8)
        stream.consumer_ops = files
        js.streams["S"] = stream
        js.consumers.attach(stream, folder)
        out[n] = Member(js, m, stream, files)
        return groups[-1]

    await cluster.start(node=member)  # type: ignore[arg-type]
    try:
        yield cluster, out
    finally:
        for mem in out.values():
            mem.js.consumers.detach(mem.stream, reason="")
        for g in groups:
            await g.close()
        for mem in out.values():
            mem.files.close()


async def test_failover_between_raft_members_keeps_every_committed_ack(
    raft_members: tuple[Cluster, dict[str, Member]],
) -> None:
    cluster, members = raft_members
    leader = await cluster.leader()
    a = members[leader.id]
    await _take_lead(a)
    for i in range(1, 11):
        a.stream.publish(f"S.{i}", None, b"m%d" % i, {}, None)
    await a.stream.flush()
    config = {"durable_name": "d", "ack_policy": "explicit", "ack_wait": 1_000_000_000}
    created = a.js.consumers.create(
        ["CONSUMER", "DURABLE", "CREATE", "S", "d"],
        json.dumps({"stream_name": "S", "config": config}).encode(),
    )
    assert asyncio.iscoroutine(created)
    assert (await created)["name"] == "d"

    delivered_at = time.monotonic()
    a.m.publish("$JS.API.CONSUMER.MSG.NEXT.S.d", "_INBOX.pull", None, b'{"batch":10}')
    await poll_async(
        lambda: len(a.m.inbox.get("_INBOX.pull", [])) == 10, "10 messages pulled", 5, interval=FAST
    )
    replies = {_seq(r): r for r in a.m.replies["_INBOX.pull"]}
    for seq in (1, 2, 3, 4, 7):
        a.m.publish(replies[seq], None, None, b"+ACK")
    a.m.publish(replies[5], "_INBOX.ack5", None, b"+ACK")
    assert "_INBOX.ack5" not in a.m.inbox
    await poll_async(  # after the quorum committed it
        lambda: "_INBOX.ack5" in a.m.inbox, "the ack of 5 answered", 5, interval=FAST
    )
    expected = _info(a)
    assert expected["ack_floor"]["stream_seq"] == 5 and expected["num_ack_pending"] == 4
    a.m.publish("$JS.API.CONSUMER.MSG.NEXT.S.d", "_INBOX.wait", None, b'{"batch":1}')

    def acked_everywhere() -> bool:
        states = [load_all(m.js.stream_folder("S")) for m in members.values()]
        return all(s and s[0].state and s[0].state["asflr"] == 5 for s in states)

    await poll_async(acked_everywhere, "the ack floor at 5 on every member", 5, interval=FAST)
    b_id = next(n for n in members if n != leader.id)
    b = members[b_id]
    leader.transfer_leadership(b_id)
    await poll_async(lambda: cluster.nodes[b_id].role is Role.LEADER, "b leading", 5, interval=FAST)
    a.stream.set_leader(False)
    a.js.consumers.follow(a.stream)
    assert a.m.inbox["_INBOX.wait"] == [(b"NATS/1.0 409 Leadership Change\r\n\r\n", b"")]
    await _take_lead(b)
    assert _info(b) == expected

    b.m.publish("$JS.API.CONSUMER.MSG.NEXT.S.d", "_INBOX.b", None, b'{"batch":10}')
    await poll_async(
        lambda: len(b.m.inbox.get("_INBOX.b", [])) == 4, "4 messages pulled on b", 5, interval=FAST
    )
    assert time.monotonic() - delivered_at >= 1.0
    redelivered = {_seq(r): r for r in b.m.replies["_INBOX.b"]}
    assert sorted(redelivered) == [6, 8, 9, 10]
    # B's own acks travel the same way: confirmed after commit, on A's files too.
    b.m.publish(redelivered[6], "_INBOX.ack6", None, b"+ACK")
    await poll_async(lambda: "_INBOX.ack6" in b.m.inbox, "the ack of 6 answered", 5, interval=FAST)
    c = b.js.consumers._consumer("S", "d").consumer

    def a_agrees() -> bool:
        (saved,) = load_all(a.js.stream_folder("S"))
        assert saved.state is not None
        return _same(saved.state, c.snapshot()) and 6 not in c.pending

    await poll_async(a_agrees, "a's saved state agreeing with the leader's", 5, interval=FAST)


async def _take_lead(member: Member) -> None:
    """As the server will: the stream catches up with its log, then its consumers start."""
    member.stream.set_leader(True)
    await poll_async(lambda: member.stream.accepting, "the stream accepting", 5, interval=FAST)
    member.js.consumers.lead(member.stream)


def _same(files: dict[str, Any], memory: dict[str, Any]) -> bool:
    """The files' state is the consumer's (lists compared as sets of entries)."""
    return all(
        sorted(map(tuple, files[k])) == sorted(map(tuple, v))
        if k in ("pending", "redelivered")
        else files[k] == v
        for k, v in memory.items()
    )
