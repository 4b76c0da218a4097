"""An account JWT's exports and imports, differentially: accounts issued with `nsc add
export` / `nsc add import` (public and private with activation tokens, service and
stream, `local_subject`, response types, latency), pushed to a full resolver; imports
added and removed at run time; forged, misdirected and expired tokens refused as the
reference refuses them; and nothing of the importer leaks to the exporter through a
service's reply.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys
import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import NoRespondersError, TimeoutError

from tests.conftest import Connect, ServerPool
from tests.e2e.test_nats_cli import cli
from tests.support.nsc import Nsc, encode_jwt
from tests.support.servers import ServerProcess


@dataclass
class Store:
    nsc: Nsc
    home: Path
    keys: dict[str, str]  # account name → public key


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    home = tmp_path_factory.mktemp("nsc-sharing")
    nsc = Nsc(home)
    nsc.operator()
    for name in ("A", "B", "C", "D", "E", "F"):
        nsc.run("add", "account", name)
        nsc.run("add", "user", "-a", name, name.lower())
    keys = {name: nsc.public("account", name) for name in "ABCDEF"}
    nsc.run("edit", "account", "A", "--sk", "generate")
    add_export = ("add", "export", "-a", "A", "--subject")
    nsc.run(*add_export, "svc.pub", "--service", "--response-type", "Stream")
    latency = ("--latency", "lat.svc", "--sampling", "100")
    nsc.run(*add_export, "svc.priv.>", "--service", "--private", *latency)
    nsc.run(*add_export, "events.>")
    nsc.run(*add_export, "secret.>", "--private")
    add_import = ("add", "import", "-a", "B", "--src-account", keys["A"], "--remote-subject")
    nsc.run(*add_import, "svc.pub", "--service", "--local-subject", "b.svc")
    nsc.run(*add_import, "events.>", "--local-subject", "ev.>")
    for subject, kind in (("svc.priv.>", ("--service",)), ("secret.>", ())):
        token = home / f"{subject[:-2]}.jwt"
        nsc.run("generate", "activation", "-a", "A", "--subject", subject,
                "--target-account", keys["B"], "-o", str(token))  # fmt: skip
        nsc.run("add", "import", "-a", "B", "--token", str(token), *kind)
    return Store(nsc, home, keys)


@pytest.fixture
async def server(
    server_kind: str, server_pool: ServerPool, store: Store, connect: Connect
) -> ServerProcess:
    """One full resolver per kind for the module, every account preloaded."""
    config = store.nsc.full_config(store.home / f"jwt-{server_kind}")
    preload = "".join(
        f"\t{key}: {store.nsc.account_jwt(name)}\n" for name, key in store.keys.items()
    )
    config = config.replace("resolver_preload: {\n", "resolver_preload: {\n" + preload)
    return server_pool.get(server_kind, config=config)


def _creds(store: Store, account: str) -> dict[str, Any]:
    return {"user_credentials": str(store.nsc.creds(account, account.lower()))}


async def _responder(nc: NATS, subject: str, seen: list[Msg], answers: int = 1) -> None:
    async def answer(msg: Msg) -> None:
        seen.append(msg)
        for n in range(answers):
            await nc.publish(msg.reply, f"{msg.subject} {n}".encode())

    await nc.subscribe(subject, cb=answer)
    await nc.flush()


async def _push(nc: NATS, claims: dict[str, Any], store: Store) -> dict[str, Any]:
    """A changed account JWT, signed by the operator, pushed as `nsc push` pushes it."""
    claims = {**claims, "iat": int(time.time()), "jti": base64.b32encode(os.urandom(10)).decode()}
    token = encode_jwt(claims, store.nsc.seed(store.nsc.public("operator")))
    reply = await nc.request("$SYS.REQ.CLAIMS.UPDATE", token.encode(), timeout=2)
    answer: dict[str, Any] = json.loads(reply.data)
    answer.pop("server")
    return answer


def _claims(token: str) -> dict[str, Any]:
    body = token.split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    return claims


def _activation(seed: bytes, importer: str, *, issuer_account: str = "", exp: int = 0) -> str:
    nats: dict[str, Any] = {"subject": "svc.priv.>", "kind": "service", "type": "activation"}
    if issuer_account:
        nats["issuer_account"] = issuer_account
    claims: dict[str, Any] = {
        "jti": base64.b32encode(os.urandom(10)).decode(),
        "iat": int(time.time()),
        "iss": nkeys.from_seed(seed).public_key.decode(),
        "sub": importer,
        "nats": {**nats, "version": 2},
    }
    if exp:
        claims["exp"] = exp
    return encode_jwt(claims, seed)


async def _answered(nc: NATS, subject: str) -> str:
    try:
        return (await nc.request(subject, b"", timeout=1)).data.decode()
    except NoRespondersError:
        return "no responders"
    except TimeoutError:
        return "timeout"


async def _until(nc: NATS, subject: str, expected: str, within: float = 5) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while (found := await _answered(nc, subject)) != expected:
        assert asyncio.get_running_loop().time() < deadline, found
        await asyncio.sleep(0.1)


async def test_public_service_import(server: ServerProcess, store: Store, connect: Connect) -> None:
    """A request on the importer's local subject reaches the export; a Stream response type
    lets every answer back; natscli gets the answer too."""
    a, b = await connect(server, **_creds(store, "A")), await connect(server, **_creds(store, "B"))
    seen: list[Msg] = []
    await _responder(a, "svc.>", seen, answers=2)
    inbox = await b.subscribe("answers.1")
    await b.publish("b.svc", b"hello", reply="answers.1")
    assert {(await inbox.next_msg(2)).data for _ in range(2)} == {b"svc.pub 0", b"svc.pub 1"}
    assert seen[0].subject == "svc.pub" and seen[0].reply.startswith("_R_.")
    creds = str(store.nsc.creds("B", "b"))
    code, out = await cli(server.url, "--creds", creds, "request", "b.svc", "x", "--raw")
    assert code == 0 and out.strip() == "svc.pub 0", out
    # Only the import's subject is served: the exporter's other subjects stay its own.
    assert await _answered(b, "svc.pub") == "no responders"


async def test_stream_import_is_mapped(
    server: ServerProcess, store: Store, connect: Connect
) -> None:
    a, b = await connect(server, **_creds(store, "A")), await connect(server, **_creds(store, "B"))
    mapped, private = await b.subscribe("ev.>"), await b.subscribe("secret.>")
    c = await connect(server, **_creds(store, "C"))
    outsider = await c.subscribe(">")
    await b.flush()
    await a.publish("events.x", b"1")
    await a.publish("secret.y", b"2")
    assert (msg := await mapped.next_msg(2)).subject == "ev.x" and msg.data == b"1"
    assert (msg := await private.next_msg(2)).subject == "secret.y" and msg.data == b"2"
    with pytest.raises(TimeoutError):
        await outsider.next_msg(0.3)  # C imports nothing


async def test_reply_crosses_once_and_leaks_nothing(
    server: ServerProcess, store: Store, connect: Connect
) -> None:
    """The private Singleton service: the exporter sees neither the importer's reply
    subject nor its other traffic, and only the first answer crosses back; the export's
    latency is reported to its own subject."""
    a, b = await connect(server, **_creds(store, "A")), await connect(server, **_creds(store, "B"))
    spy = await a.subscribe(">")
    reports = await a.subscribe("lat.svc")
    seen: list[Msg] = []
    await _responder(a, "svc.priv.>", seen, answers=3)
    inbox = await b.subscribe("binbox.>")
    await b.publish("svc.priv.q", b"", reply="binbox.1")
    await b.publish("b.private", b"")
    assert (await inbox.next_msg(2)).data == b"svc.priv.q 0"
    with pytest.raises(TimeoutError):
        await inbox.next_msg(0.3)  # the second and third answers do not cross
    await a.publish("binbox.1", b"forged")  # the importer's subject, in A: A's own
    with pytest.raises(TimeoutError):
        await inbox.next_msg(0.3)
    spied = []
    while True:
        try:
            spied.append((await spy.next_msg(0.2)).subject)
        except TimeoutError:
            break
    assert "b.private" not in spied and all(
        not s.startswith("binbox") or s == "binbox.1" for s in spied
    )
    assert seen[0].reply.startswith("_R_.") and "binbox" not in seen[0].reply
    report = json.loads((await reports.next_msg(2)).data)
    assert report["type"] == "io.nats.server.metric.v1.service_latency"
    assert report["status"] == 200


async def test_import_added_and_removed_at_run_time(
    server: ServerProcess, store: Store, connect: Connect
) -> None:
    """`nsc add import` and `nsc push` make D's import serve at once; `nsc delete import`
    and a push take it away, with D's client connected throughout."""
    nsc, a = store.nsc, await connect(server, **_creds(store, "A"))
    await _responder(a, "svc.pub", [])
    d = await connect(server, **_creds(store, "D"))
    assert await _answered(d, "d.svc") == "no responders"
    nsc.run("add", "import", "-a", "D", "--src-account", store.keys["A"], "--service",
            "--remote-subject", "svc.pub", "--local-subject", "d.svc")  # fmt: skip
    assert "jwt updated" in nsc.run("push", "-a", "D", "-u", server.url)
    await _until(d, "d.svc", "svc.pub 0")
    nsc.run("delete", "import", "-a", "D", "--subject", "svc.pub")
    assert "jwt updated" in nsc.run("push", "-a", "D", "-u", server.url)
    await _until(d, "d.svc", "no responders")
    assert d.is_connected


