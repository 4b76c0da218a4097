"""Workloads driven by natscli's own `nats bench` (Go).

nats-py is slower than either server, so the nats-py rows measure the client; a Go
client is what shows whether the server keeps up. Each workload runs the CLI as a
subprocess and takes the rate it prints, so both servers are judged by the same
figures a user sees. The stream for the JetStream rows is made with `nats stream
add` first rather than `--create`, which needs a newer JetStream API level.
``replicas`` makes the same workloads the cluster rows' (benchmarks/cluster/rows.py).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Protocol

from benchmarks.model import Incomplete, Params, Skipped

STREAM = "benchstream"  # natscli's default stream and bucket names
SUBJECT = "benchsubject"
KV_STREAM = "KV_benchbucket"  # the stream behind natscli's default bucket
STATS = re.compile(rb"stats: ([\d,]+) msgs/sec")
READY_SUB = b"Starting Core NATS subscriber, expecting"
READY_SERVE = b"Starting Core NATS service server"
OUTPUT_TAIL = 600


# The URL of the server that leads the named stream (the cluster rows' `leader_url`).
Lead = Callable[[str], Awaitable[str]]


class Replicated(Protocol):
    """A JetStream workload whose stream (or bucket) has ``replicas`` copies; with
    ``lead``, the measured CLI runs on the server that leads it."""

    def __call__(
        self, url: str, p: Params, *, replicas: int, lead: Lead | None = None
    ) -> Awaitable[dict[str, float]]: ...


async def _on_leader(url: str, lead: Lead | None, stream: str) -> str:
    """Where the measured CLI runs once ``stream`` exists: its leader's server when the
    cluster rows ask for it, else ``url``."""
    return url if lead is None else await lead(stream)


def _cli() -> str:
    """The natscli the Makefile builds into the venv, else one on PATH."""
    beside = Path(sys.executable).parent / "nats"
    found = str(beside) if beside.exists() else shutil.which("nats")
    if found is None:
        raise Skipped("natscli not found (make installs it as .venv/bin/nats)")
    return found


def _args(url: str, p: Params, *rest: str) -> list[str]:
    return [_cli(), "--no-context", "-s", url, *rest, "--no-progress", f"--size={p.size}"]


def _name(args: list[str]) -> str:
    """The CLI command an argument list runs, for error messages: `nats bench js pub`."""
    return " ".join(["nats", *args[4:7]])


@asynccontextmanager
async def _process(args: list[str]) -> AsyncIterator[asyncio.subprocess.Process]:
    """A CLI process killed on the way out, so a timed-out workload leaves nothing behind."""
    proc = await asyncio.create_subprocess_exec(
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _output(proc: asyncio.subprocess.Process, args: list[str]) -> bytes:
    """All the process wrote; ``Incomplete`` with its last lines when it failed."""
    assert proc.stdout is not None
    out = await proc.stdout.read()
    if await proc.wait() != 0:
        tail = out[-OUTPUT_TAIL:].decode(errors="replace").strip()
        raise Incomplete(f"{_name(args)} exited with {proc.returncode}: {tail}")
    return out


async def _run(args: list[str]) -> bytes:
    async with _process(args) as proc:
        return await _output(proc, args)


def _rate(out: bytes, args: list[str]) -> float:
    """The aggregate rate natscli prints (the last stats line: per-client lines come first)."""
    found = STATS.findall(out)
    if not found:
        raise Incomplete(f"no rate in the output of {_name(args)}")
    return float(found[-1].replace(b",", b""))


async def _measure(args: list[str]) -> dict[str, float]:
    return {"msgs_per_s": _rate(await _run(args), args)}


async def _wait_for(proc: asyncio.subprocess.Process, args: list[str], marker: bytes) -> bytes:
    """Read the process's output up to the line that says it is subscribed."""
    assert proc.stdout is not None
    seen = b""
    while marker not in seen:
        line = await proc.stdout.readline()
        if not line:
            tail = seen[-OUTPUT_TAIL:].decode(errors="replace").strip()
            raise Incomplete(f"{_name(args)} exited before it was ready: {tail}")
        seen += line
    return seen


async def publish(url: str, p: Params) -> dict[str, float]:
    """`nats bench pub`: ``count`` core messages with no subscriber."""
    return await _measure(_args(url, p, "bench", "pub", SUBJECT, f"--msgs={p.count}"))


