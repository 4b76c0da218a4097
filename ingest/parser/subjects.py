"""Subject rules of the NATS protocol, shared by the codec, the router and JetStream.

The reference is lenient in what it routes and strict in what it lets a client
subscribe to; these predicates encode exactly that split so every layer agrees.
"""

from __future__ import annotations

_WHITESPACE = frozenset(" \t\r\n")


def _tokens_ok(subject: str, *, wildcards: bool) -> bool:
    if not subject or not _WHITESPACE.isdisjoint(subject):
        return False
    tokens = subject.split(".")
    last = len(tokens) - 1
    for i, tok in enumerate(tokens):
        if not tok:
            return False
        if tok in ("*", ">") and (not wildcards or (tok == ">" and i != last)):
            return False
    return True


def is_valid_subject(subject: str) -> bool:
    """A subscription subject: non-empty tokens, `*` anywhere, `>` only last."""
    return _tokens_ok(subject, wildcards=True)


def is_valid_literal_subject(subject: str) -> bool:
    """A publish subject as pedantic mode wants it: no wildcard tokens."""
    return _tokens_ok(subject, wildcards=False)


def is_literal(subject: str) -> bool:
    """True when the subject has no wildcard token (it names one subject)."""
    tokens = subject.split(".")
    return "*" not in tokens and ">" not in tokens


def subject_matches(pattern: str, subject: str) -> bool:
    """Whether a literal subject falls under a (possibly wildcard) pattern."""
    if pattern == subject or pattern == ">":
        return True
    ptoks = pattern.split(".")
    stoks = subject.split(".")
    for i, p in enumerate(ptoks):
        if p == ">":
            return len(stoks) > i
        if i >= len(stoks) or (p != "*" and p != stoks[i]):
            return False
    return len(ptoks) == len(stoks)


def subjects_overlap(a: str, b: str) -> bool:
    """Whether some literal subject matches both patterns (stream subject overlap)."""
    if a == b:
        return True
    if not _wild(a) and not _wild(b):  # a create checks every stream's: most are literal
        return False
    atoks = a.split(".")
    btoks = b.split(".")
    for x, y in zip(atoks, btoks, strict=False):
        if x == ">" or y == ">":
            return True
        if x != y and x != "*" and y != "*":
            return False
    return len(atoks) == len(btoks)


def _wild(subject: str) -> bool:
    """Whether it may hold a wildcard: a quick look at characters (a token such as `a*`
    is literal, and is then left to the token-wise check)."""
    return "*" in subject or ">" in subject


def is_subset(sub: str, sup: str) -> bool:
    """Whether every subject matching `sub` also matches `sup`."""
    stoks = sub.split(".")
    ptoks = sup.split(".")
    for i, p in enumerate(ptoks):
        if p == ">":
            return len(stoks) > i
        if i >= len(stoks):
            return False
        s = stoks[i]
        if s == ">":
            return False
        if p != "*" and (s == "*" or s != p):
            return False
    return len(ptoks) == len(stoks)
