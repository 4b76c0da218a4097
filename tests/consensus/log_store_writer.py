"""Child process of the kill -9 test; and what every log-store test shares.

Appends batches forever, printing the last index after each append (no
fsync: a kill -9 keeps what the OS was handed). Now and then a new term
rewrites the last few entries (conflict truncation) or a snapshot compacts.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

from consensus.log_store import LogStore
from consensus.types import ConfState, Entry, EntryKind, HardState, Snapshot, SnapshotMeta


def payload(term: int, index: int) -> bytes:
    """Bytes that derive from the entry's identity, with varied lengths (0 to 95)."""
    return hashlib.sha256(b"%d/%d" % (term, index)).digest() * (index % 4) + b"." * (index % 3)


def entry(term: int, index: int) -> Entry:
    kind = EntryKind.CONFIG if index % 17 == 0 else EntryKind.NORMAL
    return Entry(term, index, kind, payload(term, index))


def entries(term: int, first: int, last: int) -> list[Entry]:
    return [entry(term, i) for i in range(first, last + 1)]


def snapshot(term: int, index: int) -> Snapshot:
    return Snapshot(
        SnapshotMeta(index, term, ConfState(frozenset({"a", "b", "c"}))), b"s%d" % index
    )


@pytest.fixture
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests check what recovery reads and cuts, hundreds of opens each; every open
    fsyncs every file, which on a busy disk costs 10x the rest (durability itself is the
    kill -9 and sync tests' subject)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)


def main(path: str) -> None:
    store, restored = LogStore.open(Path(path), name="crash", max_file_bytes=4096)
    snap = restored.snapshot.index if restored.snapshot else 0
    terms = [restored.hard_state.term, 1, *(e.term for e in restored.entries[-1:])]
    term = max(terms)
    last = store.last_index
    step = 0
    while True:
        step += 1
        if step % 7 == 0 and last - 3 > snap:
            term += 1  # a new leader overwrites the last three entries
            store.set_hard_state(HardState(term, "a", 0))
            last -= 3
        n = 1 + step % 40
        store.append(entries(term, last + 1, last + n))
        last += n
        if step % 50 == 0:
            snap = last  # the entry just appended: its term is `term`
            store.save_snapshot(snapshot(term, snap))
        print(last, term, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
