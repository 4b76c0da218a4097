"""The pure helpers: subject matching (and its regex twin), sequence lists."""

from __future__ import annotations

import re

import hypothesis.strategies as st
import pytest
from hypothesis import given

from log.segments import subject_matches
from log.segments.index import SeqList
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
