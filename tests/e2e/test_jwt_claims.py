"""Account and user JWT claims, differentially, on one full resolver per server kind
with JetStream on, every account issued with `nsc` and preloaded:

- exports and imports (`nsc add export` / `nsc add import`): public and private with
  activation tokens, service and stream, `local_subject`, response types, latency;
  imports added and removed at run time; forged, misdirected, expired and revoked
  tokens treated as the reference treats them; nothing of the importer leaks to the
  exporter through a service's reply;
- a user JWT's `times`, `resp` and `data` (`nsc edit user --time/--locale`,
  `--allow-pub-response --response-ttl`, `--data`), logged in raw so every `-ERR` and
  close is seen as the client sees it;
- an account's tiered JetStream limits (`nsc edit account --js-tier N`).
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import re
import signal
import time
import zoneinfo
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
from tests.e2e.test_operator_mode import _seed_of, _sign
from tests.support.nsc import Nsc, encode_jwt
from tests.support.poll import poll_async
from tests.support.raw import Outcome, RawClient
from tests.support.responses import two_answers_within_a_second
from tests.support.servers import ServerProcess

AUTH_VIOLATION = b"-ERR 'Authorization Violation'"


@dataclass
class Store:
    nsc: Nsc
    home: Path
    keys: dict[str, str]  # account name → public key
    configs: dict[str, str]  # server kind → its config, every account preloaded as at first
    zone: str  # a zone where it is mid-day now, so no window here crosses midnight


def _noon_zone() -> str:
    """`Etc/GMT-N` is UTC+N: the one whose local hour is nearest 12."""
    hour = datetime.datetime.now(datetime.UTC).hour
    offset = 12 - hour if 12 - hour <= 12 else 12 - hour - 24
    offset = max(-12, min(12, offset))
    return f"Etc/GMT{-offset:+d}" if offset else "UTC"


def _clock(zone: str, seconds: float) -> str:
    moment = datetime.datetime.now(zoneinfo.ZoneInfo(zone)) + datetime.timedelta(seconds=seconds)
    return moment.strftime("%H:%M:%S")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    home = tmp_path_factory.mktemp("nsc-claims")
    nsc = Nsc(home)
    nsc.operator()
    for name in ("A", "B", "C", "D", "E", "F", "T", "J", "K"):
        nsc.run("add", "account", name)
        nsc.run("add", "user", "-a", name, name.lower())
    keys = {name: nsc.public("account", name) for name in "ABCDEFTJK"}
    nsc.run("edit", "account", "A", "--sk", "generate")
    add_export = ("add", "export", "-a", "A", "--subject")
    nsc.run(*add_export, "svc.pub", "--service", "--response-type", "Stream")
    latency = ("--latency", "lat.svc", "--sampling", "100")
    nsc.run(*add_export, "svc.priv.>", "--service", "--private", *latency)
    nsc.run(*add_export, "svc.temp", "--service")
    nsc.run(*add_export, "events.>")
    nsc.run(*add_export, "secret.>", "--private")
    add_import = ("add", "import", "-a", "B", "--src-account", keys["A"], "--remote-subject")
    nsc.run(*add_import, "svc.pub", "--service", "--local-subject", "b.svc")
    nsc.run(*add_import, "events.>", "--local-subject", "ev.>")
    nsc.run("add", "import", "-a", "F", "--src-account", keys["A"], "--service",
            "--remote-subject", "svc.temp", "--local-subject", "f.temp")  # fmt: skip
    for subject, kind in (("svc.priv.>", ("--service",)), ("secret.>", ())):
        token = home / f"{subject[:-2]}.jwt"
        nsc.run("generate", "activation", "-a", "A", "--subject", subject,
                "--target-account", keys["B"], "-o", str(token))  # fmt: skip
        nsc.run("add", "import", "-a", "B", "--token", str(token), *kind)
    nsc.run("add", "user", "-a", "A", "plain")
    nsc.run("add", "user", "-a", "A", "responder", "--allow-pub-response=2",
            "--response-ttl", "1s", "--allow-sub", "req.>")  # fmt: skip
    nsc.run("add", "user", "-a", "A", "answers_once", "--allow-pub-response", "--allow-pub", "ok.>")
    nsc.run("add", "user", "-a", "A", "informed", "--allow-pub-response",
            "--allow-pub", "$SYS.REQ.USER.INFO")  # fmt: skip
    nsc.run("add", "user", "-a", "A", "data")
    nsc.run("edit", "user", "-a", "A", "data", "--data", "10")
    nsc.run("edit", "account", "T", "--js-tier", "1", "--js-mem-storage", "1M",
            "--js-disk-storage", "2000", "--js-streams", "3", "--js-consumer", "1")  # fmt: skip
    # J's JetStream API, imported by K under J.API (as `nats --js-api-prefix` uses it).
    nsc.run("edit", "account", "J", "--js-mem-storage", "-1", "--js-disk-storage", "-1")
    nsc.run("add", "export", "-a", "J", "--subject", "$JS.API.>", "--service")
    nsc.run("add", "import", "-a", "K", "--src-account", keys["J"], "--service",
            "--remote-subject", "$JS.API.>", "--local-subject", "J.API.>")  # fmt: skip
    nsc.run("edit", "account", "T", "--js-tier", "3", "--js-mem-storage", "2M",
            "--js-disk-storage", "20M", "--js-streams", "1")  # fmt: skip
    return Store(nsc, home, keys, {}, _noon_zone())


@pytest.fixture
async def server(server_kind: str, server_pool: ServerPool, store: Store) -> ServerProcess:
    """One full resolver per kind for the module, every account preloaded."""
    config = store.configs.get(server_kind)
    if config is None:
        config = store.configs[server_kind] = _config(store, server_kind)
    js = str(store.home / f"js-{server_kind}")
    return server_pool.get(server_kind, "-js", "-sd", js, config=config)


def _config(store: Store, server_kind: str) -> str:
    config = store.nsc.full_config(store.home / f"jwt-{server_kind}")
    preload = "".join(
        f"\t{key}: {store.nsc.account_jwt(name)}\n" for name, key in store.keys.items()
    )
    return config.replace("resolver_preload: {\n", "resolver_preload: {\n" + preload)


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


async def _push_nsc(server: ServerProcess, store: Store, connect: Connect, account: str) -> None:
    """The account's JWT as nsc now has it, pushed as `nsc push` does (without its wait
    for further servers' answers)."""
    sys = await connect(server, user_credentials=str(store.nsc.creds("SYS", "sys")))
    token = store.nsc.account_jwt(account).encode()
    reply = await sys.request("$SYS.REQ.CLAIMS.UPDATE", token, timeout=2)
    assert json.loads(reply.data)["data"]["message"] == "jwt updated"


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
    await poll_async(
        lambda: _answered(nc, subject),
        f"{expected!r} on {subject}",
        within,
        until=lambda found: found == expected,
        interval=0.1,
    )


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


