"""The core's calling contract: the ready/advance protocol, errors, restored state."""

from __future__ import annotations

import pytest

from consensus.core import Config, RaftCore
from consensus.types import (
    ConfChange,
    ConfOp,
    ConfState,
    Entry,
    EntryKind,
    HardState,
    NotLeaderError,
    RaftError,
    Restored,
    Role,
    SnapshotMeta,
)
from tests.consensus.scripts.net import Net


def test_ready_must_be_advanced_before_the_next() -> None:
    core = RaftCore(Config("a"), ["a"])
    core.campaign()
    rd = core.ready()
    with pytest.raises(RaftError, match="before advance"):
        core.ready()
    core.propose([b"x"])  # stepping between ready and advance is fine
    with pytest.raises(RaftError, match="did not hand out"):
        core.advance(type(rd)())
    core.advance(rd)
    rd2 = core.ready()
    assert [e.data for e in rd2.entries] == [b"x"] and rd2.committed[-1].data == b"x"
    core.advance(rd2)
    assert not core.has_ready() and core.applied == core.commit == 2


def test_followers_refuse_proposals_and_name_the_leader() -> None:
    net = Net("abc")
    net.elect("a")
    with pytest.raises(NotLeaderError) as err:
        net.nodes["b"].propose([b"x"])
    assert err.value.leader == "a"
    with pytest.raises(NotLeaderError):
        net.nodes["b"].transfer_leadership()


def test_a_node_outside_the_voters_never_campaigns() -> None:
    core = RaftCore(Config("d"), ["a", "b", "c"])
    core.campaign()
    for _ in range(100):
        core.tick()
    assert core.role == Role.FOLLOWER and not core.has_ready()


def test_restored_state_is_rebuilt() -> None:
    change = ConfChange(ConfOp.ADD_LEARNER, "d").encode()
    uncommitted = ConfChange(ConfOp.REMOVE, "b").encode()
    restored = Restored(
        HardState(term=4, vote="b", commit=12),
        SnapshotMeta(10, 3, ConfState(frozenset("abc"))),
        (
            Entry(3, 11),
            Entry(4, 12, EntryKind.CONFIG, change),
            Entry(4, 13, EntryKind.CONFIG, uncommitted),
        ),
    )
    core = RaftCore(Config("a"), ["x", "y"], restored)  # bootstrap voters are ignored
    assert (core.term, core.commit, core.applied, core.last_index) == (4, 12, 10, 13)
    assert core.status()["vote"] == "b" and core.status()["snapshot_index"] == 10
    assert core.conf == ConfState(frozenset("abc"), frozenset("d"))  # 13 is not committed
    rd = core.ready()
    assert [e.index for e in rd.committed] == [11, 12] and rd.entries == []
    assert rd.hard_state is None  # nothing new to persist
    core.advance(rd)
    assert core.applied == 12


def test_restored_commit_beyond_the_log_is_an_error() -> None:
    with pytest.raises(RaftError, match="beyond the log"):
        RaftCore(Config("a"), ["a"], Restored(HardState(1, None, 5), None, (Entry(1, 1),)))


def test_every_change_before_the_last_in_the_log_is_in_force() -> None:
    """The hard state's commit was lost (a crash between writing entries and hard
    state), but a change follows another: the earlier one must have committed."""
    add = ConfChange(ConfOp.ADD_LEARNER, "d").encode()
    promote = ConfChange(ConfOp.PROMOTE, "d").encode()
    entries = (
        Entry(1, 1, EntryKind.NOOP),
        Entry(1, 2, EntryKind.CONFIG, add),
        Entry(1, 3),
        Entry(1, 4, EntryKind.CONFIG, promote),
    )
    core = RaftCore(Config("a"), "abc", Restored(HardState(1, "a", 1), None, entries))
    assert core.conf == ConfState(frozenset("abc"), frozenset("d"))  # 2 in force, 4 pending
    assert core.commit == 1  # what is in force is not what the app is handed as committed
    net = Net("abc")
    net.elect("a")
    net.change("a", ConfChange(ConfOp.ADD_LEARNER, "d"))
    net.deliver()  # b and c take the change
    net.deliver()  # their acks commit it on a
    assert net.nodes["a"].conf.learners == frozenset("d")
    net.drop()  # the APPENDs that would tell them are lost
    assert net.nodes["b"].conf == ConfState(frozenset("abc"))
    net.tick("a")  # the heartbeat carries the commit
    net.deliver()
    assert net.nodes["b"].conf == ConfState(frozenset("abc"), frozenset("d"))
