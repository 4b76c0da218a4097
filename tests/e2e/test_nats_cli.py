"""The standard `nats` CLI (natscli, built into the venv by the set-up) against both servers.

The CLI is a Go client (nats.go) with its own version gates, so passing here is
what "clients connect unchanged" means for Go users, not just for nats-py.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.conftest import MakeServer
from tests.support.poll import poll_async

NATS_CLI = Path(sys.executable).parent / "nats"


async def cli(url: str, *args: str, timeout: float = 20) -> tuple[int, str]:
    """Run the CLI with no saved context, so nothing on the machine leaks into the test."""
    env = {**os.environ, "HOME": os.environ.get("TMPDIR", "/tmp"), "NATS_CONTEXT": ""}
    proc = await asyncio.create_subprocess_exec(
        str(NATS_CLI),
        "--server",
        url,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode or 0, out.decode()


async def until(
    probe: Callable[[], Awaitable[tuple[int, str]]], done: Callable[[str], bool]
) -> str:
    """Repeat a CLI call until its output shows the condition (the peer process is ready)."""

    async def output() -> str:
        return (await probe())[1]

    return await poll_async(output, "the CLI's output ready", 15, until=done)


async def test_cli_pub_sub(make_server: MakeServer) -> None:
    server = make_server()
    sub = asyncio.create_task(cli(server.url, "sub", "cli.>", "--count", "1", "--raw"))
    # Publish until the subscriber, once subscribed, gets one and exits.
    while not sub.done():
        code, out = await cli(server.url, "pub", "cli.a", "hello-from-cli")
        assert code == 0, out
        await asyncio.wait({sub}, timeout=0.2)
    code, out = await sub
    assert code == 0, out
    assert "hello-from-cli" in out


async def test_cli_request_reply(make_server: MakeServer) -> None:
    server = make_server()
    reply = asyncio.create_task(cli(server.url, "reply", "svc.echo", "pong", "--count", "1"))
    out = await until(
        lambda: cli(server.url, "req", "svc.echo", "ping", "--timeout", "1s"),
        lambda out: "pong" in out,
    )
    assert "Received with rtt" in out
    _, served = await reply  # natscli 0.3 exits 1 after --count on either server
    assert 'Received on subject "svc.echo"' in served


async def test_cli_no_responders(make_server: MakeServer) -> None:
    """nats.go sees the 503 status at once: the CLI says so without waiting its timeout."""
    server = make_server()
    started = asyncio.get_running_loop().time()
    _, out = await cli(server.url, "req", "nobody.home", "x", "--timeout", "5s")
    assert "No responders are available" in out
    assert asyncio.get_running_loop().time() - started < 4


async def test_cli_rtt(make_server: MakeServer) -> None:
    server = make_server()
    code, out = await cli(server.url, "rtt")
    assert code == 0, out
    assert "127.0.0.1" in out
