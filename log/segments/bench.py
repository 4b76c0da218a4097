"""Storage micro-benchmark: `python -m log.segments.bench [msgs] [batch]`.

Prints append throughput, start-up (index rebuild) time, and lookup latencies
for the file and memory stores; numbers, not assertions (see DESIGN.md).
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from pathlib import Path

from log.segments.api import NewMsg
from log.segments.core import BatchStore
from log.segments.filestore import FileStore
from log.segments.memstore import MemoryStore


def _batches(total: int, size: int, subjects: int) -> list[list[NewMsg]]:
    payload = os.urandom(128)
    names = [f"orders.{i % 10}.{i}" for i in range(subjects)]
    return [
        [NewMsg(names[(b + i) % subjects], None, payload, b + i) for i in range(size)]
        for b in range(0, total, size)
    ]


def _per_op_us(fn: object, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()  # type: ignore[operator]
    return (time.perf_counter() - t) / n * 1e6


def _lookups(store: BatchStore, total: int) -> str:
    rng = random.Random(1)
    seqs = [rng.randint(1, total) for _ in range(10_000)]
    it = iter(seqs * 2)
    load = _per_op_us(lambda: store.load(next(it)), 10_000)
    it = iter(seqs * 2)
    literal = _per_op_us(lambda: store.load_next(next(it), "orders.3.503"), 2_000)
    it = iter(seqs * 2)
    wild = _per_op_us(lambda: store.load_next(next(it), "orders.3.*"), 2_000)
    last = _per_op_us(lambda: store.load_last("orders.7.57"), 10_000)
    return (
        f"load {load:.1f} us, load_next(literal) {literal:.1f} us, "
        f"load_next(100 subjects) {wild:.1f} us, load_last(literal) {last:.1f} us"
    )


def main(total: int = 1_000_000, size: int = 500, subjects: int = 1000) -> None:
    batches = _batches(total, size, subjects)
    with tempfile.TemporaryDirectory() as tmp:
        for label, make in (
            ("file", lambda: FileStore(Path(tmp) / "S", name="S")),
            ("memory", lambda: MemoryStore(name="S")),
        ):
            store = make()
            t = time.perf_counter()
            for batch in batches:
                store.append(batch)
            store.sync()
            rate = total / (time.perf_counter() - t)
            print(f"{label}: append {rate:,.0f} msgs/s (batches of {size}, 128-byte payloads)")
            if label == "file":
                store.close()
                t = time.perf_counter()
                store = make()
                took = time.perf_counter() - t
                print(f"file: open {total:,} msgs / {subjects} subjects in {took:.2f} s")
            print(f"{label}: {_lookups(store, total)}")
            store.close()


if __name__ == "__main__":
    main(*map(int, sys.argv[1:]))