async def pub_sub(url: str, p: Params) -> dict[str, float]:
    """`nats bench sub` receiving what `nats bench pub` sends: the subscriber's rate."""
    sub_args = _args(url, p, "bench", "sub", SUBJECT, f"--msgs={p.count}")
    async with _process(sub_args) as sub:
        seen = await _wait_for(sub, sub_args, READY_SUB)
        await _run(_args(url, p, "bench", "pub", SUBJECT, f"--msgs={p.count}"))
        return {"msgs_per_s": _rate(seen + await _output(sub, sub_args), sub_args)}


async def service(url: str, p: Params) -> dict[str, float]:
    """`nats bench service request` against `nats bench service serve`: ``requests`` in turn."""
    serve_args = _args(url, p, "bench", "service", "serve", SUBJECT)
    async with _process(serve_args) as server:
        await _wait_for(server, serve_args, READY_SERVE)
        return await _measure(
            _args(url, p, "bench", "service", "request", SUBJECT, f"--msgs={p.requests}")
        )


async def _with_stream(url: str, p: Params, replicas: int) -> None:
    """A file stream with natscli's defaults; ``Skipped`` when the server has no JetStream."""
    args = [
        _cli(),
        "--no-context",
        "-s",
        url,
        "stream",
        "add",
        STREAM,
        f"--subjects={SUBJECT}",
        "--storage=file",
        f"--replicas={replicas}",
        "--defaults",
    ]
    async with _process(args) as proc:
        assert proc.stdout is not None
        out = await proc.stdout.read()
        if await proc.wait() != 0:
            raise Skipped(f"nats stream add failed: {out[-OUTPUT_TAIL:].decode(errors='replace')}")


async def _fill(url: str, p: Params, replicas: int, lead: Lead | None) -> str:
    """The stream made and ``count`` messages stored; the URL the reader runs on."""
    await _with_stream(url, p, replicas)
    url = await _on_leader(url, lead, STREAM)
    await _run(_args(url, p, "bench", "js", "pub", "async", SUBJECT, f"--msgs={p.count}"))
    return url


async def js_pub_async(
    url: str, p: Params, *, replicas: int = 1, lead: Lead | None = None
) -> dict[str, float]:
    """`nats bench js pub async`: ``count`` publishes, 500 acks outstanding (natscli's batch)."""
    await _with_stream(url, p, replicas)
    url = await _on_leader(url, lead, STREAM)
    return await _measure(
        _args(url, p, "bench", "js", "pub", "async", SUBJECT, f"--msgs={p.count}")
    )


async def js_pub_sync(
    url: str, p: Params, *, replicas: int = 1, lead: Lead | None = None
) -> dict[str, float]:
    """`nats bench js pub sync`: ``sync_count`` publishes, each waiting for its ack."""
    await _with_stream(url, p, replicas)
    url = await _on_leader(url, lead, STREAM)
    return await _measure(
        _args(url, p, "bench", "js", "pub", "sync", SUBJECT, f"--msgs={p.sync_count}")
    )


async def js_fetch(
    url: str, p: Params, *, replicas: int = 1, lead: Lead | None = None
) -> dict[str, float]:
    """`nats bench js fetch`: a durable pull consumer drains the ``count`` stored messages."""
    url = await _fill(url, p, replicas, lead)
    return await _measure(_args(url, p, "bench", "js", "fetch", f"--msgs={p.count}"))


async def js_ordered(
    url: str, p: Params, *, replicas: int = 1, lead: Lead | None = None
) -> dict[str, float]:
    """`nats bench js ordered`: an ordered consumer reads the ``count`` stored messages."""
    url = await _fill(url, p, replicas, lead)
    return await _measure(_args(url, p, "bench", "js", "ordered", f"--msgs={p.count}"))


async def kv_put(
    url: str, p: Params, *, replicas: int = 1, lead: Lead | None = None
) -> dict[str, float]:
    """`nats bench kv put`: ``sync_count`` puts, each waiting for its ack. The CLI makes
    the bucket; with ``lead`` a first put of one makes it, and the measured run takes
    the same bucket (an identical create is no change) on its leader's server."""
    bucket = ("bench", "kv", "put", f"--replicas={replicas}")
    if lead is not None:
        await _run(_args(url, p, *bucket, "--msgs=1"))
        url = await lead(KV_STREAM)
    return await _measure(_args(url, p, *bucket, f"--msgs={p.sync_count}"))
