"""kill -9 while appending: every synced message survives, byte-identical, with no gap."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from log.segments import FileStore
from tests.segments.crash_writer import payload

ROOT = Path(__file__).resolve().parents[2]


def run_and_kill(path: Path, lines: int) -> int:
    """Start the writer, read `lines` synced seqs, SIGKILL it; return the last one read."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.segments.crash_writer", str(path)],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env=env,
        text=True,
    )
    assert child.stdout is not None
    synced = 0
    try:
        for _ in range(lines):
            line = child.stdout.readline()
            assert line, "writer died"
            synced = int(line)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    return synced


def test_kill_minus_nine(tmp_path: Path) -> None:
    rng = random.Random(os.getpid())
    synced = 0
    for _ in range(3):
        synced = max(synced, run_and_kill(tmp_path, rng.randint(5, 80)))
        store = FileStore(tmp_path, name="C")
        st = store.state()
        assert st.last_seq >= synced
        assert (st.msgs, st.first_seq, st.num_deleted) == (st.last_seq, 1, 0)
        for seq in range(1, st.last_seq + 1):
            msg = store.load(seq)
            assert msg is not None and msg.data == payload(seq) and msg.ts == seq
        store.close()
