"""Config reload (SIGHUP, `--signal reload=<pid>`), the reference and jetlake side by side.

A reload keeps every connection its new config still allows. What clients observe
is the reference's: a subscription the new permissions refuse is removed with
-ERR 'Permissions Violation for Subscription to "…" (sid "…")', a publish gets the
usual violation, a user whose password changed gets 'Authorization Violation',
and a user removed from the file is closed without a word. A change that cannot
be made while running, or a broken file, leaves the old configuration in force.
"""

from __future__ import annotations

import asyncio
import re
import signal
import ssl
import subprocess
import time
from pathlib import Path

import aiomqtt
import nats
import pytest

from tests.cluster.test_route_tls import cluster_config as route_tls_config
from tests.conftest import MakeServer
from tests.mqtt.conftest import TIMEOUT, mqtt_port
from tests.support.cluster import ONE_ROUTE_PER_PEER, free_port, peers, route_url, wait_mesh
from tests.support.http import _get
from tests.support.nsc import Nsc
from tests.support.poll import poll, poll_async
from tests.support.raw import RawClient
from tests.support.servers import ServerProcess, server_command, start_server
from tests.support.tls import Pki, make_pki

pytestmark = pytest.mark.timeout(60)

RELOADED = re.escape("Reloaded server configuration")
FAILED = "Failed to reload server configuration: "

BEFORE = """
authorization {
  users = [
    {user: alice, password: pa, permissions: {publish: ["foo", "bar"], subscribe: ["foo", "bar"]}}
    {user: bob, password: pb}
    {user: carol, password: pc}
  ]
}
"""
AFTER = """
debug: true
authorization {
  users = [
    {user: alice, password: pa, permissions: {publish: ["foo"], subscribe: ["foo"]}}
    {user: carol, password: changed}
    {user: dave, password: pd}
  ]
}
"""


async def login(server: ServerProcess, user: str, password: str) -> RawClient:
    client = await RawClient.connect(server.host, server.port)
    await client.handshake(user=user, password=password, **{"pass": password})
    return client


def reload(server: ServerProcess, text: str) -> None:
    """Write the server's config file anew and send SIGHUP."""
    assert server.config_path is not None
    server.config_path.write_text(text)
    server.send_signal(signal.SIGHUP)


def config_load_time(server: ServerProcess) -> str:
    return str(_get(server.http_url + "/varz").json()["config_load_time"])


async def test_reload_applies_users_and_permissions_to_live_connections(
    make_server: MakeServer,
) -> None:
    server = make_server("-m", "-1", config=BEFORE)
    loaded = config_load_time(server)
    alice = await login(server, "alice", "pa")
    bob = await login(server, "bob", "pb")
    carol = await login(server, "carol", "pc")
    await alice.send("SUB foo 1\r\nSUB bar 2\r\nPING\r\n")
    await alice.read_until(rb"^PONG$")
    time.sleep(0.01)  # config_load_time has millisecond steps on some clocks
    reload(server, AFTER)
    await server.wait_for_log_async(RELOADED)
    assert server.find_log(re.escape("Reloaded: debug = true"))
    assert server.find_log(re.escape("Reloaded: authorization users"))
    # alice keeps her connection and "foo"; "bar" is taken away.
    await alice.send("PUB bar 1\r\nx\r\nPUB foo 1\r\ny\r\nPING\r\n")
    lines = await alice.read_until(rb"^PONG$")
    assert lines == [
        b'-ERR \'Permissions Violation for Subscription to "bar" (sid "2")\'',
        b"-ERR 'Permissions Violation for Publish to \"bar\"'",
        b"MSG foo 1 1",
        b"PONG",
    ]
    await server.wait_for_log_async(
        re.escape('Removed sub "bar" (sid "2") for User "alice" - not authorized')
    )
    # bob's user is gone: closed, nothing said; carol's password changed: told.
    assert await bob.expect_closed() == []
    assert await carol.expect_closed() == [b"-ERR 'Authorization Violation'"]
    await server.wait_for_log_async(r'cid:\d+ - .*authentication error - User "carol"')
    # The new file decides who logs in from now on.
    await (await login(server, "dave", "pd")).close()
    refused = await RawClient.connect(server.host, server.port)
    await refused.send('CONNECT {"user":"bob","pass":"pb","verbose":false}\r\nPING\r\n')
    assert await refused.expect_closed() == [b"-ERR 'Authorization Violation'"]
    assert config_load_time(server) != loaded
    await alice.close()


