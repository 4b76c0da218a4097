"""Stopping a child process the server runs beside itself (the lake compactor, the SQL
service): SIGTERM lets it finish what it is writing; past its grace, SIGKILL."""

from __future__ import annotations

import asyncio
import subprocess


async def stop_child(proc: subprocess.Popen[bytes] | None, grace: float) -> int | None:
    """Terminate `proc` if it still runs, wait up to `grace` seconds (off the event loop),
    then kill it; its exit code once reaped, or None if it was not running."""
    if proc is None or proc.poll() is not None:
        return None
    proc.terminate()
    try:
        return await asyncio.to_thread(proc.wait, grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        return await asyncio.to_thread(proc.wait)
