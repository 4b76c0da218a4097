"""The pure helpers: subject matching (and its regex twin), sequence lists, subject index."""

from __future__ import annotations

import re

import hypothesis.strategies as st
import pytest
from hypothesis import given

from log.segments import subject_matches
from log.segments.index import SeqList, SubjectIndex
from log.segments.subjects import filter_regex


@pytest.mark.parametrize(
    ("filt", "subject", "want"),
    [
        (">", "a", True),
        ("a.>", "a", False),
        ("a.>", "a.b.c", True),
        ("a.*", "a.b", True),
        ("a.*", "a.b.c", False),
        ("*.b", "a.b", True),
        ("a.b", "a.b", True),
        ("a.b", "a.bc", False),
        ("a.*.c", "a.x.c", True),
        ("a.*.>", "a.x", False),
        ("a.b.>", "a.c.d", False),
    ],
)
def test_subject_matches(filt: str, subject: str, want: bool) -> None:
    assert subject_matches(filt, subject) is want
    assert bool(re.fullmatch(filter_regex(filt), subject)) is want


tokens = st.lists(st.sampled_from(["a", "b", "c.d"]), min_size=1, max_size=4).map(".".join)
filters = st.lists(st.sampled_from(["a", "b", "*", "$x"]), min_size=1, max_size=4).map(
    ".".join
) | st.builds(lambda f: f + ".>", tokens)


@given(filters, tokens)
def test_regex_agrees_with_matcher(filt: str, subject: str) -> None:
    assert bool(re.search(filter_regex(filt), subject)) == subject_matches(filt, subject)


@given(st.sets(st.integers(1, 60)), st.integers(0, 61), st.integers(0, 30))
def test_seq_list_skips_runs(members: set[int], probe: int, trim: int) -> None:
    seqs = SeqList()
    seqs.add_sorted(sorted(members))
    seqs.remove_below(trim)
    members = {m for m in members if m >= trim}
    assert len(seqs) == len(members) and list(seqs) == sorted(members)
    nxt = probe
    while nxt in members:
        nxt += 1
    assert seqs.next_absent(probe) == nxt
    prev = probe
    while prev in members:
        prev -= 1
    assert seqs.prev_absent(probe) == prev
    assert (probe in seqs) == (probe in members)


index_ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove", "drop_below", "trim"]),
        st.sampled_from(["a", "b", "c.d"]),
        st.integers(1, 30),
    ),
    max_size=40,
)


@given(index_ops)
def test_subject_index_agrees_with_a_dict_of_lists(ops: list[tuple[str, str, int]]) -> None:
    """One-message subjects are stored compactly; reads and changes must not tell."""
    index, model = SubjectIndex(), {}
    seq = 1
    for op, subject, n in ops:
        live = model.setdefault(subject, [])
        if op == "add":
            index.add([subject] * (n % 3 + 1), seq)
            live += range(seq, seq + n % 3 + 1)
            seq += n % 3 + 1
        elif op == "remove":
            assert index.remove(subject, n) is (n in live)
            live[:] = [s for s in live if s != n]
        elif op == "drop_below":
            assert index.drop_below(subject, n) == sum(s < n for s in live)
            live[:] = [s for s in live if s >= n]
        else:
            keep = n % 3 + 1
            assert list(index.trim(subject, keep)) == live[: max(0, len(live) - keep)]
            live[:] = live[-keep:]
        expected = {k: v for k, v in model.items() if v}
        assert len(index) == len(expected)
        assert sorted(index.matching(">")) == sorted(expected)
        assert index.matching("c.*") == (["c.d"] if "c.d" in expected else [])
        for name in ("a", "b", "c.d"):
            got = index.get(name)
            assert (list(got) if got is not None else []) == expected.get(name, [])
