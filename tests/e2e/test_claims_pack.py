"""`$SYS.REQ.CLAIMS.PACK`, differentially: a full resolver answers a pack request with
every JWT it holds, one `<account>|<jwt>` per message and an empty message to end,
unless the request carries the digest of exactly what it holds (the XOR of the JWTs'
SHA-256 sums), when it answers only the empty message."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.conftest import Connect, MakeServer
from tests.support.nsc import Nsc


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
