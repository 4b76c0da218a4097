"""Interaction scripts: the commit rule, conflict back-off, snapshots, hostile input."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from consensus.core import Config, RaftCore
from consensus.types import (
    ConfState,
    Entry,
    EntryKind,
    Message,
    MessageType,
    Role,
    Snapshot,
    SnapshotMeta,
)
from tests.consensus.scripts.net import Net, of

T = MessageType


def _figure8(net: Net) -> None:
    """Figure 8 of the Raft paper up to (c): a (term 3) holds index 2 of term 1 on a
    majority (a, b, c) while its own no-op (index 3) is only on a and b."""
    net.elect("a")  # term 1, no-op at 1 everywhere
    net.propose("a", b"X")  # index 2, term 1
    net.deliver(of(T.APPEND, src="a", dst="b"))
    net.drop(of(T.APPEND))
    net.deliver()  # b's ack: 2 of 5 hold X, no commit
    assert net.nodes["a"].commit == 1
    net.isolate("a")
    net.nodes["e"].campaign()  # term 2 with c, d (b refuses: its log is longer)
    net.process("e")
    net.deliver(of(T.VOTE))
    net.deliver(of(T.VOTE_RESP))
    assert net.nodes["e"].role == Role.LEADER and net.nodes["e"].last_index == 2
    net.queue.clear()  # e crashes before its no-op leaves
    net.heal()
    net.isolate("e")
    net.restart("a")
    net.nodes["a"].campaign()  # term 2: c and d already voted for e
    net.process("a")
    net.stabilize()
    assert net.nodes["a"].role == Role.CANDIDATE
    net.nodes["a"].campaign()  # term 3: b, c, d grant
    net.process("a")
    net.deliver(of(T.VOTE))
    net.deliver(of(T.VOTE_RESP))
    a = net.nodes["a"]
    assert a.role == Role.LEADER and a.term == 3 and a.last_index == 3
    net.drop()  # a's first APPENDs are lost
    net.tick("a")  # heartbeats; b and c answer, a probes again
    net.deliver(of(T.HEARTBEAT))
    net.deliver(of(T.HEARTBEAT_RESP, src="b"))
    net.deliver(of(T.HEARTBEAT_RESP, src="c"))
    net.drop(lambda m: m.dst == "d" or m.src == "d")
    net.deliver(of(T.APPEND, dst="b"))  # b takes the no-op (3)
    net.deliver(of(T.APPEND_RESP, src="b"))
    net.deliver(of(T.APPEND, dst="c"))  # c: too short, hint 2
    net.deliver(of(T.APPEND_RESP, src="c"))
    net.drop(of(T.APPEND, dst="b"))
    net.deliver(of(T.APPEND, dst="c"))  # c takes X (2) only: one entry per APPEND
    net.deliver(of(T.APPEND_RESP, src="c"))
    assert [e.term for e in net.disks["c"].entries] == [1, 1]
    assert net.status_peers("a") == {"b": 3, "c": 2, "d": 0, "e": 0}


def test_figure8_old_term_entry_is_not_committed_by_counting() -> None:
    net = Net("abcde", pre_vote=False, check_quorum=False, max_append_entries=1)
    _figure8(net)
    a = net.nodes["a"]
    assert a.commit == 1  # X is on a, b, c (a majority) but is of term 1
    # (d): a crashes, e (log ending in term 2) wins with c and d and overwrites X
    net.queue.clear()
    net.isolate("a")
    net.cut.discard(frozenset("ec"))
    net.cut.discard(frozenset("ed"))
    net.cut.discard(frozenset("eb"))
    net.restart("e")  # it crashed as a leader of term 2
    net.nodes["e"].campaign()  # term 3: everyone already voted in term 3
    net.process("e")
    net.stabilize()
    net.nodes["e"].campaign()  # term 4
    net.process("e")
    net.stabilize()
    assert net.leader() == "e"
    for node in "bcde":
        assert net.disks[node].entries[1].term == 2  # X is gone everywhere
        assert b"X" not in net.items(node)


def _figure8_e(net: Net, before_e_campaigns: Callable[[], None] = lambda: None) -> Role:
    """(e): a's no-op reaches c, so X commits under it; then a crashes and e, whose log
    ends in term 2, campaigns with c and d. Returns the role e ends in."""
    _figure8(net)
    net.deliver(of(T.APPEND, dst="c"))
    net.deliver(of(T.APPEND_RESP, src="c"))
    assert net.nodes["a"].commit == 3 and net.items("a") == [b"X"]  # X commits under the no-op
    net.isolate("a")
    net.cut.discard(frozenset("ec"))
    net.cut.discard(frozenset("ed"))
    net.restart("e")
    before_e_campaigns()
    for _ in range(3):
        net.nodes["e"].campaign()
        net.process("e")
        net.stabilize()
    return net.nodes["e"].role


def test_figure8_old_term_entry_commits_under_a_current_term_entry() -> None:
    net = Net("abcde", pre_vote=False, check_quorum=False, max_append_entries=1)
    assert _figure8_e(net) != Role.LEADER  # c's log is ahead of e's: e cannot win


def test_figure8_script_catches_a_broken_election_restriction(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def break_rule() -> None:
        monkeypatch.setattr(RaftCore, "_log_up_to_date", lambda self, term, index: True)

    net = Net("abcde", pre_vote=False, check_quorum=False, max_append_entries=1)
    assert _figure8_e(net, break_rule) == Role.LEADER  # e would then erase the committed X


def _back_off_round_trips() -> tuple[int, int]:
    """A new leader (term 3) whose log is long meets a follower whose 50-entry suffix
    (term 1) conflicts; returns (APPENDs to it before the first accept, rejections)."""
    net = Net("abc")
    net.elect("a")
    net.isolate("a")
    net.propose("a", *[b"stale"] * 50)  # 2..51, term 1, only on a
    leader = net.run_until_leader(among="bc")
    net.propose(leader, *[b"new"] * 50)  # 2..52 of term 2 on b and c
    net.stabilize()
    other = "c" if leader == "b" else "b"
    net.heal()
    net.isolate(leader)
    net.sent.clear()
    new = net.run_until_leader(among=("a", other))
    assert new == other and net.nodes[new].term == 3
    net.tick(new)
    net.stabilize()
    assert net.disks["a"].entries == net.disks[new].entries
    assert net.items("a") == [b"new"] * 50
    to_a = [m for m in net.sent if "a" in (m.src, m.dst)]
    accepted = next(
        i for i, m in enumerate(to_a) if m.type == T.APPEND_RESP and m.src == "a" and not m.reject
    )
    appends = sum(1 for m in to_a[:accepted] if m.type == T.APPEND)
    rejects = sum(1 for m in to_a if m.type == T.APPEND_RESP and m.reject)
    return appends, rejects


def test_fast_back_off_over_a_long_conflicting_suffix() -> None:
    # one refusal for "too short", one for the whole term-1 run, then the match
    assert _back_off_round_trips() == (3, 2)


def test_back_off_without_hints_takes_a_round_trip_per_entry(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(RaftCore, "_next_guess", lambda self, msg: msg.index)
    appends, rejects = _back_off_round_trips()
    assert rejects > 50 and appends == rejects + 1


def test_snapshot_installs_on_a_follower_behind_compaction() -> None:
    net = Net("abc")
    net.elect("a")
    net.propose("a", b"1", b"2")
    net.stabilize()
    net.isolate("c")
    net.propose("a", b"3", b"4")
    net.stabilize()
    a = net.nodes["a"]
    assert a.applied == 5
    a.compact(Snapshot(SnapshotMeta(5, 0, ConfState(frozenset())), net.machines["a"].snapshot()))
    assert a.status()["snapshot_index"] == 5
    net.propose("a", b"5")
    net.stabilize()
    net.heal()
    net.tick("a")
    net.stabilize()
    snaps = [m for m in net.sent if m.type == T.SNAPSHOT]
    assert len(snaps) == 1 and snaps[0].dst == "c"
    meta = snaps[0].snapshot.meta  # type: ignore[union-attr]
    assert (meta.index, meta.term, meta.conf.voters) == (5, 1, frozenset("abc"))
    c = net.nodes["c"]
    assert c.commit == 6 and c.applied == 6 and net.disks["c"].snapshot == meta
    assert net.items("c") == [b"1", b"2", b"3", b"4", b"5"]
    assert [e.index for e in net.disks["c"].entries] == [6]
    # c restarts from its snapshot and log, and can lead with it
    net.restart("c")
    assert net.nodes["c"].commit == 6 and net.items("c") == net.items("a")
    net.propose("a", b"6")
    net.stabilize()
    assert net.items("c") == [b"1", b"2", b"3", b"4", b"5", b"6"]


def test_lost_snapshot_is_sent_again() -> None:
    net = Net("abc", election_ticks=5)
    net.elect("a")
    net.isolate("c")
    net.propose("a", b"1")
    net.stabilize()
    a = net.nodes["a"]
    a.compact(Snapshot(SnapshotMeta(2, 1, ConfState(frozenset())), b"1"))
    net.heal()
    net.tick("a")
    while not any(m.type == T.SNAPSHOT for m in net.queue):
        assert net.deliver(), "the snapshot was never sent"
    assert net.drop(of(T.SNAPSHOT)) == 1
    for _ in range(15):
        net.tick("a")
        net.stabilize()
    assert net.items("c") == [b"1"] and net.nodes["c"].commit == 2


def test_compact_refuses_beyond_applied() -> None:
    net = Net("a")
    net.elect("a")
    core = net.nodes["a"]
    try:
        core.compact(Snapshot(SnapshotMeta(5, 1, ConfState(frozenset("a")))))
    except Exception as err:
        assert "applied" in str(err)
    else:
        raise AssertionError("compacted past applied")


def _garbage(rng: random.Random, ids: list[str]) -> Message:
    def num() -> int:
        return rng.choice([0, 1, 2, 3, 5, 7, 50, 10**9, -1, -100])

    n = rng.randrange(4)
    start = num()
    entries = tuple(
        Entry(
            rng.choice([num(), 1, 2]),
            rng.choice([start + 1 + i, num()]),
            rng.choice(list(EntryKind)),
            rng.choice([b"", b"\x00", b"\x01b", b"\xff\xfe", b"x"]),
        )
        for i in range(n)
    )
    snapshot = rng.choice(
        [
            None,
            Snapshot(SnapshotMeta(num(), num(), ConfState(frozenset(rng.sample(ids, 2))))),
            Snapshot(SnapshotMeta(num(), num(), ConfState(frozenset(["zz"])))),
        ]
    )
    return Message(
        rng.choice(list(MessageType)),
        rng.choice([*ids, "stranger", ""]),
        rng.choice([*ids, "stranger"]),
        num(),
        log_term=num(),
        index=start,
        entries=entries,
        commit=num(),
        reject=rng.random() < 0.5,
        reject_hint=num(),
        context=rng.choice([b"", b"transfer", b"ctx"]),
        snapshot=snapshot,
    )


def test_malformed_stale_and_unknown_messages_never_raise() -> None:
    rng = random.Random(7)
    for round_ in range(30):
        net = Net("abc")
        net.elect("a")
        net.propose("a", b"1")
        if round_ % 3 == 1:
            net.nodes["b"].campaign()
        net.process("b")
        for _ in range(300):
            msg = _garbage(rng, ["a", "b", "c"])
            for node in "abc":
                net.nodes[node].step(
                    Message(
                        msg.type,
                        msg.src,
                        node,
                        msg.term,
                        msg.log_term,
                        msg.index,
                        msg.entries,
                        msg.commit,
                        msg.reject,
                        msg.reject_hint,
                        msg.context,
                        msg.snapshot,
                    )
                )
                net.process(node)
            net.queue.clear()
    odd: list[object] = [None, 3, "x", Message(T.APPEND, "b", "a", "1")]  # type: ignore[arg-type]
    core = RaftCore(Config("a"), "abc")
    for thing in odd:
        core.step(thing)  # type: ignore[arg-type]
    assert not core.has_ready()


def test_figure8_script_catches_a_broken_commit_rule(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The script above is a real check: counting old-term entries commits X at (c)."""
    monkeypatch.setattr(RaftCore, "_commit_term_ok", lambda self, index: True)
    net = Net("abcde", pre_vote=False, check_quorum=False, max_append_entries=1)
    _figure8(net)
    assert net.nodes["a"].commit == 2 and net.items("a") == [b"X"]  # unsafe: (d) erases it


