"""The duplicate window: which Nats-Msg-Id values were stored recently, and at what sequence.

Ids enter in timestamp order, so expiry only ever looks at the oldest entry;
memory is bounded by the publish rate times the window, not by history.

An id costs its string, a dict slot and its sequence; its age lives in packed
arrays beside a queue of the ids in arrival order (8 bytes each) rather than in
a tuple per id: an `OrderedDict` of `(seq, ts)` tuples cost ~220 bytes an id
besides the string, this ~100.
"""

from __future__ import annotations

from array import array
from collections import deque

_COMPACT_MIN = 1024


class DedupWindow:
    __slots__ = ("_head", "_order", "_order_seqs", "_order_ts", "_seqs", "window_ns")

    def __init__(self, window_ns: int) -> None:
        self.window_ns = window_ns
        self._seqs: dict[str, int] = {}
        self._order: deque[str] = deque()  # ids in arrival order, with the two arrays below
        self._order_seqs = array("Q")
        self._order_ts = array("q")
        self._head = 0  # entries of the arrays already expired

    def __len__(self) -> int:
        return len(self._seqs)

    def lookup(self, msg_id: str, now_ns: int) -> int | None:
        """The sequence stored under msg_id if still inside the window."""
        self.expire(now_ns)
        return self._seqs.get(msg_id)

    def add(self, msg_id: str, seq: int, ts_ns: int) -> None:
        """Record msg_id at seq; an id added again is aged from its newest add."""
        self._seqs[msg_id] = seq
        self._order.append(msg_id)
        self._order_seqs.append(seq)
        self._order_ts.append(ts_ns)

    def expire(self, now_ns: int) -> None:
        horizon = now_ns - self.window_ns
        order, seqs, ts = self._order, self._order_seqs, self._order_ts
        head = self._head
        while order and ts[head] < horizon:
            msg_id = order.popleft()
            if self._seqs.get(msg_id) == seqs[head]:  # not re-added since
                del self._seqs[msg_id]
            head += 1
        if head >= _COMPACT_MIN and head * 2 >= len(ts):
            del seqs[:head]
            del ts[:head]
            head = 0
        self._head = head

    def clear(self) -> None:
        self._seqs.clear()
        self._order.clear()
        del self._order_seqs[:]
        del self._order_ts[:]
        self._head = 0
