"""The full resolver, differentially: account JWTs pushed with `nsc push` to a running
cluster, stored in each server's directory, answered on lookup, and applied at once (a
revoked user is cut off within a second)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS
from nats.js.errors import ServiceUnavailableError

from tests.conftest import Connect
from tests.e2e.test_operator_mode import AUTH_VIOLATION, _login, _seed_of, _sign
from tests.support.cluster import (
    ONE_ROUTE_PER_PEER,
    cluster_args,
    free_port,
    stop_all,
    wait_mesh,
)
from tests.support.nsc import Nsc
from tests.support.poll import poll_async
from tests.support.raw import Outcome, RawClient
from tests.support.servers import ServerProcess, start_server


@pytest.fixture
def nsc(tmp_path: Path) -> Nsc:
    nsc = Nsc(tmp_path / "nsc")
    nsc.operator()
    nsc.run("add", "account", "B")
    nsc.run("add", "user", "-a", "B", "alice")
    nsc.run("add", "user", "-a", "B", "mallory")
    return nsc


@pytest.fixture
def pair(server_kind: str, nsc: Nsc, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """Two routed servers, each with a full resolver and its own directory; nsc pushes
    to the first."""
    ports = [free_port(), free_port()]
    servers = []
    try:
        for i in range(2):
            config = nsc.full_config(tmp_path / f"jwt{i}") + ONE_ROUTE_PER_PEER
            config = config.replace("allow_delete: false", "allow_delete: true")
            args = cluster_args(f"S{i}", ports[i], [ports[0]] if i else [])
            servers.append(
                start_server(server_kind, *args, config=config, tmp_path=tmp_path, name=f"S{i}")
            )
        wait_mesh(servers, ["S0", "S1"])
        nsc.run("edit", "operator", "--account-jwt-server-url", servers[0].url)
        yield servers
    finally:
        stop_all(servers)


async def test_push_lookup_and_revocation(
    pair: list[ServerProcess], nsc: Nsc, connect: Connect, tmp_path: Path
) -> None:
    """A JWT pushed to one server of a cluster reaches both, and its revocation cuts off
    a user connected to the other."""
    first, second = pair
    alice = str(nsc.creds("B", "alice"))
    out = nsc.run("push", "-a", "B")
    assert out.count("jwt updated") == 2, out
    account = nsc.public("account", "B")
    for i in range(2):
        stored = (tmp_path / f"jwt{i}" / f"{account}.jwt").read_text().strip()
        assert stored == nsc.account_jwt("B")
    nc = await connect(second, user_credentials=alice)
    assert nc.is_connected
    sys_nc = await connect(first, user_credentials=str(nsc.creds("SYS", "sys")))
    lookup = await sys_nc.request(f"$SYS.REQ.ACCOUNT.{account}.CLAIMS.LOOKUP", b"", timeout=2)
    assert lookup.data.decode() == nsc.account_jwt("B")
    listed = json.loads((await sys_nc.request("$SYS.REQ.CLAIMS.LIST", b"", timeout=2)).data)
    assert account in listed["data"]

    # mallory is connected; revoking her and pushing B cuts her off, alice stays.
    token, seed = nsc.user_jwt("B", "mallory"), _seed_of(nsc.creds("B", "mallory"))
    async with await RawClient.connect(second.host, second.port) as victim:
        fields = {"verbose": False, "jwt": token, "sig": _sign(seed, victim.info["nonce"])}
        connected = await victim.outcome(b"CONNECT " + json.dumps(fields).encode() + b"\r\n")
        assert connected == Outcome((), closed=False)
        nsc.run("revocations", "add-user", "-a", "B", "-n", "mallory")
        loop = asyncio.get_running_loop()
        started = loop.time()
        nsc.run("push", "-a", "B")
        lines = await victim.read_until(rb"^-ERR", timeout=1.0)
        assert lines[-1] == b"-ERR 'User Authentication Revoked'"
        assert loop.time() - started < 1.0 + 0.5  # nsc's own run included
    assert await _login(second, token, seed) == Outcome((AUTH_VIOLATION,), closed=True)
    await nc.flush(timeout=2)
    assert nc.is_connected
    await _bad_updates(sys_nc, nsc)
    closed = asyncio.Event()

    async def on_closed() -> None:
        closed.set()

    await connect(second, user_credentials=alice, closed_cb=on_closed)
    # `nsc push --prune` deletes B from both servers and disconnects its users.
    nsc.run("delete", "account", "B")
    pruned = nsc.run("push", "--prune", "--force")
    assert pruned.count(": deleted ") == 2, pruned
    await asyncio.wait_for(closed.wait(), 2)
    for i in range(2):
        assert (tmp_path / f"jwt{i}" / f"{account}.jwt.deleted").exists()
        assert not (tmp_path / f"jwt{i}" / f"{account}.jwt").exists()


@pytest.mark.soak
async def test_a_server_back_up_catches_up(pair: list[ServerProcess], nsc: Nsc) -> None:
    """While the second server is down, account C is pushed to the first; back up, the
    second gets C from the first, and B from its own directory."""
    second = pair[1]
    assert nsc.run("push", "-a", "B").count("jwt updated") == 2
    await second.stop_async()
    nsc.run("add", "account", "C")
    nsc.run("add", "user", "-a", "C", "carol")
    assert "jwt updated" in nsc.run("push", "-a", "C")
    await second.restart_async()
    alice = (nsc.user_jwt("B", "alice"), _seed_of(nsc.creds("B", "alice")))
    assert await _login(second, *alice) == Outcome((b"+OK",), closed=False)
    carol = (nsc.user_jwt("C", "carol"), _seed_of(nsc.creds("C", "carol")))

    async def logged_in() -> bool:
        return await _login(second, *carol) == Outcome((b"+OK",), closed=False)

    await poll_async(logged_in, "C on the second server", 10, interval=0.1)


async def _bad_updates(sys_nc: NATS, nsc: Nsc) -> None:
    """Updates that are no JWT, or name another account than the subject, are refused."""

    reply = await sys_nc.request("$SYS.REQ.CLAIMS.UPDATE", b"garbage", timeout=2)
    assert json.loads(reply.data)["error"] == {
        "account": "n/a",
        "code": 500,
        "description": "jwt update resulted in error - expected 3 chunks",
    }
    account = nsc.public("account", "SYS")
    other = nsc.account_jwt("B").encode()
    reply = await sys_nc.request(f"$SYS.REQ.ACCOUNT.{account}.CLAIMS.UPDATE", other, timeout=2)
    assert json.loads(reply.data)["error"] == {
        "account": account,
        "code": 500,
        "description": "jwt update resulted in error - subject does not match jwt content",
    }


@pytest.mark.soak
async def test_a_pushed_account_gets_jetstream(
    server_kind: str, nsc: Nsc, connect: Connect, tmp_path: Path
) -> None:
    """An account pushed to a running server with JetStream storage in its JWT can make
    streams at once."""
    config = nsc.full_config(tmp_path / "jwt")
    store = str(tmp_path / "js")
    server = start_server(server_kind, "-js", "-sd", store, config=config, tmp_path=tmp_path)
    try:
        nsc.run("edit", "operator", "--account-jwt-server-url", server.url)
        nsc.run("edit", "account", "B", "--js-mem-storage", "-1", "--js-disk-storage", "-1")
        assert "jwt updated" in nsc.run("push", "-a", "B")
        nc = await connect(server, user_credentials=str(nsc.creds("B", "alice")))
        js = nc.jetstream()
        await poll_async(  # the account's JetStream starts as the JWT arrives
            lambda: js.add_stream(name="PUSHED", subjects=["pushed.>"]),
            "the pushed account's JetStream",
            5,
            interval=0.1,
            retry=ServiceUnavailableError,
        )
        ack = await js.publish("pushed.1", b"x")
        assert (ack.stream, ack.seq) == ("PUSHED", 1)
    finally:
        stop_all([server])