def test_an_append_is_capped_in_bytes_but_always_carries_an_entry() -> None:
    """A transport has a largest message: a follower far behind gets the entries in
    APPENDs of about `max_append_bytes`, and an entry larger than that alone."""
    net = Net("abc", max_append_bytes=100)
    net.elect("a")
    net.isolate("c")
    payloads = [bytes([65 + i]) * 60 for i in range(8)] + [b"z" * 250]
    for data in payloads:
        net.propose("a", data)
    net.stabilize()
    net.heal()
    net.tick("a")
    net.stabilize()
    to_c = [m for m in net.sent if m.type == T.APPEND and m.dst == "c" and m.entries]
    for msg in to_c:
        sizes = [len(e.data) for e in msg.entries]
        assert sum(sizes[:-1]) < 100, sizes  # cut once the bytes reach the cap
    assert max(len(m.entries) for m in to_c) == 2
    assert net.items("c") == payloads


@pytest.mark.parametrize("lazy", [False, True])
def test_followers_learn_a_commit_at_once_or_with_the_next_append_or_heartbeat(
    lazy: bool,
) -> None:
    net = Net("abc", lazy_commit=lazy)
    net.elect("a")
    net.heartbeat()
    sent = len(net.sent)
    net.propose("a", b"1")
    net.stabilize()
    a, b = net.nodes["a"], net.nodes["b"]
    assert a.commit == 2 and net.items("a") == [b"1"]  # the client hears of it either way
    empty = [m for m in net.sent[sent:] if m.type == T.APPEND and not m.entries]
    assert len(empty) == (0 if lazy else 2)
    assert b.commit == (1 if lazy else 2)
    net.propose("a", b"2")
    net.deliver(of(T.APPEND))
    assert b.commit == 2 and net.items("b") == [b"1"]  # carried by the next APPEND
    net.heartbeat()
    assert all(net.items(n) == [b"1", b"2"] for n in "abc")
