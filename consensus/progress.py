"""What a leader knows about one follower's log, and how fast it may send to it.

A follower starts in PROBE: the leader does not know where its log ends, so it
sends one APPEND and waits for the answer (or a heartbeat reply) before the
next, backing off by the follower's hint on a rejection. Once an APPEND is
accepted the follower is in REPLICATE: the leader streams APPENDs optimistically,
up to `max_inflight` unacknowledged ones, so a slow link does not stall behind a
round trip per batch but a dead one does not grow an unbounded send queue. When
the entries it needs were compacted away it is in SNAPSHOT until it installs one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import IntEnum


class ReplicaState(IntEnum):
    PROBE = 0
    REPLICATE = 1
    SNAPSHOT = 2


@dataclass(slots=True)
class Progress:
    match: int  # highest index known to be in the follower's log
    next: int  # next index to send
    state: ReplicaState = ReplicaState.PROBE
    probe_sent: bool = False  # PROBE: an APPEND is out, wait for its answer
    pending_snapshot: int = 0  # SNAPSHOT: the index of the snapshot sent
    snapshot_checks: int = 0  # SNAPSHOT: quorum checks passed without an answer
    recent_active: bool = False  # heard from since the last check-quorum
    sent_commit: int = 0  # highest commit index sent to it (it may lag the leader's)
    inflight: deque[int] = field(default_factory=deque)  # REPLICATE: last index of each APPEND

    def become_probe(self) -> None:
        self.state = ReplicaState.PROBE
        self.next = self.match + 1
        self.probe_sent = False
        self.pending_snapshot = 0
        self.inflight.clear()

    def become_replicate(self) -> None:
        self.state = ReplicaState.REPLICATE
        self.next = self.match + 1
        self.pending_snapshot = 0
        self.inflight.clear()

    def become_snapshot(self, index: int) -> None:
        self.state = ReplicaState.SNAPSHOT
        self.pending_snapshot = index
        self.snapshot_checks = 0
        self.next = index + 1
        self.inflight.clear()

    def acknowledge(self, index: int) -> bool:
        """The follower holds the leader's log up to `index`; True if that is news."""
        self.probe_sent = False
        while self.inflight and self.inflight[0] <= index:
            self.inflight.popleft()
        if index <= self.match:
            return False
        self.match = index
        self.next = max(self.next, index + 1)
        return True

    def back_off(self, rejected: int, guess: int) -> bool:
        """An APPEND after `rejected` was refused; move `next` back to `guess` (never at or
        below match). False if the refusal is stale (answers an older APPEND)."""
        if self.state == ReplicaState.REPLICATE:
            if rejected <= self.match:
                return False
            self.become_probe()
        elif rejected != self.next - 1:
            return False
        self.state = ReplicaState.PROBE
        self.next = max(self.match + 1, min(rejected, guess))
        self.probe_sent = False
        return True

    def paused(self, max_inflight: int) -> bool:
        if self.state == ReplicaState.PROBE:
            return self.probe_sent
        if self.state == ReplicaState.REPLICATE:
            return len(self.inflight) >= max_inflight
        return True

    def sent(self, last: int, count: int) -> None:
        """An APPEND of `count` entries ending at `last` left for this follower."""
        if self.state == ReplicaState.REPLICATE:
            if count:
                self.inflight.append(last)
                self.next = last + 1
        else:
            self.probe_sent = True
