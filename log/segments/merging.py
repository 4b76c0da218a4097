"""Which sealed segments to merge next: the policy alone, over anything that has a size.

Kept apart from the store (`filestore.FileStore.merge_small` applies it) because it is a
pure function of the segments' sizes and the limits, tested without files.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from log.segments.filestore import SegmentConfig


class _Piece(Protocol):
    """What the merge policy weighs in a segment (a `Segment` has all of it)."""

    @property
    def size(self) -> int: ...
    @property
    def rows(self) -> int: ...
    @property
    def batches(self) -> int: ...
    @property
    def min_ts(self) -> int: ...


def _weight(piece: _Piece) -> tuple[int, int, int]:
    return piece.size, piece.rows, piece.batches


def plan_merge(pieces: Sequence[_Piece], config: SegmentConfig) -> slice | None:
    """The oldest run of adjacent segments worth merging into one, if any.

    A run is as long as the limits allow, which bound both the result and the
    time one merge holds the event loop (docs/jetstream.md, Merging): at most
    `merge_target_bytes`, `max_msgs` rows, `merge_max_batches` batches (each
    costs a decode and a copy: a sync publish is a batch of one) and
    `merge_max_segments` files (each costs an open and two unlinks), within
    `max_age_ns` of time, so the result is a segment the writer itself could
    have rolled and max_age still drops files at its grain. A segment that
    fits no run alone is a wall between runs.

    A run qualifies when it has at least `merge_min_segments` members, or is
    full (two or more members, and the next segment would pass a limit): each
    merge then removes many files or makes a segment as big as allowed, never
    a pair of crumbs per tick. And its largest member must be at most the sum
    of the others: the segment holding a given row then at least doubles each
    time that row is rewritten, so a row is rewritten at most log2(target /
    seal size) times, and a big segment is never rewritten to absorb crumbs.
    """
    caps = (config.merge_target_bytes, config.max_msgs, config.merge_max_batches)
    end = 0
    totals = [0, 0, 0]  # bytes, rows, batches of pieces[start:end]
    largest: deque[int] = deque()  # indices in the window, sizes decreasing
    for start, first in enumerate(pieces):
        if end <= start:  # nothing in the window: the previous start was a wall
            end, totals = start, [0, 0, 0]
            largest.clear()
        full = False
        while end < len(pieces):
            piece = pieces[end]
            grown = [t + w for t, w in zip(totals, _weight(piece), strict=True)]
            if (
                end - start == config.merge_max_segments
                or piece.min_ts - first.min_ts >= config.max_age_ns
                or any(g > cap for g, cap in zip(grown, caps, strict=True))
            ):
                full = all(w <= cap for w, cap in zip(_weight(piece), caps, strict=True))
                break
            totals = grown
            while largest and pieces[largest[-1]].size <= piece.size:
                largest.pop()
            largest.append(end)
            end += 1
        count = end - start
        if (
            count >= 2
            and (count >= config.merge_min_segments or full)
            and 2 * pieces[largest[0]].size <= totals[0]
        ):
            return slice(start, end)
        if count:
            totals = [t - w for t, w in zip(totals, _weight(first), strict=True)]
            if largest[0] == start:
                largest.popleft()
    return None
