"""`$SYS.REQ.CLAIMS.PACK`, differentially: a full resolver answers a pack request with
every JWT it holds, one `<account>|<jwt>` per message and an empty message to end,
unless the request carries the digest of exactly what it holds (the XOR of the JWTs'
SHA-256 sums), when it answers only the empty message."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.conftest import Connect, MakeServer
from tests.support.cluster import ONE_ROUTE_PER_PEER, cluster_args, free_port, stop_all, wait_mesh
from tests.support.nsc import Nsc
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess, start_server


async def test_a_pack_holds_every_jwt_unless_the_digest_matches(
    make_server: MakeServer, connect: Connect, tmp_path: Path
) -> None:
    nsc = Nsc(tmp_path / "nsc")
    nsc.operator()
    nsc.run("add", "account", "B")
    (tmp_path / "jwt").mkdir()
    b_key = nsc.public("account", "B")
    (tmp_path / "jwt" / f"{b_key}.jwt").write_text(nsc.account_jwt("B"))
    server = make_server(config=nsc.full_config(tmp_path / "jwt"))
    sys_nc = await connect(server, user_credentials=str(nsc.creds("SYS", "sys")))
    held = {nsc.public("account", name): nsc.account_jwt(name) for name in ("SYS", "B")}

    async def pack(digest: bytes) -> list[bytes]:
        inbox = sys_nc.new_inbox()
        sub = await sys_nc.subscribe(inbox)
        await sys_nc.publish("$SYS.REQ.CLAIMS.PACK", digest, reply=inbox)
        answers = []
        while not answers or answers[-1]:
            answers.append((await sub.next_msg(timeout=2)).data)
        await sub.unsubscribe()
        return answers

    answers = await pack(bytes(32))
    lines = {line.decode() for line in answers[:-1]}
    assert lines == {f"{account}|{token}" for account, token in held.items()}
    value = 0
    for token in held.values():
        value ^= int.from_bytes(hashlib.sha256(token.encode()).digest(), "big")
    assert await pack(value.to_bytes(32, "big")) == [b""]


@pytest.mark.soak
async def test_a_server_back_up_gets_what_was_pushed_without_a_login(
    server_kind: str, connect: Connect, tmp_path: Path
) -> None:
    """A JWT pushed while one server was down reaches that server's directory once it is
    back (within the `interval` of the exchange), with no user logging in."""
    nsc = Nsc(tmp_path / "nsc")
    nsc.operator()
    nsc.run("add", "account", "C")
    ports = [free_port(), free_port()]
    servers: list[ServerProcess] = []
    try:
        for i in range(2):
            config = nsc.full_config(tmp_path / f"jwt{i}").replace('"2m"', '"1s"')
            args = cluster_args(f"S{i}", ports[i], [ports[1 - i]])
            servers.append(
                start_server(
                    server_kind,
                    *args,
                    config=config + ONE_ROUTE_PER_PEER,
                    tmp_path=tmp_path,
                    name=f"S{i}",
                )
            )
        wait_mesh(servers, ["S0", "S1"])
        await servers[1].stop_async()
        sys_nc = await connect(servers[0], user_credentials=str(nsc.creds("SYS", "sys")))
        reply = await sys_nc.request("$SYS.REQ.CLAIMS.UPDATE", nsc.account_jwt("C").encode())
        assert b"jwt updated" in reply.data
        await servers[1].restart_async()
        stored = tmp_path / "jwt1" / f"{nsc.public('account', 'C')}.jwt"
        await poll_async(stored.exists, servers[1].log, 15, interval=0.2)
        assert stored.read_text().strip() == nsc.account_jwt("C")
    finally:
        stop_all(servers)
