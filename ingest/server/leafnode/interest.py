"""What one leafnode link announces and lets through: the pure bookkeeping behind LS+/LS-.

A link tells its remote the subjects its account wants, once per subject however
many subscriptions share it, and a queue group's weight (its member count) as it
changes, as the reference's per-link subject map does. A spoke (the side that
dialled, unless it declared the remote its spoke) announces only its own interest,
never what its hub told it, so interest does not bounce back over the link.

Subjects a link must not carry are denied in both directions: the remote's
`deny_imports`/`deny_exports`, and JetStream's unprefixed API (each side answers its
own clients' `$JS.API.>`; another domain is reached through `$JS.<domain>.API.>`).
"""

from __future__ import annotations

from collections.abc import Iterable

from ingest.parser.leafnodes import LOOP_DETECTION_PREFIX, encode_lsub, encode_lunsub
from ingest.parser.subjects import is_literal, is_subset, subject_matches

# The reference's `denyAllClientJs`: a link never carries the plain JetStream API.
JETSTREAM_DENIED = ("$JS.API.>", "$KV.>", "$OBJ.>")


class Advertised:
    """The counts one link announced, per (subject, queue), and the line each change
    needs (None when the remote's view does not change)."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str | None], int] = {}

    def change(self, subject: str, queue: str | None, delta: int) -> bytes | None:
        key = (subject, queue)
        before = self._counts.get(key, 0)
        if delta < 0 and before == 0:
            return None
        after = before + delta
        if after > 0:
            self._counts[key] = after
        else:
            self._counts.pop(key, None)
        if queue is not None:
            return (
                encode_lsub(subject, queue, after) if after > 0 else encode_lunsub(subject, queue)
            )
        if before <= 0 < after:
            return encode_lsub(subject, None, 0)
        if after <= 0 < before:
            return encode_lunsub(subject, None)
        return None

    def snapshot(self) -> bytes:
        return b"".join(
            encode_lsub(subject, queue, count) for (subject, queue), count in self._counts.items()
        )

    def __len__(self) -> int:
        return len(self._counts)


class Denied:
    """Subject patterns a link must not carry one way. A message's subject is checked as
    bytes, by prefix for `a.b.>` patterns (the common kind): it runs once per message."""

    __slots__ = ("_general", "_literals", "_patterns", "_prefixes")

    def __init__(self, patterns: Iterable[str] = ()) -> None:
        self._patterns: tuple[str, ...] = ()
        self._prefixes: tuple[bytes, ...] = ()
        self._literals: frozenset[bytes] = frozenset()
        self._general: tuple[str, ...] = ()
        self.extend(patterns)

    def extend(self, patterns: Iterable[str]) -> None:
        self._patterns = tuple(dict.fromkeys((*self._patterns, *patterns)))
        prefixes, literals, general = [], [], []
        for pattern in self._patterns:
            head = pattern[:-1]
            if pattern == ">" or (pattern.endswith(".>") and is_literal(head.rstrip("."))):
                prefixes.append(head.encode("utf-8", "surrogateescape"))
            elif is_literal(pattern):
                literals.append(pattern.encode("utf-8", "surrogateescape"))
            else:
                general.append(pattern)
        self._prefixes = tuple(prefixes)
        self._literals = frozenset(literals)
        self._general = tuple(general)

    def __bool__(self) -> bool:
        return bool(self._patterns)

    def message(self, subject: bytes) -> bool:
        """Whether a message on this literal subject is denied."""
        if subject.startswith(self._prefixes) or subject in self._literals:
            return True
        if not self._general:
            return False
        text = subject.decode("utf-8", "surrogateescape")
        return any(subject_matches(pattern, text) for pattern in self._general)

    def interest(self, subject: str) -> bool:
        """Whether interest in `subject` is denied as a whole: every subject it matches is.
        A wildcard only partly denied is announced; its denied messages are held back
        one by one (`message`)."""
        if subject.startswith(LOOP_DETECTION_PREFIX):
            return False  # loop detection must cross whatever the rules say
        if is_literal(subject):
            return self.message(subject.encode("utf-8", "surrogateescape"))
        return any(is_subset(subject, pattern) for pattern in self._patterns)