def config_digest(server: ServerProcess) -> str:
    return str(_get(server.http_url + "/varz").json()["config_digest"])


async def test_the_config_digest_is_the_references_and_a_reload_moves_it(tmp_path: Path) -> None:
    """/varz's `config_digest` for the same file is the same on both kinds (a fleet's
    drift shows whichever runs where), and each reload logs and shows the new one."""
    servers = [
        start_server(kind, "-m", "-1", config=BEFORE, tmp_path=tmp_path / kind)
        for kind in ("nats-server", "jetlake")
    ]
    try:
        first = {config_digest(server) for server in servers}
        assert len(first) == 1 and min(first).startswith("sha256:")
        for server in servers:
            reload(server, AFTER)
        logged = [await s.wait_for_log_async(RELOADED + r" \((sha256:\w+)\)") for s in servers]
        after = {config_digest(server) for server in servers}
        assert after == {found[1] for found in logged} and len(after) == 1 and after != first
    finally:
        for server in servers:
            server.stop(expect_code=None)


async def test_a_change_that_cannot_be_reloaded_leaves_the_old_config(
    make_server: MakeServer,
) -> None:
    server = make_server("-m", "-1", config=BEFORE)
    loaded = config_load_time(server)
    alice = await login(server, "alice", "pa")
    reload(server, "server_name: renamed\n" + AFTER)
    await server.wait_for_log_async(
        re.escape(FAILED + "config reload not supported for ServerName: old=, new=renamed")
    )
    # A broken file changes nothing either, and says where it is wrong.
    reload(server, BEFORE + "\nauthorization {\n  users = [ {user: x password: \n")
    await server.wait_for_log_async(re.escape(FAILED) + r".*(line \d+|\.conf:\d+:)")
    # The old permissions still hold, and bob still logs in.
    await alice.send("SUB bar 2\r\nPUB bar 1\r\nx\r\nPING\r\n")
    assert await alice.read_until(rb"^PONG$") == [b"MSG bar 2 1", b"PONG"]
    await (await login(server, "bob", "pb")).close()
    assert config_load_time(server) == loaded
    await alice.close()


