"""A thousand failed logins do not starve the clients that are logged in: a signature is
checked once per CONNECT and a refused connection costs the server nothing after it.

Soak: the storm takes under 1 s on the reference and about 2 s on jetlake. Measured here
(50 bad logins at a time, this machine): the reference's round trip went from a median
0.3 ms to 13 ms (slowest 42 ms); jetlake's from 0.2 ms to 32 ms (slowest 137 ms), the
refusals sharing its one event loop (the ed25519 check is a third of a refusal's cost)."""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import pytest
from nats.aio.msg import Msg

from tests.conftest import Connect, MakeServer
from tests.e2e.test_nkey_auth import ALICE, BOB, CONFIG, STRANGER, public, sign
from tests.support.raw import RawClient
from tests.support.servers import ServerProcess

FAILED_LOGINS = 1000
AT_ONCE = 50


async def _fail_login(server: ServerProcess) -> bytes:
    async with await RawClient.connect(server.host, server.port) as c:
        fields = {"verbose": False, "nkey": public(ALICE), "sig": sign(STRANGER, c.info["nonce"])}
        out = await c.outcome(b"CONNECT " + json.dumps(fields).encode() + b"\r\n")
        return out.lines[0] if out.lines else b""


async def _round_trips(nc: object, stop: asyncio.Event) -> list[float]:
    took = []
    while not stop.is_set():
        started = time.perf_counter()
        await nc.request("echo", b"x", timeout=2)  # type: ignore[attr-defined]
        took.append(time.perf_counter() - started)
    return took


@pytest.mark.soak
async def test_failed_logins_do_not_slow_other_clients(
    make_server: MakeServer, connect: Connect
) -> None:
    server = make_server(config=CONFIG)
    responder = await connect(server, nkeys_seed_str=BOB.decode())

    async def echo(msg: Msg) -> None:
        await msg.respond(msg.data)

    await responder.subscribe("echo", cb=echo)
    await responder.flush()
    client = await connect(server, nkeys_seed_str=BOB.decode())
    quiet_stop = asyncio.Event()
    quiet = asyncio.create_task(_round_trips(client, quiet_stop))
    await asyncio.sleep(1.0)
    quiet_stop.set()
    baseline = statistics.median(await quiet)

    storm_stop = asyncio.Event()
    during = asyncio.create_task(_round_trips(client, storm_stop))
    refused = []
    started = time.perf_counter()
    for start in range(0, FAILED_LOGINS, AT_ONCE):
        batch = [_fail_login(server) for _ in range(min(AT_ONCE, FAILED_LOGINS - start))]
        refused += await asyncio.gather(*batch)
    storm = time.perf_counter() - started
    storm_stop.set()
    took = await during
    assert refused == [b"-ERR 'Authorization Violation'"] * FAILED_LOGINS
    # The logged-in client kept being served: no round trip waited out the storm.
    slowest = max(took)
    print(
        f"{server.kind}: {FAILED_LOGINS} failed logins in {storm:.2f}s; round trip "
        f"median {baseline * 1e3:.2f} ms quiet, {statistics.median(took) * 1e3:.2f} ms "
        f"during, slowest {slowest * 1e3:.1f} ms"
    )
    assert len(took) > 10
    assert slowest < 1.0
