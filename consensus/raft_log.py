"""The core's in-memory view of the Raft log: a snapshot point plus the entries after it.

Entries live in one list addressed by offset from the snapshot index, so a term
lookup is O(1) and appending or truncating a suffix never copies the prefix; only
compaction (rare, after a snapshot) shifts the list. Terms never decrease along a
log, which lets the conflict back-off find the boundaries of a term by bisection
instead of walking a long suffix entry by entry.

The log also remembers which suffix the caller has not yet been handed for
persistence (`unstable_from`), because a conflict can rewrite entries the caller
already stored: the next `Ready` must then restart from the first rewritten index.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence

from consensus.types import Entry, RaftError


def _term_of(entry: Entry) -> int:
    return entry.term


class RaftLog:
    __slots__ = ("_entries", "snap_index", "snap_term", "unstable_from")

    def __init__(self, snap_index: int, snap_term: int, entries: Sequence[Entry]) -> None:
        for offset, entry in enumerate(entries):
            if entry.index != snap_index + 1 + offset:
                raise RaftError(
                    f"restored log is not contiguous after snapshot index {snap_index}: "
                    f"entry {offset} has index {entry.index}"
                )
        self.snap_index = snap_index
        self.snap_term = snap_term
        self._entries: list[Entry] = list(entries)
        self.unstable_from = self.last_index + 1  # what was restored is already durable

    @property
    def last_index(self) -> int:
        return self.snap_index + len(self._entries)

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self.snap_term

    def term_at(self, index: int) -> int | None:
        """None when the index is compacted away or beyond the end."""
        if index == self.snap_index:
            return self.snap_term
        if self.snap_index < index <= self.last_index:
            return self._entries[index - self.snap_index - 1].term
        return None

    def entry(self, index: int) -> Entry:
        return self._entries[index - self.snap_index - 1]

    def slice(self, lo: int, hi: int) -> list[Entry]:
        """Entries with lo <= index < hi (both clamped to what the log holds)."""
        start = max(lo - self.snap_index - 1, 0)
        stop = max(hi - self.snap_index - 1, 0)
        return self._entries[start:stop]

    def slice_capped(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        """`slice`, cut after the entry that reaches max_bytes of data (one at least): an
        APPEND has to fit the transport's largest message."""
        entries = self.slice(lo, hi)
        size = 0
        for k, entry in enumerate(entries):
            size += len(entry.data)
            if size >= max_bytes:
                return entries[: k + 1]
        return entries

    def append(self, entries: Sequence[Entry]) -> None:
        """The leader's own append: entries follow the last index by construction."""
        self._entries.extend(entries)

    def merge(self, entries: Sequence[Entry], commit: int) -> int | None:
        """A follower's append after a matched (index, term): skip what it already holds,
        cut the log at the first conflict and take the rest. Returns the first index
        whose entry changed (last index + 1 if none did).

        None (and no change) if the conflict lies at or below `commit`: a leader
        never rewrites committed entries, so such a message is malformed.
        """
        for pos, entry in enumerate(entries):
            held = self.term_at(entry.index)
            if held == entry.term:
                continue
            if held is not None:
                if entry.index <= commit:
                    return None
                del self._entries[entry.index - self.snap_index - 1 :]
                self.unstable_from = min(self.unstable_from, entry.index)
            self._entries.extend(entries[pos:])
            return entry.index
        return self.last_index + 1

    def first_index_of_term(self, index: int) -> int:
        """The first index holding the same term as `index` (for a follower's back-off
        hint): bisection, since terms are non-decreasing along the log."""
        term = self.term_at(index)
        pos = bisect_left(self._entries, term, hi=index - self.snap_index, key=_term_of)
        return self.snap_index + 1 + pos

    def last_index_of_term(self, term: int, at_most: int) -> int | None:
        """The last index <= at_most holding `term` (for a leader's back-off), or None."""
        hi = max(min(at_most, self.last_index) - self.snap_index, 0)
        pos = bisect_right(self._entries, term, hi=hi, key=_term_of)
        if pos > 0 and self._entries[pos - 1].term == term:
            return self.snap_index + pos
        if term == self.snap_term and self.snap_index <= at_most:
            return self.snap_index
        return None

    def unstable(self) -> list[Entry]:
        return self.slice(self.unstable_from, self.last_index + 1)

    def stable_to(self, index: int, term: int) -> None:
        """The caller persisted up to (index, term); ignored if the log was rewritten since."""
        if self.term_at(index) == term and index >= self.unstable_from:
            self.unstable_from = index + 1

    def compact(self, index: int) -> None:
        """Drop entries <= index (already applied and covered by a snapshot)."""
        term = self.term_at(index)
        if term is None or index <= self.snap_index:
            return
        del self._entries[: index - self.snap_index]
        self.snap_index, self.snap_term = index, term
        self.unstable_from = max(self.unstable_from, index + 1)

    def restore(self, index: int, term: int) -> None:
        """Replace the whole log with a received snapshot point."""
        self._entries.clear()
        self.snap_index, self.snap_term = index, term
        self.unstable_from = index + 1
