"""The subject trie: wildcards, queue groups, removal, and the match cache staying correct."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

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


def test_stats_count_inserts_removes_matches_and_fanout() -> None:
    sl: Sublist[str] = Sublist()
    assert sl.fanout() == (0, 0.0)
    for sub, subject, queue in (("a", "x.y", None), ("b", "x.*", None), ("c", "x.y", "q")):
        sl.insert(subject, queue, sub)
    sl.insert("z", None, "d")
    assert sl.remove("z", None, "d")
    assert not sl.remove("z", None, "d")  # a failed removal is not counted
    sl.match(b"x.y")
    sl.match(b"x.y")
    sl.match(b"x.z")
    assert (sl.inserts, sl.removes, sl.matches, sl.cache_hits) == (4, 1, 3, 1)
    assert sl.fanout() == (3, 2.0)  # x.y: two plain + one queue group; x.z: one


def test_tail_entry_respects_literal_children() -> None:
    """`_INBOX.x.*` answers every unique reply token; a literal child still counts."""
    sl: Sublist[str] = Sublist()
    sl.insert("_INBOX.x.*", None, "mux")
    sl.insert("_INBOX.x.special", None, "lit")
    assert sl.match(b"_INBOX.x.1").plain == ["mux"]
    assert sl.match(b"_INBOX.x.2").plain == ["mux"]  # served by the tail entry
    assert sorted(sl.match(b"_INBOX.x.special").plain) == ["lit", "mux"]
    assert sl.match(b"_INBOX.x.2.deeper").plain == []


def test_dead_end_entry_respects_literal_children() -> None:
    """`$JS.ACK.S.C.>` answers every ack subject; a literal sibling path still counts."""
    sl: Sublist[str] = Sublist()
    sl.insert("$JS.ACK.S.C.>", None, "acks")
    sl.insert("$JS.ACK.S.C.9.x", None, "deep")
    assert sl.match(b"$JS.ACK.S.C.1.5.5.0.0").plain == ["acks"]
    assert sl.match(b"$JS.ACK.S.C.1.6.6.0.0").plain == ["acks"]  # served by the dead end
    assert sorted(sl.match(b"$JS.ACK.S.C.9.x").plain) == ["acks", "deep"]
    assert sl.match(b"$JS.ACK.S.C.1..5").plain == []
    assert sl.match(b"$JS.ACK.S.C.1.").plain == []
    sl.insert("$JS.ACK.S.C.1.>", None, "new")
    assert sorted(sl.match(b"$JS.ACK.S.C.1.7.7.0.0").plain) == ["acks", "new"]


def test_dead_ends_of_many_prefix_lengths() -> None:
    """Past a few distinct prefix lengths the lookup walks the dots; the answers agree."""
    sl: Sublist[str] = Sublist()
    names = ["c" * n for n in range(1, 13)]
    for name in names:
        sl.insert(f"$JS.ACK.S.{name}.>", None, name)
    for name in names:  # fills one dead end per name
        assert sl.match(f"$JS.ACK.S.{name}.1.2.3.0.0".encode()).plain == [name]
    hits = sl.cache_hits
    for name in names:  # fresh subjects: only the dead ends can answer
        assert sl.match(f"$JS.ACK.S.{name}.1.9.9.0.0".encode()).plain == [name]
        assert sl.match(f"$JS.ACK.S.{name}.1..9".encode()).plain == []
        assert sl.match(f"$JS.ACK.S.{name}.1.9.".encode()).plain == []
    assert sl.cache_hits == hits + len(names)
    assert sl.match(b".$JS.ACK.S.c.1").plain == []


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


def _below(prefix: str) -> list[str]:
    """Every subject of one to four more tokens below `prefix`, "d" standing for any
    token no pattern names."""
    tails = [""]
    out = []
    for _ in range(4):
        tails = [f"{t}.{tok}" for t in tails for tok in ("a", "b", "c", "d")]
        out += [prefix + t for t in tails]
    return out


@settings(max_examples=200)
@given(
    st.lists(patterns(), max_size=6),
    st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3).map(".".join),
    st.integers(0, 6),
)
def test_reaches_under_agrees_with_the_reference_predicate(
    subs: list[str], prefix: str, removed: int
) -> None:
    sl: Sublist[int] = Sublist()
    for i, pattern in enumerate(subs):
        sl.insert(pattern, None, i)
    if removed < len(subs):  # a removal prunes emptied nodes: none may count as interest
        sl.remove(subs[removed], None, removed)
    live = [p for i, p in enumerate(subs) if i != removed]
    expected = any(subject_matches(p, s) for p in live for s in _below(prefix))
    assert sl.reaches_under(prefix.encode()) == expected


class SublistAgainstPredicate(RuleBasedStateMachine):
    """Inserts, removals and matches in any order: the caches never answer stale or wrong.

    Subjects share prefixes on purpose, so tail and dead-end cache entries are
    made, hit, and invalidated by later inserts of literal children.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sl: Sublist[int] = Sublist()
        self.subs: dict[int, str] = {}
        self.next_id = 0

    @rule(pattern=patterns())
    def insert(self, pattern: str) -> None:
        self.sl.insert(pattern, None, self.next_id)
        self.subs[self.next_id] = pattern
        self.next_id += 1

    @precondition(lambda self: bool(self.subs))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        sid = data.draw(st.sampled_from(sorted(self.subs)))
        assert self.sl.remove(self.subs.pop(sid), None, sid)

    @rule(subject=st.lists(TOKENS | st.sampled_from(["x1", "x2", "x3"]), min_size=1, max_size=5))
    def match(self, subject: list[str]) -> None:
        text = ".".join(subject)
        expected = sorted(i for i, p in self.subs.items() if subject_matches(p, text))
        assert sorted(self.sl.match(text.encode()).plain) == expected


TestSublistAgainstPredicate = SublistAgainstPredicate.TestCase
TestSublistAgainstPredicate.settings = settings(max_examples=300, stateful_step_count=40)
