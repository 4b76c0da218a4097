"""`jetlake serve --signal <command>[=<pid>]`: signal a running server, as
`nats-server --signal` does, so service scripts written for it keep working.

The pid is a number, a glob ending in `*`, or the path of a pid file (`-P`);
without one, the single running `jetlake` process found by `pgrep` is signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess

PROCESS_NAME = "jetlake"

COMMANDS = {
    "stop": signal.SIGKILL,
    "quit": signal.SIGINT,
    "reopen": signal.SIGUSR1,
    "reload": signal.SIGHUP,
    "ldm": signal.SIGUSR2,
    "term": signal.SIGTERM,
}


class SignalError(Exception):
    """The signal could not be sent; worded as the reference's."""


def send_signal(spec: str) -> None:
    """Send what `spec` (`reload`, `reload=1234`, `reload=/run/jetlake.pid`) asks for."""
    command, *rest = spec.split("=")
    if len(rest) > 1:
        raise SignalError(f"invalid signal parameters: [{' '.join(rest[1:])}]")
    target = _read_pid_file(rest[0]) if rest else ""
    glob = target.endswith("*")
    prefix = target.removesuffix("*")
    if prefix and not prefix.isdigit():
        raise SignalError(f"invalid pid: {prefix}")
    pids = [int(prefix)] if prefix and not glob else _running()
    if len(pids) > 1 and not glob:
        listed = "".join(f"\n{pid}" for pid in pids)
        raise SignalError(f"multiple {PROCESS_NAME} processes running:{listed}")
    if not pids:
        raise SignalError(f"no {PROCESS_NAME} processes running")
    signum = COMMANDS.get(command)
    if signum is None:
        raise SignalError(f'unknown signal "{command}"')
    failures = ""
    for pid in pids:
        if glob and not str(pid).startswith(prefix):
            continue
        try:
            os.kill(pid, signum)
        except OSError as exc:
            reason = (exc.strerror or str(exc)).lower()
            failures += f'\nsignal "{command}" {pid}: {reason}'
    if failures:
        raise SignalError(failures)


def _read_pid_file(value: str) -> str:
    """A pid file's contents when `value` names a readable file, else `value` itself."""
    try:
        with open(value) as f:
            return f.read().strip()
    except OSError:
        return value


def _running() -> list[int]:
    try:
        found = subprocess.run(
            ["pgrep", PROCESS_NAME], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        raise SignalError("unable to resolve pid, try providing one") from None
    me = os.getpid()
    return [int(line) for line in found.stdout.split() if line.isdigit() and int(line) != me]
