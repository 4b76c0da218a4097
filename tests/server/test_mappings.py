"""Weighted subject mappings without a server: selection by a pinned roll."""

from __future__ import annotations

import pytest

from ingest.server.mappings import SubjectMapper, SubjectMapping, WeightedDest


def mapper(src: str, *dests: tuple[str, int], roll: int = 0) -> SubjectMapper:
    mapping = SubjectMapping.build(src, [WeightedDest(s, w) for s, w in dests])
    return SubjectMapper((mapping,), roll=lambda _: roll)


def test_weights_pick_by_roll_lightest_first() -> None:
    dests = (("a.heavy", 70), ("a.light", 30))
    assert mapper("a", *dests, roll=0).map("a") == "a.light"
    assert mapper("a", *dests, roll=29).map("a") == "a.light"
    assert mapper("a", *dests, roll=30).map("a") == "a.heavy"
    assert mapper("a", *dests, roll=99).map("a") == "a.heavy"


def test_remainder_stays_on_the_source_unless_listed_then_is_dropped() -> None:
    assert mapper("w.*", ("v.$1", 40), roll=39).map("w.x") == "v.x"
    assert mapper("w.*", ("v.$1", 40), roll=40).map("w.x") == "w.x"
    assert mapper("s", ("s", 40), roll=50).map("s") == ""  # listed itself: loss wanted
    assert mapper("s", ("t", 100)).map("other") is None


def test_first_mapping_in_order_wins() -> None:
    first = SubjectMapping.build("a.*", [WeightedDest("one.$1", 100)])
    second = SubjectMapping.build("a.b", [WeightedDest("two", 100)])
    assert SubjectMapper((first, second)).map("a.b") == "one.b"
    assert SubjectMapper((second, first)).map("a.b") == "two"
    assert SubjectMapper((first,)).map_bytes(b"a.\xff") == b"one.\xff"  # bytes kept as sent


@pytest.mark.parametrize(
    ("dests", "message"),
    [
        ([("x", 101)], "individual weights need to be <= 100"),
        ([("x", 60), ("y", 50)], "total weight needs to be <= 100"),
        ([("x", 10), ("x", 10)], 'duplicate entry for "x"'),
    ],
)
def test_refusals(dests: list[tuple[str, int]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SubjectMapping.build("a", [WeightedDest(s, w) for s, w in dests])
