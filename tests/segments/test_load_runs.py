"""Bulk reads (`load_run`, `load_many`) agree with reading one message at a time."""

from __future__ import annotations

import random

from log.segments.api import NewMsg
from log.segments.memstore import MemoryStore


def _store() -> MemoryStore:
    store = MemoryStore(name="runs")
    for i in range(10):  # ten batches of five, some with headers
        batch = range(i * 5, i * 5 + 5)
        store.append([NewMsg(f"a.{j % 3}", b"h" if j % 2 else None, b"%d" % j, j) for j in batch])
    for seq in (7, 8, 20):
        store.remove(seq)
    return store


def test_load_run_is_a_prefix_of_the_live_messages_in_range() -> None:
    store = _store()
    for start in range(0, 53):
        for upto in (3, 9, 22, 60):
            expected = []
            msg = store.load_next(start)
            while msg is not None and msg.seq <= upto:
                expected.append(msg)
                msg = store.load_next(msg.seq + 1)
            for limit in (1, 3, 100):
                got = store.load_run(start, upto, limit)
                assert got == expected[: len(got)] and len(got) <= limit
                assert got or not expected


def test_load_many_skips_deleted_and_keeps_order() -> None:
    store, rng = _store(), random.Random(1)
    for _ in range(300):
        seqs = sorted(rng.sample(range(0, 55), rng.randrange(0, 20)))
        assert store.load_many(seqs) == [m for m in map(store.load, seqs) if m is not None]