async def test_activation_tokens_are_verified(
    server: ServerProcess, store: Store, connect: Connect
) -> None:
    """E imports A's private service with tokens of every kind: A's or A's signing key's
    work; one of another account, for another account, or forged is refused with the
    JWT; one signed by a key A never made its own, or expired, leaves the import out;
    one that expires while in use ends the import then."""
    nsc, keys = store.nsc, store.keys
    a = await connect(server, **_creds(store, "A"))
    await _responder(a, "svc.priv.>", [])
    sys = await connect(server, user_credentials=str(nsc.creds("SYS", "sys")))
    e = await connect(server, **_creds(store, "E"))
    claims = _claims(nsc.account_jwt("E"))
    a_seed, c_seed = nsc.seed(keys["A"]), nsc.seed(keys["C"])
    signing = nsc.describe("account", "A")["nats"]["signing_keys"][0]
    stranger = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_ACCOUNT)
    good = _activation(a_seed, keys["E"])

    async def push(token: str, subject: str = "svc.priv.x") -> dict[str, Any]:
        imp = {"account": keys["A"], "subject": subject, "type": "service", "token": token}
        return await _push(sys, {**claims, "nats": {**claims["nats"], "imports": [imp]}}, store)

    assert (await push(good))["data"]["message"] == "jwt updated"
    await _until(e, "svc.priv.x", "svc.priv.x 0")
    by_key = _activation(nsc.seed(signing), keys["E"], issuer_account=keys["A"])
    assert (await push(by_key))["data"]["message"] == "jwt updated"
    assert await _answered(e, "svc.priv.x") == "svc.priv.x 0"
    refused = {
        _activation(c_seed, keys["E"]): "activation token doesn't match account for import",
        _activation(a_seed, keys["C"]): "activation token doesn't match account it is being",
        good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB"): "contains an invalid",
    }
    for token, words in refused.items():
        answer = await push(token)
        assert answer["error"]["code"] == 500 and words in answer["error"]["description"]
        assert answer["error"]["description"].startswith("jwt validation failed - validation")
    assert await _answered(e, "svc.priv.x") == "svc.priv.x 0"  # the JWT held is unchanged
    for token in (
        _activation(stranger, keys["E"], issuer_account=keys["A"]),
        _activation(a_seed, keys["E"], exp=int(time.time()) - 5),
    ):
        assert (await push(token))["data"]["message"] == "jwt updated"
        assert await _answered(e, "svc.priv.x") == "no responders"
    expiring = _activation(a_seed, keys["E"], exp=int(time.time()) + 2)
    assert (await push(expiring, "svc.priv.>"))["data"]
    assert await _answered(e, "svc.priv.x") == "svc.priv.x 0"
    await _until(e, "svc.priv.x", "no responders", within=5)