async def test_a_reload_adding_mappings_is_refused(
    server: ServerProcess, store: Store, connect: Connect
) -> None:
    """Top-level mappings are the global account's, which operator mode does not allow: a
    reload adding them is refused and the JWTs' imports stay served."""
    a, b = await connect(server, **_creds(store, "A")), await connect(server, **_creds(store, "B"))
    await _responder(a, "svc.pub", [])
    await _until(b, "b.svc", "svc.pub 0")
    assert server.config_path is not None
    text = server.config_path.read_text()
    server.config_path.write_text(text + "\nmappings { unused.a: unused.b }\n")
    try:
        server.send_signal(signal.SIGHUP)
        await server.wait_for_log_async(
            re.escape(
                "Failed to reload server configuration: "
                "operators do not allow Accounts to be configured directly"
            )
        )
    finally:
        server.config_path.write_text(text)
    assert await _answered(b, "b.svc") == "svc.pub 0"


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
    # The reference at times answers a first request 503 just after the responder came.
    await _until(b, "svc.priv.ready", "svc.priv.ready 0")
    seen.clear()
    inbox = await b.subscribe("binbox.>")
    await b.publish("svc.priv.q", b"", reply="binbox.1")
    await b.publish("b.private", b"")
    first = await inbox.next_msg(2)
    assert first.data == b"svc.priv.q 0", (first.headers, first.subject)
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
    # Requests answered 503 while the responder came are reported too: find an answer's.
    statuses = []
    while 200 not in statuses:
        report = json.loads((await reports.next_msg(2)).data)
        assert report["type"] == "io.nats.server.metric.v1.service_latency"
        statuses.append(report["status"])


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
    await _push_nsc(server, store, connect, "D")
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


async def test_an_export_removed_stops_its_imports(
    server: ServerProcess, store: Store, connect: Connect
) -> None:
    """The exporter's new JWT judges its importers again: F's import stops when A no
    longer exports the subject, and serves again when A exports it once more."""
    nsc, a = store.nsc, await connect(server, **_creds(store, "A"))
    await _responder(a, "svc.temp", [])
    f = await connect(server, **_creds(store, "F"))
    assert await _answered(f, "f.temp") == "svc.temp 0"
    nsc.run("delete", "export", "-a", "A", "--subject", "svc.temp")
    try:
        await _push_nsc(server, store, connect, "A")
        await _until(f, "f.temp", "no responders")
    finally:
        nsc.run("add", "export", "-a", "A", "--subject", "svc.temp", "--service")
    await _push_nsc(server, store, connect, "A")
    await _until(f, "f.temp", "svc.temp 0")