def signal_command(kind: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`<server> --signal …`, as an operator would type it."""
    return subprocess.run(
        [*server_command(kind), *args], capture_output=True, text=True, timeout=30, check=False
    )


async def test_signal_reload_by_pid_file(
    make_server: MakeServer, server_kind: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / f"{server_kind}.pid"
    server = make_server("-P", str(pid_file), config=BEFORE)
    server.config_path.write_text(AFTER)  # type: ignore[union-attr]
    done = signal_command(server_kind, "--signal", f"reload={pid_file}")
    assert (done.returncode, done.stderr) == (0, "")
    await server.wait_for_log_async(RELOADED)
    assert server.running  # the command's errors: test_reload_plan.py


@pytest.fixture(scope="module")
def two_cas(tmp_path_factory: pytest.TempPathFactory) -> tuple[Pki, Pki]:
    return make_pki(tmp_path_factory.mktemp("ca1")), make_pki(tmp_path_factory.mktemp("ca2"))


def tls_block(pki: Pki) -> str:
    return f'tls {{ cert_file: "{pki.server_cert}", key_file: "{pki.server_key}" }}\n'


async def test_reload_swaps_the_certificate_for_new_connections(
    make_server: MakeServer, two_cas: tuple[Pki, Pki]
) -> None:
    old_ca, new_ca = two_cas
    server = make_server(config=tls_block(old_ca))
    url = f"tls://localhost:{server.port}"
    kept = await nats.connect(url, tls=old_ca.client_context(), max_reconnect_attempts=0)
    try:
        reload(server, tls_block(new_ca))
        await server.wait_for_log_async(RELOADED)
        assert server.find_log(re.escape("Reloaded: tls = enabled"))
        await kept.flush(timeout=5)  # the open session is kept
        fresh = await nats.connect(url, tls=new_ca.client_context(), max_reconnect_attempts=0)
        await fresh.close()
        with pytest.raises((ssl.SSLError, OSError, nats.errors.Error)):
            await nats.connect(
                url, tls=old_ca.client_context(), max_reconnect_attempts=0, allow_reconnect=False
            )
    finally:
        await kept.close()


def test_reload_closes_a_route_whose_credentials_no_longer_pass(make_server: MakeServer) -> None:
    port = free_port()
    text = (
        f"server_name: A\ncluster {{ name: C, listen: 127.0.0.1:{port}, pool_size: -1\n"
        "  authorization { user: ru, password: %s } }\n"
    )
    a = make_server("-m", "-1", config=text % "rp")
    b = make_server(
        "-m", "-1", "-n", "B", "--cluster", route_url(free_port()), "--cluster_name", "C",
        "--routes", route_url(port, "ru:rp"), config=ONE_ROUTE_PER_PEER,
    )  # fmt: skip
    wait_mesh([a, b], ["A", "B"])
    reload(a, text % "changed")
    a.wait_for_log(RELOADED)
    assert a.find_log(re.escape("Reloaded: cluster"))
    a.wait_for_log("Router connection closed: Authentication Failure")
    poll(lambda: not peers(a), "A without routes")


ACCOUNTS_BEFORE = """
accounts {
  A { users = [ {user: a, password: a}, {user: m, password: m} ] }
  B { users = [ {user: b, password: b} ] }
}
"""
ACCOUNTS_AFTER = """
accounts {
  A { users = [ {user: a, password: a} ], exports = [ {stream: "events.>"} ] }
  B {
    users = [ {user: b, password: b}, {user: m, password: m} ]
    imports = [ {stream: {account: A, subject: "events.>"}} ]
  }
}
"""


async def test_reload_moves_users_between_accounts_and_adds_an_import(
    make_server: MakeServer,
) -> None:
    server = make_server(config=ACCOUNTS_BEFORE)
    a = await login(server, "a", "a")
    b = await login(server, "b", "b")
    moved = await login(server, "m", "m")
    await b.send("SUB events.> 1\r\nPING\r\n")
    await b.read_until(rb"^PONG$")
    reload(server, ACCOUNTS_AFTER)
    await server.wait_for_log_async(RELOADED)
    assert server.find_log(re.escape("Reloaded: accounts"))
    assert await moved.expect_closed() == []  # in another account now: it logs in again
    await a.send("PUB events.one 2\r\nhi\r\nPING\r\n")
    await a.read_until(rb"^PONG$")
    line, payload = await b.read_op()
    assert (line, payload) == (b"MSG events.one 1 2", b"hi")
    again = await login(server, "m", "m")
    await again.send("SUB events.> 1\r\nPING\r\n")
    await again.read_until(rb"^PONG$")
    await a.send("PUB events.two 2\r\nhi\r\nPING\r\n")
    assert (await again.read_op())[0] == b"MSG events.two 1 2"
    for client in (a, b, again):
        await client.close()


async def test_a_lowered_max_connections_closes_the_excess(make_server: MakeServer) -> None:
    server = make_server(config="max_connections: 10\n")
    clients = [await RawClient.connect(server.host, server.port) for _ in range(3)]
    for client in clients:
        await client.handshake()
    reload(server, "max_connections: 1\n")
    await server.wait_for_log_async(RELOADED)
    await server.wait_for_log_async("Closed 2 connections to fall within max_connections")
    outcomes = [await client.outcome() for client in clients]
    closed = [o.lines for o in outcomes if o.closed]
    assert closed == [(b"-ERR 'maximum connections exceeded'",)] * 2
    for client in clients:
        await client.close()


def test_reload_moves_the_log_to_a_file(make_server: MakeServer, tmp_path: Path) -> None:
    server = make_server(config=BEFORE)
    log_file = tmp_path / f"{server.kind}.log"
    reload(server, BEFORE + f'logfile: "{log_file}"\ntrace: true\n')
    server.wait_for_log(re.escape(f"Reloaded: log_file = {log_file}"))
    poll(
        lambda: log_file.exists() and "Reloaded server configuration" in log_file.read_text(),
        "the reload's last line in the new log file",
    )


async def test_reload_applies_an_accounts_new_limits(make_server: MakeServer) -> None:
    """A client at or over its account's new subscription limit is told and closed."""
    text = (
        "accounts { A {\n  users = [ {user: a, password: a}, {user: b, password: b} ]\n  %s\n} }\n"
    )
    server = make_server(config=text % "")
    over = await login(server, "a", "a")
    under = await login(server, "b", "b")
    await over.send("SUB x 1\r\nSUB y 2\r\nPING\r\n")
    await over.read_until(rb"^PONG$")
    reload(server, text % "limits { max_subscriptions: 1 }")
    await server.wait_for_log_async(RELOADED)
    assert await over.expect_closed() == [b"-ERR 'maximum subscriptions exceeded'"]
    await under.send("SUB x 1\r\nSUB y 2\r\nPING\r\n")
    assert await under.read_until(rb"^PONG$") == [
        b"-ERR 'maximum subscriptions exceeded'",
        b"PONG",
    ]
    await under.close()


def cluster_text(name: str, port: int, routes: list[int]) -> str:
    listed = ", ".join(f'"{route_url(p)}"' for p in routes)
    return (
        f"server_name: {name}\n"
        f"cluster {{ name: C, listen: 127.0.0.1:{port}, pool_size: -1, routes: [{listed}] }}\n"
    )


def test_reload_solicits_an_added_route_and_drops_a_removed_one(make_server: MakeServer) -> None:
    a_port, b_port = free_port(), free_port()
    a = make_server("-m", "-1", config=cluster_text("A", a_port, []))
    b = make_server("-m", "-1", config=cluster_text("B", b_port, []))
    reload(a, cluster_text("A", a_port, [b_port]))
    a.wait_for_log(RELOADED)
    assert a.find_log(re.escape("Reloaded: cluster routes"))
    assert not a.find_log(re.escape("Reloaded: cluster\n"))
    wait_mesh([a, b], ["A", "B"])
    reload(a, cluster_text("A", a_port, []))
    a.wait_for_log(f"Removed route {re.escape(route_url(b_port))}")
    assert a.find_log("Router connection closed: Route Removed - Remote: B")
    poll(lambda: not peers(a) and not peers(b), "the removed route gone, and not redialled")


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory) -> Nsc:
    nsc = Nsc(tmp_path_factory.mktemp("nsc"))
    nsc.operator()
    for account in ("A", "B"):
        nsc.run("add", "account", account)
        nsc.run("add", "user", "-a", account, "u")
    return nsc


