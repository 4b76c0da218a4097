"""A full resolver's `limit`, differentially: the directory holds at most `limit` account
JWTs (the preloaded system account among them); a push of one more account is refused
in the reference's words, while updates of accounts already held still go through."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import Connect
from tests.support.cluster import stop_all
from tests.support.nsc import Nsc
from tests.support.servers import start_server

FULL = {
    "account": "",
    "code": 500,
    "description": "jwt update resulted in error - jwt store is full",
}


async def test_a_full_directory_refuses_new_accounts(
    server_kind: str, connect: Connect, tmp_path: Path
) -> None:
    nsc = Nsc(tmp_path / "nsc")
    nsc.operator()
    for account in ("B", "C"):
        nsc.run("add", "account", account)
    nsc.run("add", "user", "-a", "B", "alice")
    directory = tmp_path / "jwt"
    config = nsc.full_config(directory).replace("type: full", "type: full\n    limit: 2")
    assert "limit: 2" in config
    server = start_server(server_kind, config=config, tmp_path=tmp_path)
    try:
        sys_nc = await connect(server, user_credentials=str(nsc.creds("SYS", "sys")))

        async def push(account: str) -> dict[str, object]:
            token = nsc.account_jwt(account).encode()
            reply = await sys_nc.request("$SYS.REQ.CLAIMS.UPDATE", token, timeout=2)
            return dict(json.loads(reply.data))

        b, c = nsc.public("account", "B"), nsc.public("account", "C")
        assert (await push("B"))["data"]["message"] == "jwt updated"  # type: ignore[index]
        assert (await push("C"))["error"] == {**FULL, "account": c}
        assert not (directory / f"{c}.jwt").exists()
        # B is held: a new version of it is still taken, and its users log in.
        nsc.run("edit", "account", "B", "--conns", "5")
        assert (await push("B"))["data"]["message"] == "jwt updated"  # type: ignore[index]
        assert (directory / f"{b}.jwt").read_text().strip() == nsc.account_jwt("B")
        nc = await connect(server, user_credentials=str(nsc.creds("B", "alice")))
        assert nc.is_connected
    finally:
        stop_all([server])
    assert "jwt store is full" in server.log_path.read_text()
