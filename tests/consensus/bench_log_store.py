"""Append throughput of the Raft log on disk (not collected by pytest; run it by hand):

    .venv/bin/python -m tests.consensus.bench_log_store [directory]

128-byte entries, batches of 1 and 64, without fsync (what a kill -9 keeps; the
background syncer fsyncs within the sync window) and with an fsync after every
append (`always`). Also the open (recovery scan) of a full 64 MiB file.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from consensus.log_store import LogStore
from consensus.types import Entry
from consensus.wal_format import FRAME_OVERHEAD

PAYLOAD = bytes(range(128))


def run(path: Path, batch: int, fsync: bool, appends: int) -> tuple[float, float]:
    """(entries per second, µs per append call); the entries are built before timing."""
    shutil.rmtree(path, ignore_errors=True)
    store, _ = LogStore.open(path, name="bench")
    batches = [
        [Entry(1, i, data=PAYLOAD) for i in range(first, first + batch)]
        for first in range(1, appends * batch + 1, batch)
    ]
    start = time.perf_counter()
    for entries in batches:
        store.append(entries)
        if fsync:
            store.sync()
    elapsed = time.perf_counter() - start
    store.close()
    return appends * batch / elapsed, elapsed / appends * 1e6


def recovery(path: Path) -> tuple[int, float]:
    shutil.rmtree(path, ignore_errors=True)
    store, _ = LogStore.open(path, name="bench")
    index = 1
    while index < 400_000:
        store.append([Entry(1, i, data=PAYLOAD) for i in range(index, index + 1000)])
        index += 1000
    store.close()
    start = time.perf_counter()
    store, restored = LogStore.open(path, name="bench")
    elapsed = time.perf_counter() - start
    store.close()
    return len(restored.entries), elapsed


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
    path = root / "bench-log"
    for fsync in (False, True):
        for batch in (1, 64):
            appends = (2_000 if fsync else 100_000) // (1 if batch == 1 else 8)
            rate, per_call = run(path, batch, fsync, appends)
            mode = "fsync each" if fsync else "no fsync  "
            print(f"{mode} batch {batch:2d}: {rate:>10,.0f} entries/s {per_call:8.1f} µs/append")
    count, elapsed = recovery(path)
    size = count * (len(PAYLOAD) + FRAME_OVERHEAD) / 2**20
    print(f"open of {count:,} entries ({size:.0f} MiB): {elapsed:.2f} s")
    shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