async def test_reload_takes_a_new_resolver_preload(make_server: MakeServer, operator: Nsc) -> None:
    full = operator.memory_config()
    b_line = next(line for line in full.splitlines() if operator.public("account", "B") in line)
    server = make_server(config=full.replace(b_line, ""))
    url = f"nats://127.0.0.1:{server.port}"
    kept = await nats.connect(url, user_credentials=str(operator.creds("A", "u")))
    try:
        with pytest.raises(nats.errors.Error):
            await nats.connect(
                url, user_credentials=str(operator.creds("B", "u")), allow_reconnect=False
            )
        reload(server, full.replace(b_line, b_line.split(":")[0] + ": garbage"))
        await server.wait_for_log_async(FAILED + r".*\.conf:\d+:\d+: invalid account JWT")
        reload(server, full)
        await server.wait_for_log_async(RELOADED)
        assert server.find_log(re.escape("Reloaded: accounts"))
        closed = asyncio.Event()

        async def on_closed() -> None:
            closed.set()

        b_user = await nats.connect(
            url,
            user_credentials=str(operator.creds("B", "u")),
            closed_cb=on_closed,
            allow_reconnect=False,
        )
        reload(server, full.replace(b_line, ""))  # the MEMORY resolver forgets B
        b_key = operator.public("account", "B")
        await server.wait_for_log_async(f'Reloaded: deleting account \\[removed\\]: "{b_key}"')
        await asyncio.wait_for(closed.wait(), 5)  # B's user is cut off
        assert isinstance(b_user.last_error, nats.errors.AuthorizationError)
        await kept.flush(timeout=5)
    finally:
        await kept.close()