async def test_a_revoked_activation_stops_its_import(
    server: ServerProcess, store: Store, connect: Connect
) -> None:
    """`nsc revocations add_activation` on the export, pushed, ends the import of the
    token issued before it."""
    nsc, keys = store.nsc, store.keys
    a = await connect(server, **_creds(store, "A"))
    await _responder(a, "svc.priv.>", [])
    sys = await connect(server, user_credentials=str(nsc.creds("SYS", "sys")))
    claims = _claims(nsc.account_jwt("E"))
    token = _activation(nsc.seed(keys["A"]), keys["E"])
    imp = {"account": keys["A"], "subject": "svc.priv.r", "type": "service", "token": token}
    answer = await _push(sys, {**claims, "nats": {**claims["nats"], "imports": [imp]}}, store)
    assert answer["data"]["message"] == "jwt updated"
    e = await connect(server, **_creds(store, "E"))
    await _until(e, "svc.priv.r", "svc.priv.r 0")
    revoke = ("-a", "A", "--service", "--subject", "svc.priv.>", "--target-account", keys["E"])
    nsc.run("revocations", "add_activation", *revoke)
    try:
        await _push_nsc(server, store, connect, "A")
        await _until(e, "svc.priv.r", "no responders")
    finally:
        nsc.run("revocations", "delete_activation", *revoke)
    await _push_nsc(server, store, connect, "A")  # the server's A as nsc's again, for later tests


async def _raw(server: ServerProcess, store: Store, user: str) -> tuple[RawClient, Outcome]:
    client = await RawClient.connect(server.host, server.port)
    token = store.nsc.user_jwt("A", user)
    seed = _seed_of(store.nsc.creds("A", user))
    fields = {"verbose": False, "jwt": token, "sig": _sign(seed, client.info["nonce"])}
    return client, await client.outcome(b"CONNECT " + json.dumps(fields).encode() + b"\r\n")


def _windowed(store: Store, name: str, start: float, end: float) -> None:
    window = f"{_clock(store.zone, start)}-{_clock(store.zone, end)}"
    store.nsc.run("add", "user", "-a", "A", name)
    store.nsc.run("edit", "user", "-a", "A", name, "--time", window, "--locale", store.zone)


async def test_outside_connect_times_is_refused(server: ServerProcess, store: Store) -> None:
    name = f"later_{server.port}"
    _windowed(store, name, 600, 1200)
    client, outcome = await _raw(server, store, name)
    async with client:
        assert outcome == Outcome((AUTH_VIOLATION,), closed=True)


async def test_a_window_that_ends_disconnects(server: ServerProcess, store: Store) -> None:
    """Inside its window the user is in; when the window ends the server says the user's
    authentication expired and closes the connection."""
    name = f"ending_{server.port}"
    _windowed(store, name, -60, 2)
    client, outcome = await _raw(server, store, name)
    async with client:
        assert outcome == Outcome((), closed=False)
        lines = await client.expect_closed(timeout=5)
        assert lines[-1] == b"-ERR 'User Authentication Expired'"


async def test_response_permissions(server: ServerProcess, store: Store, connect: Connect) -> None:
    """The responder may answer a request it received twice (`max` 2), only within its
    `ttl` (1 s), and may publish nothing else."""
    requester = await connect(server, user_credentials=str(store.nsc.creds("A", "plain")))
    client, outcome = await _raw(server, store, "responder")
    async with client:
        assert outcome == Outcome((), closed=False)
        await two_answers_within_a_second(requester, client)


async def test_response_permission_beside_an_allow_list(
    server: ServerProcess, store: Store
) -> None:
    client, outcome = await _raw(server, store, "answers_once")
    async with client:
        assert outcome == Outcome((), closed=False)
        assert await client.outcome(b"PUB ok.1 1\r\na\r\nPUB nope 1\r\na\r\n") == Outcome(
            (b"-ERR 'Permissions Violation for Publish to \"nope\"'",), closed=False
        )


async def test_user_info_shows_response_permissions(
    server: ServerProcess, store: Store, connect: Connect
) -> None:
    nc = await connect(server, user_credentials=str(store.nsc.creds("A", "informed")))
    info = json.loads((await nc.request("$SYS.REQ.USER.INFO", b"", timeout=2)).data)["data"]
    assert info["permissions"] == {
        "publish": {"allow": ["$SYS.REQ.USER.INFO"]},
        "subscribe": {},
        "responses": {"max": 1, "ttl": 120_000_000_000},
    }


async def test_data_limit_is_not_enforced(server: ServerProcess, store: Store) -> None:
    """As on the reference, a user JWT's `data` bounds nothing."""
    client, outcome = await _raw(server, store, "data")
    async with client:
        assert outcome == Outcome((), closed=False)
        payload = b"x" * 100
        script = b"PUB big 100\r\n" + payload + b"\r\n"
        assert await client.outcome(script * 3) == Outcome((), closed=False)


