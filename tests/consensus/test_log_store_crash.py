"""kill -9 of a process appending to the log: everything it appended is there (the OS has it)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

from consensus.log_store import LogStore
from tests.consensus.log_store_writer import payload

ROOT = Path(__file__).resolve().parents[2]


def run_and_kill(path: Path, lines: int) -> tuple[int, int]:
    """Start the writer, read `lines` appends, SIGKILL it; the last (index, term) it reported."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.consensus.log_store_writer", str(path)],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        text=True,
    )
    assert child.stdout is not None
    last = (0, 0)
    try:
        for _ in range(lines):
            line = child.stdout.readline()
            assert line, "writer died"
            index, term = map(int, line.split())
            last = (index, term)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    return last


def test_kill_minus_nine_while_appending(tmp_path: Path) -> None:
    rng = random.Random(os.getpid())
    for _ in range(4):
        index, term = run_and_kill(tmp_path, rng.randint(20, 400))
        store, restored = LogStore.open(tmp_path, name="crash")
        store.close()
        assert store.last_index >= index
        first = restored.snapshot.index + 1 if restored.snapshot else 1
        got = restored.entries
        assert [e.index for e in got] == list(range(first, first + len(got)))
        assert all(e.data == payload(e.term, e.index) for e in got)
        assert all(a.term <= b.term for a, b in pairwise(got))
        # What it reported is there (or rewritten by a later term after the report; or
        # in the snapshot). Only the append in progress can be torn (a signal may cut
        # a multi-page write short): never one that returned.
        if index >= first:
            assert got[index - first].term >= term
        else:
            assert restored.snapshot is not None and restored.snapshot.index >= index