def js_text(store: Path, memory: str, file: str) -> str:
    limits = f"max_memory_store: {memory}, max_file_store: {file}"
    return f"jetstream {{ store_dir: '{store}', {limits} }}\n"


def test_reload_raises_the_jetstream_limits(make_server: MakeServer, tmp_path: Path) -> None:
    store = tmp_path / "js"
    server = make_server("-m", "-1", config=js_text(store, "1G", "1T"))
    reload(server, js_text(store, "2G", "3T"))
    server.wait_for_log(RELOADED)
    assert server.find_log(re.escape("Reloaded: JetStream max_mem_store = 1.86 GB"))
    assert server.find_log(re.escape("Reloaded: JetStream max_file_store = 2.73 TB"))
    config = _get(server.http_url + "/jsz").json()["config"]
    assert (config["max_memory"], config["max_storage"]) == (2 * 10**9, 3 * 10**12)
    reload(server, js_text(store, "1G", "3T"))
    server.wait_for_log(FAILED + "config reload not supported for decreasing jetstream max memory")


def account_js_text(store: Path, enabled: str) -> str:
    return (
        f"jetstream {{ store_dir: '{store}' }}\n"
        "accounts {\n"
        "  A { jetstream: enabled, users = [ {user: a, password: a} ] }\n"
        f"  B {{ jetstream: {enabled}, users = [ {{user: b, password: b}} ] }}\n"
        "}\n"
    )


def reloads(server: ServerProcess, count: int) -> None:
    """The server has logged `count` successful reloads."""
    done = "Reloaded server configuration"
    poll(lambda: server.log().count(done) >= count, f"{count} reloads")


async def js_info(nc: nats.NATS, want: str) -> str:
    """$JS.API.INFO's answer once it contains `want` (an engine starts in the background)."""

    async def answered() -> str | None:
        answer = (await nc.request("$JS.API.INFO", b"", timeout=5)).data.decode()
        return answer if want in answer else None

    return await poll_async(answered, f"{want} in $JS.API.INFO's answer", 10)


NOT_ENABLED = '"err_code":10039,"description":"JetStream not enabled for account"'


async def test_reload_switches_an_accounts_jetstream(
    make_server: MakeServer, tmp_path: Path
) -> None:
    """On and off and on again: off, the API answers 10039; on again, the account's
    streams are back with their messages."""
    store = tmp_path / "js"
    server = make_server(config=account_js_text(store, "disabled"))
    nc = await nats.connect(f"nats://b:b@127.0.0.1:{server.port}")
    try:
        assert NOT_ENABLED in await js_info(nc, NOT_ENABLED)
        reload(server, account_js_text(store, "enabled"))
        await server.wait_for_log_async(RELOADED)
        assert '"streams":0' in await js_info(nc, '"streams"')
        js = nc.jetstream()
        await js.add_stream(name="S", subjects=["s"])
        await js.publish("s", b"kept")
        reload(server, account_js_text(store, "disabled"))
        reloads(server, 2)
        assert NOT_ENABLED in await js_info(nc, NOT_ENABLED)
        reload(server, account_js_text(store, "enabled"))
        reloads(server, 3)
        assert '"streams":1' in await js_info(nc, '"streams"')
        assert (await js.stream_info("S")).state.messages == 1
        reload(server, account_js_text(store, "{max_streams: 1}"))
        reloads(server, 4)
        assert '"max_streams":1' in await js_info(nc, '"max_streams":1')
    finally:
        await nc.close()


