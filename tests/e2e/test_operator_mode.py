"""Operator mode with the memory resolver, differentially: an operator, its accounts and
users issued with `nsc`, users logging in with `.creds` (nats-py `user_credentials=`,
natscli `--creds`), and every kind of bad JWT refused with the reference's error.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import nkeys
import pytest
from nats.js.errors import BadRequestError, ServiceUnavailableError

from tests.conftest import Connect, ServerPool
from tests.e2e.test_core_auth import AUTH_VIOLATION, expect_auth_failure
from tests.e2e.test_nats_cli import cli
from tests.e2e.test_nkey_auth import logged_once_more
from tests.support.nsc import Nsc, creds_file, mint_user
from tests.support.poll import poll_async
from tests.support.raw import Outcome, RawClient
from tests.support.servers import ServerProcess

_LOGGED = re.compile(re.escape("authentication error") + "$", re.M)


@dataclass
class Keystore:
    nsc: Nsc
    config: str
    account: str  # account A's public key
    account_seed: bytes
    signing_seed: bytes  # A's unscoped signing key
    scoped: str  # A's scoped signing key (role dev)
    files: Path


@pytest.fixture(scope="module")
def keystore(tmp_path_factory: pytest.TempPathFactory) -> Keystore:
    home = tmp_path_factory.mktemp("nsc")
    nsc = Nsc(home)
    nsc.operator()
    nsc.run("add", "account", "A")
    account = nsc.public("account", "A")
    nsc.run("edit", "account", "A", "--sk", "generate")
    nsc.run("edit", "account", "A", "--sk", "generate")
    signing, scoped = nsc.describe("account", "A")["nats"]["signing_keys"]
    nsc.run("edit", "signing-key", "-a", "A", "--sk", scoped, "--role", "dev")
    nsc.run("edit", "signing-key", "-a", "A", "--sk", scoped, "--allow-pub", "{{name()}}.>")
    nsc.run("add", "user", "-a", "A", "plain")
    nsc.run("add", "user", "-a", "A", "limited", "--allow-pub", "foo.>", "--allow-sub", "_INBOX.>")
    nsc.run("edit", "user", "-a", "A", "limited", "--allow-pub", "$SYS.REQ.USER.INFO")
    nsc.run("add", "user", "-a", "A", "bearer", "--bearer")
    nsc.run("add", "user", "-a", "A", "websocket")
    nsc.run("edit", "user", "-a", "A", "websocket", "--conn-type", "WEBSOCKET")
    nsc.run("add", "user", "-a", "A", "by_signing_key", "-K", signing)
    nsc.run("add", "user", "-a", "A", "dev1", "-K", "dev")
    nsc.run("add", "user", "-a", "A", "revoked")
    nsc.run("revocations", "add-user", "-a", "A", "-n", "revoked")
    nsc.run("add", "user", "-a", "A", "local", "--source-network", "127.0.0.0/8")
    nsc.run("add", "user", "-a", "A", "elsewhere", "--source-network", "192.0.2.0/24")
    nsc.run("add", "user", "-a", "A", "capped")
    nsc.run("edit", "user", "-a", "A", "capped", "--subs", "1", "--payload", "64")
    nsc.run("add", "account", "L")
    nsc.run("edit", "account", "L", "--conns", "1", "--payload", "64", "--subscriptions", "1")
    nsc.run("add", "user", "-a", "L", "limited_user")
    nsc.run("add", "account", "J")
    nsc.run("edit", "account", "J", "--js-mem-storage", "-1", "--js-disk-storage", "-1")
    nsc.run("edit", "account", "J", "--js-streams", "1")
    nsc.run("add", "user", "-a", "J", "streamer")
    return Keystore(
        nsc=nsc,
        config=nsc.memory_config(),
        account=account,
        account_seed=nsc.seed(account),
        signing_seed=nsc.seed(signing),
        scoped=scoped,
        files=home,
    )


@pytest.fixture
def op_server(server_kind: str, server_pool: ServerPool, keystore: Keystore) -> ServerProcess:
    """Shared by the module (logins and expiries change no server state); JetStream on,
    for the accounts whose JWT allows it."""
    store = str(keystore.files / f"js-{server_kind}")
    return server_pool.get(server_kind, "-js", "-sd", store, config=keystore.config)


def _sign(seed: bytes, nonce: str) -> str:
    return base64.urlsafe_b64encode(nkeys.from_seed(seed).sign(nonce.encode())).decode().rstrip("=")


async def _login(
    server: ServerProcess, token: str, seed: bytes | None, *, nonce: str | None = None
) -> Outcome:
    """A raw CONNECT with `token`, the nonce signed by `seed` (None: no signature)."""
    async with await RawClient.connect(server.host, server.port) as c:
        fields: dict[str, object] = {"verbose": True, "jwt": token}
        if seed is not None:
            fields["sig"] = _sign(seed, nonce if nonce is not None else c.info["nonce"])
        return await c.outcome(b"CONNECT " + json.dumps(fields).encode() + b"\r\n")


def _seed_of(creds: Path) -> bytes:
    lines = creds.read_text().splitlines()
    return next(line for line in lines if line.startswith("SU")).encode()


async def test_creds_login_binds_the_account(
    op_server: ServerProcess, keystore: Keystore, connect: Connect
) -> None:
    nc = await connect(op_server, user_credentials=str(keystore.nsc.creds("A", "plain")))
    assert nc._server_info["nonce"]
    sub = await nc.subscribe("hello")
    await nc.publish("hello", b"world")
    assert (await sub.next_msg(timeout=2)).data == b"world"
    info = json.loads((await nc.request("$SYS.REQ.USER.INFO", b"", timeout=2)).data)["data"]
    assert info["account"] == keystore.account
    assert info["user"] == keystore.nsc.public("user", "-a", "A", "-n", "plain")


async def test_user_permissions_from_the_jwt(
    op_server: ServerProcess, keystore: Keystore, connect: Connect
) -> None:
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    creds = str(keystore.nsc.creds("A", "limited"))
    nc = await connect(op_server, user_credentials=creds, error_cb=on_error)
    info = json.loads((await nc.request("$SYS.REQ.USER.INFO", b"", timeout=2)).data)["data"]
    assert sorted(info["permissions"]["publish"]["allow"]) == ["$SYS.REQ.USER.INFO", "foo.>"]
    await nc.publish("bar", b"x")
    await nc.flush()
    await poll_async(lambda: bool(errors), "the permissions violation reported", 3)
    assert 'permissions violation for publish to "bar"' in str(errors[0]).lower()


async def test_natscli_creds(op_server: ServerProcess, keystore: Keystore) -> None:
    code, out = await cli(
        op_server.url, "--creds", str(keystore.nsc.creds("A", "plain")), "pub", "x", "y"
    )
    assert code == 0, out
    garbage = keystore.files / "garbage.creds"
    garbage.write_text("-----BEGIN NATS USER JWT-----\nnot.a.jwt\n------END NATS USER JWT------\n")
    code, out = await cli(op_server.url, "--creds", str(garbage), "pub", "x", "y")
    assert code != 0


async def test_source_network(op_server: ServerProcess, keystore: Keystore) -> None:
    token, seed = keystore.nsc.user_jwt("A", "local"), _seed_of(keystore.nsc.creds("A", "local"))
    assert await _login(op_server, token, seed) == Outcome((b"+OK",), closed=False)


async def test_bearer_token_needs_no_signature(
    op_server: ServerProcess, keystore: Keystore
) -> None:
    token = keystore.nsc.user_jwt("A", "bearer")
    assert await _login(op_server, token, None) == Outcome((b"+OK",), closed=False)
    plain = keystore.nsc.user_jwt("A", "plain")
    assert await _login(op_server, plain, None) == Outcome((AUTH_VIOLATION,), closed=True)


async def test_signing_keys(op_server: ServerProcess, keystore: Keystore, connect: Connect) -> None:
    """A user issued by a signing key logs in; one issued by a scoped key gets the
    scope's permissions, `{{name()}}` filled in."""
    nc = await connect(op_server, user_credentials=str(keystore.nsc.creds("A", "by_signing_key")))
    assert nc.is_connected
    errors: list[Exception] = []

    async def on_error(exc: Exception) -> None:
        errors.append(exc)

    # Subscribed before the publisher connects: in operator mode the reference now
    # and then (1 run in 5 to 40) never delivers a new nats-py connection's first
    # publish to a subscription made after that connection was up.
    watcher = await nc.subscribe("dev1.>")
    await nc.flush()
    dev = await connect(
        op_server, user_credentials=str(keystore.nsc.creds("A", "dev1")), error_cb=on_error
    )
    await dev.publish("dev1.x", b"mine")
    assert (await watcher.next_msg(timeout=2)).data == b"mine"
    await dev.publish("other", b"x")
    await dev.flush()
    await poll_async(lambda: bool(errors), "the permissions violation reported", 3)
    assert 'publish to "other"' in str(errors[0]).lower()