def test_noon_zone_is_mid_day() -> None:
    hour = int(_clock(_noon_zone(), 0)[:2])
    assert 6 <= hour <= 18


async def _api(nc: NATS, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else b""
    doc: dict[str, Any] = json.loads((await nc.request(subject, data, timeout=3)).data)
    return doc


async def _create(nc: NATS, name: str, **config: Any) -> dict[str, Any] | None:
    body = {"name": name, "subjects": [name.lower()], **config}
    error: dict[str, Any] | None = (await _api(nc, f"$JS.API.STREAM.CREATE.{name}", body)).get(
        "error"
    )
    return error


async def test_each_tier_bounds_its_own_streams(
    server: ServerProcess, store: Store, connect: Connect
) -> None:
    """Each replica count's streams, consumers and stored bytes are bounded by its own
    tier; a count without a tier is refused; `$JS.API.INFO` reports every tier."""
    nc = await connect(server, user_credentials=str(store.nsc.creds("T", "t")))
    assert await _create(nc, "S1", max_bytes=1000) is None
    assert await _create(nc, "S2", max_bytes=1500) == {
        "code": 500,
        "err_code": 10047,
        "description": "insufficient storage resources available",
    }
    assert await _create(nc, "M1", storage="memory", max_bytes=100_000) is None
    assert await _create(nc, "S3") is None
    assert (await _create(nc, "S4"))["err_code"] == 10027  # type: ignore[index]
    assert await _create(nc, "R2", num_replicas=2) == {
        "code": 400,
        "err_code": 10120,
        "description": "no JetStream default or applicable tiered limit present",
    }
    # R3 has a tier; a single server refuses it for its replicas, as the reference does.
    assert (await _create(nc, "R3", num_replicas=3))["err_code"] == 10074  # type: ignore[index]
    consumer = {"stream_name": "S1", "config": {"durable_name": "c1", "ack_policy": "explicit"}}
    created = await _api(nc, "$JS.API.CONSUMER.CREATE.S1.c1", consumer)
    assert "error" not in created, created
    consumer["config"]["durable_name"] = "c2"  # type: ignore[index]
    refused = await _api(nc, "$JS.API.CONSUMER.CREATE.S1.c2", consumer)
    assert refused["error"] == {
        "code": 400,
        "err_code": 10026,
        "description": "maximum consumers limit reached",
    }
    await nc.request("s1", b"hello", timeout=2)
    info = await _api(nc, "$JS.API.INFO")
    assert info["limits"]["max_streams"] == 0 and info["streams"] == 3
    one, three = info["tiers"]["R1"], info["tiers"]["R3"]
    assert {k: one[k] for k in ("reserved_memory", "reserved_storage", "streams", "consumers")} == {
        "reserved_memory": 100_000,
        "reserved_storage": 1000,
        "streams": 3,
        "consumers": 1,
    }
    assert one["storage"] == info["storage"] > 0
    assert one["limits"]["max_storage"] == 2000 and one["limits"]["max_consumers"] == 1
    assert three["streams"] == 0 and three["limits"]["max_storage"] == 20_000_000
    # The tier's storage bounds what its streams store: S3 has no max_bytes of its own.
    acks = [json.loads((await nc.request("s3", b"x" * 500, timeout=2)).data) for _ in range(6)]
    refused_acks = [a["error"] for a in acks if "error" in a]
    assert refused_acks and refused_acks[0] == {
        "code": 400,
        "err_code": 10002,
        "description": "resource limits exceeded for account",
    }


async def test_jetstream_api_imported(
    server: ServerProcess, store: Store, connect: Connect
) -> None:
    """K reaches J's streams through the imported API, under its local prefix, and sees
    nothing of J's streams through its own (it has no JetStream)."""
    j = await connect(server, **_creds(store, "J"))
    await _api(j, "$JS.API.STREAM.CREATE.ORDERS", {"name": "ORDERS", "subjects": ["orders"]})
    await j.request("orders", b"one", timeout=2)
    k = await connect(server, **_creds(store, "K"))
    info = await _api(k, "J.API.STREAM.INFO.ORDERS")
    assert info["config"]["name"] == "ORDERS" and info["state"]["messages"] == 1
    creds = str(store.nsc.creds("K", "k"))
    code, out = await cli(server.url, "--creds", creds, "--js-api-prefix", "J.API",
                          "stream", "ls", "--names")  # fmt: skip
    assert code == 0 and out.split() == ["ORDERS"], out
    assert (await _api(k, "$JS.API.INFO"))["error"]["err_code"] == 10039
