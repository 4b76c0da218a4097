"""The nemesis's schedule is pure: a seed replays it, and a short one covers every kind."""

from __future__ import annotations

from tests.jepsen.faults import (
    ALL_KINDS,
    CALM_SECONDS,
    HOLD_SECONDS,
    LEADER_KINDS,
    FaultKind,
    duration,
    schedule,
)


def test_the_same_seed_gives_the_same_schedule() -> None:
    assert schedule(7, ALL_KINDS, nodes=3) == schedule(7, ALL_KINDS, nodes=3)
    assert schedule(7, ALL_KINDS, nodes=3) != schedule(8, ALL_KINDS, nodes=3)


def test_by_default_each_kind_once() -> None:
    for seed in range(20):
        faults = schedule(seed, ALL_KINDS, nodes=3)
        assert sorted(f.kind for f in faults) == sorted(ALL_KINDS)


def test_a_long_schedule_still_covers_every_kind_first() -> None:
    faults = schedule(3, ALL_KINDS, nodes=5, count=40)
    assert len(faults) == 40
    assert {f.kind for f in faults[: len(ALL_KINDS)]} == set(ALL_KINDS)


def test_targets_and_times_stay_in_bounds() -> None:
    faults = schedule(5, ALL_KINDS, nodes=3, count=200)
    for fault in faults:
        if fault.kind in LEADER_KINDS:
            assert fault.node is None  # resolved to the stream leader when the fault starts
        else:
            assert fault.node in (0, 1, 2)
        low, high = HOLD_SECONDS[fault.kind]
        assert low <= fault.hold <= high
        assert CALM_SECONDS[0] <= fault.calm <= CALM_SECONDS[1]
    assert duration(faults) == sum(f.hold + f.calm for f in faults)


def test_a_subset_of_kinds_is_honoured() -> None:
    faults = schedule(1, (FaultKind.PAUSE,), nodes=3, count=5)
    assert {f.kind for f in faults} == {FaultKind.PAUSE}
