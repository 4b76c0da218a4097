"""The duplicate window: which Nats-Msg-Id values were stored recently, and at what sequence.

Ids enter in timestamp order, so expiry only ever looks at the oldest entry;
memory is bounded by the publish rate times the window, not by history.
"""

from __future__ import annotations

from collections import OrderedDict


class DedupWindow:
    def __init__(self, window_ns: int) -> None:
        self.window_ns = window_ns
        self._ids: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def lookup(self, msg_id: str, now_ns: int) -> int | None:
        """The sequence stored under msg_id if still inside the window."""
        self.expire(now_ns)
        entry = self._ids.get(msg_id)
        return entry[0] if entry else None

    def add(self, msg_id: str, seq: int, ts_ns: int) -> None:
        self._ids[msg_id] = (seq, ts_ns)
        self._ids.move_to_end(msg_id)

    def expire(self, now_ns: int) -> None:
        horizon = now_ns - self.window_ns
        while self._ids:
            _, (_, ts) = next(iter(self._ids.items()))
            if ts >= horizon:
                return
            self._ids.popitem(last=False)

    def clear(self) -> None:
        self._ids.clear()
