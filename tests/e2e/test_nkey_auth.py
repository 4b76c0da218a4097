"""nkey users, differentially: the server sends a nonce in INFO, the client signs it
with its seed, and only a valid ed25519 signature of that nonce by a configured key
logs in. nats-py (`nkeys_seed=`), natscli (`--nkey`) and a raw socket are the clients.
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path

import nkeys
import pytest

from tests.conftest import Connect, ServerPool
from tests.e2e.test_core_auth import AUTH_VIOLATION, expect_auth_failure
from tests.e2e.test_nats_cli import cli
from tests.support.poll import poll_async
from tests.support.raw import Outcome, RawClient
from tests.support.servers import ServerProcess


def _user_seed() -> bytes:
    return nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)


ALICE, BOB, STRANGER = _user_seed(), _user_seed(), _user_seed()


def public(seed: bytes) -> str:
    return nkeys.from_seed(seed).public_key.decode()


def sign(seed: bytes, nonce: str) -> str:
    """The signature as clients send it: base64url without padding."""
    text = base64.urlsafe_b64encode(nkeys.from_seed(seed).sign(nonce.encode())).decode()
    return text.rstrip("=")


def sign_std(seed: bytes, nonce: str) -> str:
    return base64.b64encode(nkeys.from_seed(seed).sign(nonce.encode())).decode()


CONFIG = f"""
authorization {{
  users: [
    {{ nkey: {public(ALICE)}, permissions: {{ publish: ["allowed.>", "$SYS.REQ.USER.INFO"] }} }}
  ]
}}
accounts {{
  TEAM {{ users: [ {{ nkey: {public(BOB)} }} ] }}
}}
"""


@pytest.fixture
def nkey_server(server_kind: str, server_pool: ServerPool) -> ServerProcess:
    """Shared by the module: logins do not change the server."""
    return server_pool.get(server_kind, config=CONFIG)


async def logged_once_more(server: ServerProcess, line: str, before: int) -> None:
    """Wait until `line` ends one more log line than the `before` counted earlier."""
    pattern = re.compile(re.escape(line) + "$", re.M)
    await poll_async(lambda: len(pattern.findall(server.log())) > before, f"{line!r} logged", 5)


async def _attempt(server: ServerProcess, connect: dict[str, object]) -> tuple[dict, Outcome]:
    async with await RawClient.connect(server.host, server.port) as c:
        fields = {"verbose": True, **connect}
        if callable(fields.get("sig")):
            fields["sig"] = fields["sig"](c.info["nonce"])  # type: ignore[operator]
        return c.info, await c.outcome(b"CONNECT " + json.dumps(fields).encode() + b"\r\n")


async def test_signed_nonce_logs_in_and_permissions_apply(
    nkey_server: ServerProcess, connect: Connect
) -> None:
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    nc = await connect(nkey_server, nkeys_seed_str=ALICE.decode(), error_cb=on_error)
    sub = await nc.subscribe("allowed.x")
    await nc.publish("allowed.x", b"yes")
    await nc.publish("denied", b"no")
    msg = await sub.next_msg(timeout=2)
    assert msg.data == b"yes"
    await nc.flush()
    await poll_async(lambda: bool(errors), "the permissions violation reported", 2)
    assert 'permissions violation for publish to "denied"' in str(errors[0]).lower()
    info = await nc.request("$SYS.REQ.USER.INFO", b"", timeout=2)
    data = json.loads(info.data)["data"]
    assert (data["user"], data["account"]) == (public(ALICE), "$G")


async def test_nkey_user_of_an_account(nkey_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(nkey_server, nkeys_seed_str=BOB.decode())
    info = json.loads((await nc.request("$SYS.REQ.USER.INFO", b"", timeout=2)).data)
    assert (info["data"]["user"], info["data"]["account"]) == (public(BOB), "TEAM")


async def test_natscli_nkey(nkey_server: ServerProcess, tmp_path: Path) -> None:
    good, bad = tmp_path / "good.nk", tmp_path / "bad.nk"
    good.write_bytes(ALICE)
    bad.write_bytes(STRANGER)
    code, out = await cli(nkey_server.url, "--nkey", str(good), "pub", "allowed.cli", "x")
    assert code == 0, out
    code, out = await cli(nkey_server.url, "--nkey", str(bad), "pub", "allowed.cli", "x")
    assert code != 0
    assert "Authorization Violation" in out


# Ids are the case names: the keys are made per run, and pytest-xdist needs every worker
# to collect the same ids.
WIRE_CASES: list[tuple[str, dict[str, object], str | None]] = [
    ("good", {"nkey": public(ALICE), "sig": lambda n: sign(ALICE, n)}, None),
    ("standard base64", {"nkey": public(ALICE), "sig": lambda n: sign_std(ALICE, n)}, None),
    ("other key", {"nkey": public(ALICE), "sig": lambda n: sign(STRANGER, n)}, public(ALICE)),
    (
        "wrong nonce",
        {"nkey": public(ALICE), "sig": lambda n: sign(ALICE, n[::-1])},
        public(ALICE),
    ),
    ("garbage sig", {"nkey": public(ALICE), "sig": "!!not base64!!"}, public(ALICE)),
    ("no sig", {"nkey": public(ALICE)}, public(ALICE)),
    (
        "unknown key",
        {"nkey": public(STRANGER), "sig": lambda n: sign(STRANGER, n)},
        public(STRANGER),
    ),
    ("not a key", {"nkey": "UBAD", "sig": "AAAA"}, "UBAD"),
    ("no credentials", {}, ""),
]


@pytest.mark.parametrize(("case", "connect", "who"), WIRE_CASES, ids=[c[0] for c in WIRE_CASES])
async def test_wire_outcomes(
    nkey_server: ServerProcess, case: str, connect: dict[str, object], who: str | None
) -> None:
    """Every bad signature is the same Authorization Violation, logged naming the key."""
    suffix = f' - Nkey "{who}"' if who else ""
    line = f"authentication error{suffix}"
    before = len(re.findall(re.escape(line) + "$", nkey_server.log(), re.M))
    info, got = await _attempt(nkey_server, connect)
    assert info["auth_required"] is True
    assert len(info["nonce"]) == 15  # 11 random bytes, base64url without padding
    if who is None:
        assert got == Outcome((b"+OK",), closed=False)
        return
    assert got == Outcome((AUTH_VIOLATION,), closed=True)
    await logged_once_more(nkey_server, line, before)


async def test_each_connection_gets_its_own_nonce(nkey_server: ServerProcess) -> None:
    nonces = set()
    for _ in range(3):
        async with await RawClient.connect(nkey_server.host, nkey_server.port) as c:
            nonces.add(c.info["nonce"])
    assert len(nonces) == 3


async def test_nats_py_refused_with_a_foreign_seed(nkey_server: ServerProcess) -> None:
    await expect_auth_failure(nkey_server, nkeys_seed_str=STRANGER.decode())
