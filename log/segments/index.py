"""In-memory indexes shared by every store: sorted sequence lists and the subject index.

Everything is an `array('Q')` rather than a list of ints: 8 bytes a sequence
instead of ~36, and bulk loads from Arrow buffers are a memcpy. Deleting from
the front (limits, max_age) is the common case, so a list keeps a head offset
instead of shifting its tail on every delete.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator

from ingest.parser.subjects import is_literal, subject_matches
from log.segments.subjects import matches_all

_COMPACT_MIN = 1024
_INSORT_MAX = 32  # below this, per-item inserts beat rebuilding the array


class SeqList:
    """A sorted set of sequences, cheap to append at the end and trim at the front."""

    __slots__ = ("_a", "_h")

    def __init__(self, seqs: array | None = None) -> None:
        self._a = seqs if seqs is not None else array("Q")
        self._h = 0

    def __len__(self) -> int:
        return len(self._a) - self._h

    def __iter__(self) -> Iterator[int]:
        return iter(self._a[self._h :])

    def first(self) -> int:
        return self._a[self._h]

    def last(self) -> int:
        return self._a[-1]

    def append(self, seq: int) -> None:
        self._a.append(seq)

    def __contains__(self, seq: int) -> bool:
        i = bisect_left(self._a, seq, self._h)
        return i < len(self._a) and self._a[i] == seq

    def first_ge(self, seq: int) -> int | None:
        i = bisect_left(self._a, seq, self._h)
        return self._a[i] if i < len(self._a) else None

    def since(self, seq: int) -> array:
        return self._a[bisect_left(self._a, seq, self._h) :]

    def below(self, seq: int) -> array:
        return self._a[self._h : bisect_left(self._a, seq, self._h)]

    def between(self, lo: int, hi: int) -> array:
        """Members s with lo <= s <= hi."""
        return self._a[bisect_left(self._a, lo, self._h) : bisect_right(self._a, hi, self._h)]

    def remove(self, seq: int) -> bool:
        a = self._a
        i = bisect_left(a, seq, self._h)
        if i == len(a) or a[i] != seq:
            return False
        if i == self._h:
            self._advance(1)
        else:
            del a[i]
        return True

    def pop_front(self, n: int) -> array:
        """Remove and return the n smallest sequences."""
        out = self._a[self._h : self._h + n]
        self._advance(len(out))
        return out

    def remove_below(self, seq: int) -> int:
        """Drop every sequence < seq; return how many went."""
        n = bisect_left(self._a, seq, self._h) - self._h
        self._advance(n)
        return n

    def add_sorted(self, seqs: Iterable[int]) -> None:
        """Merge ascending seqs in; appending past the end is the fast common case."""
        seqs = array("Q", seqs)
        if not seqs:
            return
        if not len(self) or seqs[0] > self._a[-1]:
            self._a.extend(seqs)
        elif len(seqs) <= _INSORT_MAX:
            for seq in seqs:
                if seq not in self:
                    insort(self._a, seq, lo=self._h)
        else:
            self._a = array("Q", sorted(set(self._a[self._h :]).union(seqs)))
            self._h = 0

    def next_absent(self, seq: int) -> int:
        """The smallest s >= seq not in the set, skipping whole runs by bisection.

        Within a run of consecutive values a[j] - j is constant, and it never
        decreases across the array, so the end of the run is a bisect away.
        """
        a = self._a
        i = bisect_left(a, seq, self._h)
        if i == len(a) or a[i] != seq:
            return seq
        j = bisect_right(range(len(a)), seq - i, lo=i, key=lambda k: a[k] - k)
        return a[j - 1] + 1

    def prev_absent(self, seq: int) -> int:
        """The largest s <= seq not in the set (mirror of `next_absent`)."""
        a = self._a
        i = bisect_right(a, seq, self._h) - 1
        if i < self._h or a[i] != seq:
            return seq
        j = bisect_left(range(len(a)), seq - i, lo=self._h, hi=i + 1, key=lambda k: a[k] - k)
        return a[j] - 1

    def _advance(self, n: int) -> None:
        self._h += n
        if self._h >= _COMPACT_MIN and self._h * 2 >= len(self._a):
            del self._a[: self._h]
            self._h = 0


class SubjectIndex:
    """Live sequences per subject, plus a cache of which subjects a wildcard matches.

    The cache is what keeps filtered reads proportional to matching subjects:
    it is kept current as subjects appear (an ordered dict, so a subject that
    empties and comes back is listed once), and names of subjects that emptied
    are pruned when next read.

    A subject holding one message (most of them, in a stream keyed by id or
    device) is stored as the bare sequence, an int, and gets a ``SeqList`` at its
    second message: the list and its array cost ~150 bytes more per subject.
    """

    _CACHE_LIMIT = 256

    __slots__ = ("_lists", "_matching")

    def __init__(self) -> None:
        self._lists: dict[str, SeqList | int] = {}
        self._matching: dict[str, dict[str, None]] = {}

    def __len__(self) -> int:
        return len(self._lists)

    def get(self, subject: str) -> SeqList | None:
        """The subject's sequences to read; change them only through this index.

        A one-message subject gets a fresh list each call, so a change made to
        the returned list would not reach the index.
        """
        seqs = self._lists.get(subject)
        if isinstance(seqs, int):
            return SeqList(array("Q", (seqs,)))
        return seqs

    def load(self, subject: str, seqs: array) -> None:
        """Install a subject's sorted live sequences (rebuild at open)."""
        self._lists[subject] = seqs[0] if len(seqs) == 1 else SeqList(seqs)
        self._matching.clear()

    def add(self, subjects: list[str], first_seq: int) -> None:
        lists = self._lists
        seq = first_seq
        for subject in subjects:
            seqs = lists.get(subject)
            if seqs.__class__ is SeqList:  # the hot path: a subject seen before
                seqs.append(seq)
            elif seqs is None:
                lists[subject] = seq
                for f, names in self._matching.items():
                    if subject_matches(f, subject):
                        names[subject] = None
            else:
                lists[subject] = SeqList(array("Q", (seqs, seq)))
            seq += 1

    def remove(self, subject: str, seq: int) -> bool:
        seqs = self._lists.get(subject)
        if seqs is None:
            return False
        if isinstance(seqs, int):
            if seqs != seq:
                return False
            del self._lists[subject]
            return True
        if not seqs.remove(seq):
            return False
        self._settle(subject, seqs)
        return True

    def drop_below(self, subject: str, seq: int) -> int:
        seqs = self._lists.get(subject)
        if seqs is None:
            return 0
        if isinstance(seqs, int):
            if seqs >= seq:
                return 0
            del self._lists[subject]
            return 1
        n = seqs.remove_below(seq)
        self._settle(subject, seqs)
        return n

    def trim(self, subject: str, keep: int) -> array:
        """Remove and return all but the subject's newest ``keep`` sequences (``keep`` > 0)."""
        seqs = self._lists.get(subject)
        if not isinstance(seqs, SeqList) or len(seqs) <= keep:
            return array("Q")
        out = seqs.pop_front(len(seqs) - keep)
        self._settle(subject, seqs)
        return out

    def _settle(self, subject: str, seqs: SeqList) -> None:
        """Back to the compact form once a list is down to one sequence, gone at none."""
        if len(seqs) > 1:
            return
        if seqs:
            self._lists[subject] = seqs.first()
        else:
            del self._lists[subject]

    def matching(self, subject_filter: str) -> list[str]:
        """Subjects with live messages that the filter matches."""
        if matches_all(subject_filter):
            return list(self._lists)
        if is_literal(subject_filter):
            return [subject_filter] if subject_filter in self._lists else []
        names = self._matching.get(subject_filter)
        if names is None:
            if len(self._matching) >= self._CACHE_LIMIT:
                self._matching.clear()
            names = dict.fromkeys(s for s in self._lists if subject_matches(subject_filter, s))
            self._matching[subject_filter] = names
        live = [s for s in names if s in self._lists]
        if len(live) < len(names):
            self._matching[subject_filter] = dict.fromkeys(live)
        return live