def test_reload_swaps_the_route_certificates_for_new_routes(
    make_server: MakeServer, two_cas: tuple[Pki, Pki]
) -> None:
    """A's routes move to B's CA: B's redialled route, refused until then, is accepted."""
    old_ca, new_ca = two_cas
    a_port, b_port = free_port(), free_port()
    a = make_server("-m", "-1", config=route_tls_config("A", a_port, [], old_ca))
    b = make_server("-m", "-1", config=route_tls_config("B", b_port, [a_port], new_ca))
    a.wait_for_log("TLS route handshake error")
    assert not peers(a)
    reload(a, route_tls_config("A", a_port, [], new_ca))
    a.wait_for_log(RELOADED)
    assert a.find_log(re.escape("Reloaded: cluster"))
    wait_mesh([a, b], ["A", "B"])


async def test_reload_changes_the_mqtt_consumers_settings(
    make_server: MakeServer, tmp_path: Path
) -> None:
    port = free_port()
    text = (
        f"jetstream {{ store_dir: '{tmp_path / 'js'}' }}\nmqtt {{ listen: 127.0.0.1:{port}, %s }}\n"
    )
    server = make_server("-m", "-1", config=text % "ack_wait: 45s")
    reload(server, text % "ack_wait: 90s, max_ack_pending: 7")
    await server.wait_for_log_async(RELOADED)
    for notice in ("ack_wait = 1m30s", "max_ack_pending = 7", "consumer_inactive_threshold = 0s"):
        assert server.find_log(re.escape(f"Reloaded: MQTT {notice}")), notice
    mqtt = _get(server.http_url + "/varz").json()["mqtt"]
    assert (mqtt["ack_wait"], mqtt["max_ack_pending"]) == (90 * 10**9, 7)
    reload(server, text.replace(str(port), str(free_port())) % "ack_wait: 90s")
    await server.wait_for_log_async(FAILED + "config reload not supported for MQTT")


async def _tls_login(port: int, pki: Pki | None) -> None:
    """An MQTT login, over TLS trusting `pki` (plain when None)."""
    tls = pki.client_context() if pki is not None else None
    client = aiomqtt.Client("localhost", port, identifier="tls", tls_context=tls, timeout=TIMEOUT)
    async with client:
        pass


async def _login_soon(port: int, pki: Pki | None) -> None:
    """`_tls_login` once the port is open again (switching TLS reopens it)."""

    async def logged_in() -> bool:
        await _tls_login(port, pki)
        return True

    await poll_async(logged_in, "a login", TIMEOUT, interval=0.1, retry=aiomqtt.MqttError)


async def test_reload_swaps_the_mqtt_certificate_for_new_connections(
    make_server: MakeServer, tmp_path: Path, two_cas: tuple[Pki, Pki]
) -> None:
    old_ca, new_ca = two_cas

    def text(pki: Pki | None) -> str:
        block = "port: -1"
        if pki is not None:
            block += f', tls {{ cert_file: "{pki.server_cert}", key_file: "{pki.server_key}" }}'
        return f'jetstream {{ store_dir: "{tmp_path / "js"}" }}\nmqtt {{ {block} }}\n'

    server = make_server(config=text(old_ca))
    port = mqtt_port(server)
    await _tls_login(port, old_ca)
    reload(server, text(new_ca))
    await server.wait_for_log_async(RELOADED)
    await _tls_login(port, new_ca)
    with pytest.raises(aiomqtt.MqttError):
        await _tls_login(port, old_ca)
    # Switched off, then on again: new connections follow, on the same port.
    for count, pki in ((2, None), (3, new_ca)):
        reload(server, text(pki))
        poll(lambda n=count: len(re.findall(RELOADED, server.log())) == n, "the reload")
        await _login_soon(port, pki)