def _forged(keystore: Keystore) -> tuple[str, bytes]:
    """A user JWT claiming account A, signed by a key A never named."""
    stranger = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_ACCOUNT)
    return mint_user(stranger, issuer_account=keystore.account)


def _tampered(keystore: Keystore) -> tuple[str, bytes]:
    """A genuine JWT whose claims were edited after signing (a bearer flag added)."""
    token = keystore.nsc.user_jwt("A", "plain")
    head, body, sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["nats"]["bearer_token"] = True
    raw = json.dumps(claims, separators=(",", ":")).encode()
    forged_body = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return f"{head}.{forged_body}.{sig}", _seed_of(keystore.nsc.creds("A", "plain"))


def _unknown_account(keystore: Keystore) -> tuple[str, bytes]:
    return mint_user(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_ACCOUNT))


REFUSED = {
    "revoked": lambda k: (k.nsc.user_jwt("A", "revoked"), _seed_of(k.nsc.creds("A", "revoked"))),
    "expired": lambda k: mint_user(k.account_seed, exp=int(time.time()) - 5),
    "not yet valid": lambda k: mint_user(k.account_seed, nbf=int(time.time()) + 3600),
    "forged issuer": _forged,
    "tampered claims": _tampered,
    "unknown account": _unknown_account,
    "websocket only": lambda k: (
        k.nsc.user_jwt("A", "websocket"),
        _seed_of(k.nsc.creds("A", "websocket")),
    ),
    "outside its source network": lambda k: (
        k.nsc.user_jwt("A", "elsewhere"),
        _seed_of(k.nsc.creds("A", "elsewhere")),
    ),
    "other user's seed": lambda k: (
        k.nsc.user_jwt("A", "plain"),
        _seed_of(k.nsc.creds("A", "bearer")),
    ),
    "account JWT as user": lambda k: (k.nsc.account_jwt("A"), k.account_seed),
    "garbage": lambda k: ("eyJ.garbage.jwt", _seed_of(k.nsc.creds("A", "plain"))),
    "scoped user with own permissions": lambda k: mint_user(
        k.nsc.seed(k.scoped), issuer_account=k.account, pub={"allow": [">"]}
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_refused_jwts(op_server: ServerProcess, keystore: Keystore, case: str) -> None:
    """Each refused with the reference's -ERR, and logged as it logs them."""
    token, seed = REFUSED[case](keystore)
    before = len(_LOGGED.findall(op_server.log()))
    got = await _login(op_server, token, seed)
    assert got == Outcome((AUTH_VIOLATION,), closed=True)
    await logged_once_more(op_server, "authentication error", before)


async def test_signature_over_another_nonce(op_server: ServerProcess, keystore: Keystore) -> None:
    token, seed = keystore.nsc.user_jwt("A", "plain"), _seed_of(keystore.nsc.creds("A", "plain"))
    got = await _login(op_server, token, seed, nonce="AAAAAAAAAAAAAAA")
    assert got == Outcome((AUTH_VIOLATION,), closed=True)


async def test_garbage_creds_file(op_server: ServerProcess, keystore: Keystore) -> None:
    token, seed = mint_user(keystore.account_seed)
    path = creds_file(keystore.files / "broken.creds", token[: len(token) // 2], seed)
    await expect_auth_failure(op_server, user_credentials=str(path))
    await expect_auth_failure(op_server)  # no credentials at all


async def test_expiry_cuts_the_client_off(op_server: ServerProcess, keystore: Keystore) -> None:
    """A JWT that expires while its client is connected ends the connection then."""
    token, seed = mint_user(keystore.account_seed, exp=int(time.time()) + 3)
    async with await RawClient.connect(op_server.host, op_server.port) as c:
        fields = {"verbose": False, "jwt": token, "sig": _sign(seed, c.info["nonce"])}
        assert await c.outcome(b"CONNECT " + json.dumps(fields).encode() + b"\r\n") == Outcome(
            (), closed=False
        )
        lines = await c.read_until(rb"^-ERR", timeout=5)
        assert lines[-1] == b"-ERR 'User Authentication Expired'"


@pytest.mark.parametrize("holder", ["account", "user"])
async def test_jwt_limits(op_server: ServerProcess, keystore: Keystore, holder: str) -> None:
    """The account JWT's connection, subscription and payload limits, and a user JWT's
    own subscription and payload limits, with the reference's errors."""
    account, user = ("L", "limited_user") if holder == "account" else ("A", "capped")
    creds = keystore.nsc.creds(account, user)
    token, seed = keystore.nsc.user_jwt(account, user), _seed_of(creds)
    async with await RawClient.connect(op_server.host, op_server.port) as c:
        fields = {"verbose": False, "jwt": token, "sig": _sign(seed, c.info["nonce"])}
        login = b"CONNECT " + json.dumps(fields).encode() + b"\r\n"
        assert await c.outcome(login + b"SUB a 1\r\n") == Outcome((), closed=False)
        refused = Outcome((b"-ERR 'maximum subscriptions exceeded'",), closed=False)
        assert await c.outcome(b"SUB b 2\r\n") == refused
        if holder == "account":  # a second connection of the account is one too many
            second = Outcome((b"-ERR 'maximum account active connections exceeded'",), closed=True)
            assert await _login(op_server, token, seed) == second
        too_big = b"PUB a 65\r\n" + b"x" * 65 + b"\r\n"
        assert await c.outcome(too_big) == Outcome(
            (b"-ERR 'Maximum Payload Violation'",), closed=True
        )


async def test_jetstream_where_the_account_jwt_allows_it(
    op_server: ServerProcess, keystore: Keystore, connect: Connect
) -> None:
    nc = await connect(op_server, user_credentials=str(keystore.nsc.creds("J", "streamer")))
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    ack = await js.publish("orders.1", b"x")
    assert (ack.stream, ack.seq) == ("ORDERS", 1)
    with pytest.raises(BadRequestError) as refused:  # --js-streams 1
        await js.add_stream(name="MORE", subjects=["more.>"])
    assert refused.value.err_code == 10027
    other = await connect(op_server, user_credentials=str(keystore.nsc.creds("A", "plain")))
    with pytest.raises(ServiceUnavailableError) as disabled:
        await other.jetstream().account_info()
    assert disabled.value.err_code == 10039
