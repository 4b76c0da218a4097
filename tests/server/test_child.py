"""Stopping a child process (the lake compactor, the SQL service) with real processes."""

from __future__ import annotations

import signal
import subprocess
import sys

from ingest.server.child import stop_child

# Prints once its SIGTERM handler is set, so the test signals no sooner.
_IGNORES_TERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def _child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)


async def test_a_running_child_is_terminated_and_reaped() -> None:
    with _child("import time; print('ready', flush=True); time.sleep(60)") as proc:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        assert await stop_child(proc, 10.0) == -signal.SIGTERM
        assert proc.returncode == -signal.SIGTERM


async def test_a_child_ignoring_sigterm_is_killed_after_its_grace() -> None:
    with _child(_IGNORES_TERM) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        assert await stop_child(proc, 0.2) == -signal.SIGKILL


async def test_no_child_or_one_already_gone_is_none() -> None:
    with _child("raise SystemExit(3)") as proc:
        proc.wait()
        assert await stop_child(proc, 1.0) is None
    assert await stop_child(None, 1.0) is None
