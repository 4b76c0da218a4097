"""Consecutive Remove entries are applied as one store call (interest retention proposes
one per ack); the stream must end up the same as when each entry is applied alone."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from log.config import from_request
from log.segments.memstore import MemoryStore
from log.streams.stream import Stream


class CountingStore(MemoryStore):
    """A memory store that records each `remove_many` call, to see the removes coalesce."""

    def __init__(self) -> None:
        super().__init__(name="s")
        self.remove_calls: list[list[int]] = []

    def remove_many(self, seqs: Iterable[int]) -> int:
        seqs = list(seqs)
        self.remove_calls.append(seqs)
        return super().remove_many(seqs)


def make(**cfg: Any) -> tuple[Stream, CountingStore]:
    config = from_request({"name": "s", "subjects": ["s.>"], "retention": "interest", **cfg})
    store = CountingStore()
    return Stream(config, store, created_ns=0, read_headers=lambda _: {}), store


# Publishes ("p", subject) and removes ("r", seqs), in proposal order: runs of removes
# (with a repeat and a seq already gone), removes between publishes, a trailing run.
SCRIPT: list[tuple[str, Any]] = [
    *(("p", f"s.{i % 2}") for i in range(6)),
    ("r", (1,)),
    ("r", (2, 3)),
    ("r", (2,)),
    ("p", "s.0"),
    ("r", (9,)),
    ("p", "s.1"),
    ("p", "s.0"),
    ("r", (5,)),
    ("r", (4, 7)),
]


async def run(script: list[tuple[str, Any]], *, one_by_one: bool, **cfg: Any) -> CountingStore:
    stream, store = make(**cfg)
    for op, arg in script:
        if op == "p":
            stream.publish(arg, None, b"x" * 10, {}, lambda _: None)
        else:
            stream.remove(list(arg))
        if one_by_one:
            await stream.flush()
    await stream.flush()
    return store


def outcome(store: CountingStore) -> tuple[list[int], tuple[int, ...]]:
    state = store.state()
    return list(store.seqs_for(">", 0)), (state.msgs, state.bytes, state.first_seq, state.last_seq)


async def test_consecutive_removes_are_one_call_with_the_same_outcome() -> None:
    batched = await run(SCRIPT, one_by_one=False)
    alone = await run(SCRIPT, one_by_one=True)
    assert outcome(batched) == outcome(alone)
    assert list(batched.seqs_for(">", 0)) == [6, 8, 9]  # 9 was not there yet when removed
    assert len(alone.remove_calls) == 6
    assert batched.remove_calls == [[1, 2, 3, 2], [9], [5, 4, 7]]


async def test_removes_do_not_move_across_publishes_under_limits() -> None:
    """With max_msgs, a remove applied after a later publish would change what the limit
    discards: removes are only merged with removes."""
    script = [("p", "s.a"), ("p", "s.a"), ("p", "s.a"), ("r", (2,)), ("p", "s.a")]
    batched = await run(script, one_by_one=False, max_msgs=3)
    alone = await run(script, one_by_one=True, max_msgs=3)
    assert outcome(batched) == outcome(alone)
    assert list(batched.seqs_for(">", 0)) == [1, 3, 4]
