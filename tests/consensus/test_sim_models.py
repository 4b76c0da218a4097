"""The simulator's network and disk models do what the fault model says.

The simulator's verdicts are only as good as these models: a disk model that
silently kept unsynced data across a power loss would hide every durability bug.
"""

from __future__ import annotations

import random

from consensus.sim.app import StateMachine, make_value, value_ok
from consensus.sim.disk import SimDisk
from consensus.sim.network import NetworkConfig, SimNetwork
from consensus.types import (
    ConfState,
    Entry,
    HardState,
    Message,
    MessageType,
    Snapshot,
    SnapshotMeta,
)


def entries(lo: int, hi: int, term: int = 1) -> list[Entry]:
    return [Entry(term, i, data=make_value(0, i)) for i in range(lo, hi + 1)]


def test_kill9_keeps_unsynced_writes() -> None:
    disk = SimDisk("n0", sync_window=5)
    disk.append(entries(1, 3))
    disk.sync()
    disk.append(entries(4, 6))
    disk.write_hard_state(HardState(2, "n1", 5))
    restored, snap = disk.recover()  # a restart after kill -9: no disk fault at all
    assert [e.index for e in restored.entries] == [1, 2, 3, 4, 5, 6]
    assert restored.hard_state == HardState(2, "n1", 5)
    assert restored.vote_floor == 0 and snap is None


def test_power_loss_keeps_the_synced_prefix_and_drops_the_unsynced_hard_state() -> None:
    kept: set[int] = set()
    for seed in range(40):
        disk = SimDisk("n0", sync_window=5)
        disk.append(entries(1, 3))
        disk.write_hard_state(HardState(1, "n0", 3))
        disk.sync()
        disk.append(entries(4, 8))
        disk.write_hard_state(HardState(2, "n1", 7))
        disk.power_loss(random.Random(seed), torn=False)
        restored, _ = disk.recover()
        assert restored.hard_state == HardState(1, "n0", 3)
        assert restored.vote_floor == 0
        kept.add(len(restored.entries))
    assert min(kept) == 3 and max(kept) == 8  # none, some or all of the unsynced part


def test_a_torn_write_cuts_the_log_and_sets_the_floor_to_what_was_written() -> None:
    for seed in range(40):
        disk = SimDisk("n0", sync_window=5)
        disk.append(entries(1, 3))
        disk.sync()
        disk.append(entries(4, 8))
        disk.power_loss(random.Random(seed), torn=True)
        restored, _ = disk.recover()
        if restored.vote_floor:
            assert restored.vote_floor == len(restored.entries) + 1
        assert len(restored.entries) >= 3


def test_a_bit_flip_cuts_at_the_damaged_entry() -> None:
    disk = SimDisk("n0", sync_window=0)
    disk.append(entries(1, 9))
    disk.sync()
    rng = random.Random(3)
    index = None
    while index is None:
        index = disk.flip(rng)
    restored, _ = disk.recover()
    assert [e.index for e in restored.entries] == list(range(1, index))
    assert restored.vote_floor == 9
    again, _ = disk.recover()  # the cut is permanent, the floor was handed out once
    assert len(again.entries) == index - 1


def test_a_flipped_hard_state_copy_falls_back_to_the_other() -> None:
    disk = SimDisk("n0", sync_window=0)
    disk.write_hard_state(HardState(4, "n2", 0))
    disk.sync()
    rng = random.Random(0)
    while disk.flip(rng) is not None:  # no entries: only hard-state copies can flip
        pass
    assert disk.recover()[0].hard_state == HardState(4, "n2", 0)


def test_an_entry_rewrites_the_suffix_and_compaction_keeps_the_rest() -> None:
    disk = SimDisk("n0", sync_window=0)
    disk.append(entries(1, 6))
    disk.append(entries(4, 5, term=2))
    assert disk.last_index == 5 and disk.term_at(4) == 2 and disk.term_at(3) == 1
    snap = Snapshot(SnapshotMeta(3, 1, ConfState(frozenset({"n0"}))), b"s")
    disk.compact(snap)
    restored, got = disk.recover()
    assert got == snap and [e.index for e in restored.entries] == [4, 5]
    disk.install(Snapshot(SnapshotMeta(9, 3, ConfState(frozenset({"n0"}))), b"t"))
    restored, got = disk.recover()
    assert restored.entries == () and got is not None and got.meta.index == 9


def test_state_machine_snapshot_round_trip_and_value_checksums() -> None:
    sm = StateMachine()
    for e in entries(1, 4):
        sm.apply(e)
    again = StateMachine.restore(Snapshot(SnapshotMeta(4, 1, ConfState(frozenset())), sm.encode()))
    assert again == sm
    value = make_value(1, 2)
    assert value_ok(value) and not value_ok(value[:-1] + b"0" if value[-1:] != b"0" else b"x")


def _msg(src: str, dst: str) -> Message:
    return Message(MessageType.HEARTBEAT, src, dst, 1)


def test_network_partitions_one_way_cuts_and_heals() -> None:
    net = SimNetwork(random.Random(1), NetworkConfig(drop=0, duplicate=0, max_delay=0))
    nodes = {"a", "b", "c"}
    net.partition({"a"}, nodes)
    for src, dst in [("a", "b"), ("b", "a"), ("b", "c")]:
        net.send(_msg(src, dst), 0)
    assert [(m.src, m.dst) for m in net.due(0)] == [("b", "c")]
    net.heal()
    net.cut("a", "b")
    net.send(_msg("a", "b"), 1)
    net.send(_msg("b", "a"), 1)
    assert [(m.src, m.dst) for m in net.due(1)] == [("b", "a")]


def test_network_drops_duplicates_and_reorders_deterministically() -> None:
    def deliveries(seed: int) -> list[int]:
        net = SimNetwork(random.Random(seed), NetworkConfig(drop=0.2, duplicate=0.2, max_delay=3))
        for i in range(200):
            net.send(Message(MessageType.APPEND, "a", "b", 1, index=i), i // 10)
        return [m.index for t in range(30) for m in net.due(t)]

    got = deliveries(7)
    assert got == deliveries(7)
    assert len(set(got)) < 200  # some dropped
    assert len(got) > len(set(got))  # some twice
    assert got != sorted(got)  # some overtaken
