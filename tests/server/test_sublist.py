"""The subject trie: wildcards, queue groups, removal, and the match cache staying correct."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ingest.parser.subjects import subject_matches
from ingest.server.sublist import Sublist


def test_literal_and_wildcards() -> None:
    sl: Sublist[str] = Sublist()
    for name, subject in [("a", "foo.bar"), ("b", "foo.*"), ("c", "foo.>"), ("d", ">"), ("e", "*")]:
        sl.insert(subject, None, name)
    assert sorted(sl.match(b"foo.bar").plain) == ["a", "b", "c", "d"]
    assert sorted(sl.match(b"foo.bar.baz").plain) == ["c", "d"]
    assert sorted(sl.match(b"foo").plain) == ["d", "e"]
    assert sl.match(b"foo..bar").plain == []


def test_queue_groups_are_grouped() -> None:
    sl: Sublist[str] = Sublist()
    sl.insert("q.*", "workers", "w1")
    sl.insert("q.x", "workers", "w2")
    sl.insert("q.x", "others", "o1")
    groups = sorted(sorted(g) for g in sl.match(b"q.x").queues)
    assert groups == [["o1"], ["w1", "w2"]]


def test_remove_invalidates_cache_and_prunes() -> None:
    sl: Sublist[str] = Sublist()
    sl.insert("a.b", None, "x")
    assert sl.match(b"a.b").plain == ["x"]
    assert sl.remove("a.b", None, "x")
    assert sl.match(b"a.b").plain == []
    assert not sl.remove("a.b", None, "x")
    assert sl.count == 0 and sl.subjects() == []


TOKENS = st.sampled_from(["a", "b", "c"])
PATTERN_TOKENS = st.sampled_from(["a", "b", "c", "*"])


@st.composite
def patterns(draw: st.DrawFn) -> str:
    toks = draw(st.lists(PATTERN_TOKENS, min_size=1, max_size=3))
    if draw(st.booleans()):
        toks.append(">")
    return ".".join(toks)


@given(
    st.lists(patterns(), max_size=8),
    st.lists(st.lists(TOKENS, min_size=1, max_size=4).map(".".join), max_size=8),
)
def test_trie_agrees_with_the_reference_predicate(subs: list[str], subjects: list[str]) -> None:
    sl: Sublist[int] = Sublist()
    for i, pattern in enumerate(subs):
        sl.insert(pattern, None, i)
    for subject in subjects:
        expected = sorted(i for i, p in enumerate(subs) if subject_matches(p, subject))
        assert sorted(sl.match(subject.encode()).plain) == expected
