"""Starting a server under test as a real process on a free loopback port.

Both servers are driven through the same command-line contract (`-a`, `-p -1`, `-js`,
`-sd`, `-c`) and the same start-up log lines, so the harness never needs to know
which one it is talking to.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from time import perf_counter
from typing import NamedTuple

from benchmarks.model import Profile

LISTENING = re.compile(rb"Listening for client connections on (\S+):(\d+)")
WEBSOCKET_LISTENING = re.compile(rb"Listening for websocket clients on (ws://\S+:\d+)")
MQTT_LISTENING = re.compile(rb"Listening for MQTT clients on mqtt://\S+:(\d+)")
READY = b"Server is ready"
STOP_GRACE_SECONDS = 10.0
STORE = "store"  # under each run's fresh directory
SYNC_ALWAYS_CONFIG = """\
jetstream {{
  store_dir: "{store}"
  sync_interval: always
}}
"""
MQTT_CONFIG = """\
jetstream {{
  store_dir: "{store}"
}}
mqtt {{
  host: 127.0.0.1
  port: -1
}}
"""


class ServerError(Exception):
    """The server did not come up; carries the tail of its log for the report."""


class Target(NamedTuple):
    """What a workload runs against: the server's URL ("" offline), store dir, MQTT port."""

    url: str
    store: Path
    mqtt_port: int = 0


def profile_args(profile: Profile, workdir: Path) -> list[str]:
    """Flags for a profile. `sync_interval` and `mqtt {}` have no flag, hence config files."""
    store = workdir / STORE
    if profile in (Profile.CORE, Profile.OFFLINE):
        return []
    if profile is Profile.JS:
        return ["-js", "-sd", str(store)]
    config = workdir / f"{profile.value}.conf"
    template = MQTT_CONFIG if profile is Profile.MQTT else SYNC_ALWAYS_CONFIG
    config.write_text(template.format(store=store))
    return ["-c", str(config)]


def _log_tail(log: Path, lines: int = 8) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


async def _wait_ready(proc: subprocess.Popen[bytes], log: Path, timeout: float) -> tuple[str, int]:
    """Poll the log file for the reference's start-up lines; the client URL, MQTT port.

    Both servers log their listeners before "Server is ready"; the MQTT port is 0
    when there is no `mqtt {}` block.

    The log goes to a file rather than a pipe so a chatty server can never block on
    a full pipe while the benchmark is busy measuring.
    """
    deadline = perf_counter() + timeout
    while perf_counter() < deadline:
        text = log.read_bytes()
        found = LISTENING.search(text)
        if found and READY in text:
            host, port = found.group(1).decode(), found.group(2).decode()
            mqtt = MQTT_LISTENING.search(text)
            return f"nats://{host}:{port}", int(mqtt.group(1)) if mqtt else 0
        if proc.poll() is not None:
            raise ServerError(f"exited with {proc.returncode}:\n{_log_tail(log)}")
        await asyncio.sleep(0.02)
    raise ServerError(f"not ready after {timeout:.0f} s:\n{_log_tail(log)}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after a grace period: never leave a server behind."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(STOP_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@asynccontextmanager
async def running_server(
    command: list[str], profile: Profile, *, store_root: Path | None, start_timeout: float
) -> AsyncIterator[Target]:
    """Run ``command`` with the profile's flags in a fresh directory; yield its target.

    ``store_root`` chooses the disk JetStream writes to: fsync costs are a property
    of that disk, so put it where the figures should apply (tmpfs makes fsync free).
    An offline profile gets the fresh directory and no process.
    """
    with tempfile.TemporaryDirectory(prefix="jetlake-bench-", dir=store_root) as tmp:
        workdir = Path(tmp)
        store = workdir / STORE
        if profile is Profile.OFFLINE:
            store.mkdir()
            yield Target("", store)
            return
        args = [*command, "-a", "127.0.0.1", "-p", "-1", *profile_args(profile, workdir)]
        async with server_process(args, workdir / "server.log", start_timeout) as (_, target):
            yield target


@asynccontextmanager
async def server_process(
    args: list[str], log: Path, start_timeout: float, env: Mapping[str, str] | None = None
) -> AsyncIterator[tuple[subprocess.Popen[bytes], Target]]:
    """Start ``args`` logging to ``log``, yield the process once it is ready; stop it after.

    The target's store is ``STORE`` beside the log, where ``profile_args`` puts it.
    Rows that need the process itself (its RSS) or restart a server on the store a
    previous one left (start-up time) use this directly (benchmarks/scale.py).
    """
    with log.open("wb") as sink:
        try:
            proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, env=env
            )
        except OSError as exc:
            raise ServerError(f"cannot start {args[0]}: {exc}") from exc
        try:
            url, mqtt_port = await _wait_ready(proc, log, start_timeout)
            yield proc, Target(url, log.parent / STORE, mqtt_port)
        finally:
            _stop(proc)


@asynccontextmanager
async def configured_servers(
    command: list[str], root: Path, configs: Mapping[str, str], start_timeout: float
) -> AsyncIterator[list[tuple[str, Path]]]:
    """One server per entry of ``configs``, named by its key and started with its config
    text; each one's client URL and log once all are ready, all stopped on the way out.

    For rows whose set-up has no flag (leafnode links, a websocket listener): the
    config file is the one contract both servers read alike.
    """
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for name, config in configs.items():
            conf, log = root / f"{name}.conf", root / f"{name}.log"
            conf.write_text(f"server_name: {name}\n{config}")
            with log.open("wb") as sink:
                args = [*command, "-a", "127.0.0.1", "-p", "-1", "-c", str(conf)]
                proc = subprocess.Popen(
                    args, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT
                )
            procs.append((proc, log))
        waits = (_wait_ready(proc, log, start_timeout) for proc, log in procs)
        ready = await asyncio.gather(*waits)
        yield [(url, log) for (url, _), (_, log) in zip(ready, procs, strict=True)]
    finally:
        for proc, _ in procs:
            _stop(proc)
