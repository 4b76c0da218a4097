"""Stream subject overlap against an oracle: some literal subject matches both patterns."""

from __future__ import annotations

import itertools

from ingest.parser.subjects import subject_matches, subjects_overlap

TOKENS = ("a", "b", "a*", "b>")  # the last two are literal tokens, wildcard characters aside
PATTERNS = [
    ".".join(p)
    for n in (1, 2, 3)
    for p in itertools.product((*TOKENS, "*", ">"), repeat=n)
    if ">" not in p[:-1]
]
LITERALS = [".".join(p) for n in (1, 2, 3, 4) for p in itertools.product((*TOKENS, "z"), repeat=n)]


def test_overlap_is_a_shared_literal_subject() -> None:
    matching = {p: {s for s in LITERALS if subject_matches(p, s)} for p in PATTERNS}
    for a, b in itertools.product(PATTERNS, repeat=2):
        assert subjects_overlap(a, b) == bool(matching[a] & matching[b]), (a, b)
