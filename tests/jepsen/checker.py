"""The set checker: what each replica holds against what the writers were told.

Pure: a history of publish attempts and one read per node in, a verdict out.
Every attempted value is unique (``w{writer}-{i}``), so presence is a set
question and order is a sequence question:

- lost: acknowledged, yet absent from the node. The one thing a PubAck forbids.
- unexpected: present, yet never attempted or definitely refused (the server
  answered with an error, or nobody was listening). Phantom or resurrected data.
- duplicated: present more than once on the node (writers never retry, so one
  attempt is at most one message).
- misplaced: acknowledged with sequence N, present at another sequence: the ack
  described a log position that did not survive.
- unknown: the publish timed out or the connection broke; either answer is
  legal, counted as present or absent for the record.

Replicas must also agree with one another once all are current: ``divergent``
names nodes whose (sequence, value) list differs from the largest group of
identical copies.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

SAMPLE = 5  # values shown per category in a summary line


class Outcome(StrEnum):
    ACKED = "acked"
    FAILED = "failed"  # a definite refusal: the message was not stored
    UNKNOWN = "unknown"  # timed out or disconnected: may or may not be stored


@dataclass(frozen=True, slots=True)
class Attempt:
    """One publish: its value, what the writer learned, the acked sequence if any."""

    value: str
    outcome: Outcome
    seq: int | None = None


@dataclass(frozen=True, slots=True)
class NodeRead:
    """Everything one node holds, in stream order: (sequence, value)."""

    node: str
    messages: tuple[tuple[int, str], ...]


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    node: str
    read: int
    ok: int  # acknowledged and present at its acked sequence
    lost: tuple[str, ...]
    unexpected: tuple[str, ...]
    duplicated: tuple[str, ...]
    misplaced: tuple[str, ...]
    unknown_present: int
    unknown_absent: int

    @property
    def valid(self) -> bool:
        return not (self.lost or self.unexpected or self.duplicated or self.misplaced)

    def summary(self) -> str:
        parts = [f"{self.node}: read {self.read}, ok {self.ok}"]
        for label, values in (
            ("lost", self.lost),
            ("unexpected", self.unexpected),
            ("duplicated", self.duplicated),
            ("misplaced", self.misplaced),
        ):
            parts.append(f"{label} {len(values)}{_sample(values)}")
        parts.append(f"unknown present {self.unknown_present} / absent {self.unknown_absent}")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Verdict:
    acked: int
    failed: int
    unknown: int
    nodes: tuple[NodeVerdict, ...]
    divergent: tuple[str, ...]

    @property
    def valid(self) -> bool:
        return all(n.valid for n in self.nodes) and not self.divergent

    def summary(self) -> str:
        head = f"attempts: {self.acked} acked, {self.failed} failed, {self.unknown} unknown"
        lines = [head, *(n.summary() for n in self.nodes)]
        lines.append(f"divergent replicas: {list(self.divergent) or 'none'}")
        return "\n".join(lines)


class HistoryError(ValueError):
    """The workload broke its own contract: a value was attempted twice."""


def check(history: Sequence[Attempt], reads: Sequence[NodeRead]) -> Verdict:
    attempts: dict[str, Attempt] = {}
    for attempt in history:
        if attempt.value in attempts:
            raise HistoryError(f"value {attempt.value!r} attempted twice")
        attempts[attempt.value] = attempt
    counts = Counter(a.outcome for a in history)
    return Verdict(
        acked=counts[Outcome.ACKED],
        failed=counts[Outcome.FAILED],
        unknown=counts[Outcome.UNKNOWN],
        nodes=tuple(_check_node(attempts, read) for read in reads),
        divergent=_divergent(reads),
    )


def _check_node(attempts: dict[str, Attempt], read: NodeRead) -> NodeVerdict:
    seqs: dict[str, list[int]] = {}
    for seq, value in read.messages:
        seqs.setdefault(value, []).append(seq)
    lost, misplaced, unknown_present, unknown_absent, ok = [], [], 0, 0, 0
    for value, attempt in attempts.items():
        where = seqs.get(value)
        if attempt.outcome is Outcome.ACKED:
            if where is None:
                lost.append(value)
            elif attempt.seq not in where:
                misplaced.append(value)
            else:
                ok += 1
        elif attempt.outcome is Outcome.UNKNOWN:
            if where is None:
                unknown_absent += 1
            else:
                unknown_present += 1
    unexpected = [
        value
        for value in seqs
        if value not in attempts or attempts[value].outcome is Outcome.FAILED
    ]
    return NodeVerdict(
        node=read.node,
        read=len(read.messages),
        ok=ok,
        lost=tuple(lost),
        unexpected=tuple(unexpected),
        duplicated=tuple(value for value, where in seqs.items() if len(where) > 1),
        misplaced=tuple(misplaced),
        unknown_present=unknown_present,
        unknown_absent=unknown_absent,
    )


def _divergent(reads: Sequence[NodeRead]) -> tuple[str, ...]:
    """Nodes outside the largest group of identical copies (the first such group on a tie)."""
    copies = Counter(read.messages for read in reads)
    if len(copies) <= 1:
        return ()
    majority = copies.most_common(1)[0][0]
    return tuple(read.node for read in reads if read.messages != majority)


def _sample(values: tuple[str, ...]) -> str:
    if not values:
        return ""
    more = f", +{len(values) - SAMPLE}" if len(values) > SAMPLE else ""
    return f" ({', '.join(values[:SAMPLE])}{more})"
