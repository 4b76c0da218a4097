"""Both stores behind one fixture, so every behavioural test runs against each."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from log.segments import FileStore, MemoryStore, NewMsg, SegmentConfig
from log.segments.core import BatchStore

Reopen = Callable[[], BatchStore]


def msgs(subjects: list[str], *, ts: int = 1_000, size: int = 8) -> list[NewMsg]:
    """Messages whose bytes derive from their position, so a wrong read shows."""
    return [
        NewMsg(
            subject=s,
            hdr=b"NATS/1.0\r\nK: %d\r\n\r\n" % i if i % 3 == 0 else None,
            data=(s.encode() + b":%d:" % i).ljust(size, b"."),
            ts=ts + i,
        )
        for i, s in enumerate(subjects)
    ]


class Stores:
    """Opens the store under test and 'restarts' it (a no-op for memory)."""

    def __init__(self, kind: str, path: Path, config: SegmentConfig) -> None:
        self.kind = kind
        self.path = path
        self.config = config
        self.store: BatchStore = self._open()

    def _open(self) -> BatchStore:
        if self.kind == "file":
            return FileStore(self.path, name="S", config=self.config)
        return MemoryStore(name="S")

    def now_and_after_restart(self) -> Iterator[BatchStore]:
        """The open store, then the same store reopened: checks run on both."""
        yield self.store
        yield self.reopen()

    def reopen(self) -> BatchStore:
        if self.kind == "file":
            self.store.close()
            self.store = self._open()
        return self.store


SMALL = SegmentConfig(max_bytes=4096, max_msgs=40, cache_batches=4)


@pytest.fixture(params=["file", "memory"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    s = Stores(request.param, tmp_path / "S", SMALL)
    yield s
    s.store.close()
