"""A user JWT's `times`, `resp` and `data`, differentially: users issued with `nsc edit
user --time/--locale`, `--allow-pub-response --response-ttl` and `--data`, logging in
raw so every `-ERR` and close is seen as the client sees it."""

from __future__ import annotations

import asyncio
import datetime
import json
from dataclasses import dataclass

import pytest
from nats.aio.client import Client as NATS

from tests.conftest import Connect, ServerPool
from tests.e2e.test_operator_mode import _seed_of, _sign
from tests.support.nsc import Nsc
from tests.support.raw import Outcome, RawClient
from tests.support.servers import ServerProcess

AUTH_VIOLATION = b"-ERR 'Authorization Violation'"


@dataclass
class Store:
    nsc: Nsc
    config: str
    zone: str  # a zone where it is mid-day now, so no window here crosses midnight


def _noon_zone() -> str:
    """`Etc/GMT-N` is UTC+N: the one whose local hour is nearest 12."""
    hour = datetime.datetime.now(datetime.UTC).hour
    offset = 12 - hour if 12 - hour <= 12 else 12 - hour - 24
    offset = max(-12, min(12, offset))
    return f"Etc/GMT{-offset:+d}" if offset else "UTC"


def _clock(zone: str, seconds: float) -> str:
    import zoneinfo

    moment = datetime.datetime.now(zoneinfo.ZoneInfo(zone)) + datetime.timedelta(seconds=seconds)
    return moment.strftime("%H:%M:%S")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    nsc = Nsc(tmp_path_factory.mktemp("nsc-user-limits"))
    nsc.operator()
    nsc.run("add", "account", "A")
    nsc.run("add", "user", "-a", "A", "plain")
    nsc.run("add", "user", "-a", "A", "responder", "--allow-pub-response=2",
            "--response-ttl", "1s", "--allow-sub", "req.>")  # fmt: skip
    nsc.run("add", "user", "-a", "A", "answers_once", "--allow-pub-response", "--allow-pub", "ok.>")
    nsc.run("add", "user", "-a", "A", "data")
    nsc.run("edit", "user", "-a", "A", "data", "--data", "10")
    return Store(nsc, nsc.memory_config(), _noon_zone())


@pytest.fixture
def server(server_kind: str, server_pool: ServerPool, store: Store) -> ServerProcess:
    return server_pool.get(server_kind, config=store.config)


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
    _windowed(store, name, -60, 3)
    client, outcome = await _raw(server, store, name)
    async with client:
        assert outcome == Outcome((), closed=False)
        lines = await client.expect_closed(timeout=5)
        assert lines[-1] == b"-ERR 'User Authentication Expired'"


async def test_response_permissions(server: ServerProcess, store: Store, connect: Connect) -> None:
    """The responder may answer a request it received twice (`max` 2), only within its
    `ttl` (1 s), and may publish nothing else."""
    requester: NATS = await connect(server, user_credentials=str(store.nsc.creds("A", "plain")))
    answers = await requester.subscribe("back.>")
    client, outcome = await _raw(server, store, "responder")
    async with client:
        assert outcome == Outcome((), closed=False)
        assert await client.outcome(b"SUB req.> 1\r\n") == Outcome((), closed=False)
        await requester.publish("req.1", b"", reply="back.1")
        assert (await client.read_line()).startswith(b"MSG req.1 1 back.1")
        await client.read_line()  # the empty payload
        script = b"PUB back.1 1\r\na\r\n" * 3 + b"PUB other 1\r\nd\r\n"
        assert await client.outcome(script) == Outcome(
            (
                b"-ERR 'Permissions Violation for Publish to \"back.1\"'",
                b"-ERR 'Permissions Violation for Publish to \"other\"'",
            ),
            closed=False,
        )
        assert [(await answers.next_msg(2)).data for _ in range(2)] == [b"a", b"a"]
        await requester.publish("req.2", b"", reply="back.2")
        assert (await client.read_line()).startswith(b"MSG req.2 1 back.2")
        await client.read_line()
        await asyncio.sleep(1.2)  # past the ttl
        assert await client.outcome(b"PUB back.2 1\r\na\r\n") == Outcome(
            (b"-ERR 'Permissions Violation for Publish to \"back.2\"'",), closed=False
        )


async def test_response_permission_beside_an_allow_list(
    server: ServerProcess, store: Store
) -> None:
    client, outcome = await _raw(server, store, "answers_once")
    async with client:
        assert outcome == Outcome((), closed=False)
        assert await client.outcome(b"PUB ok.1 1\r\na\r\nPUB nope 1\r\na\r\n") == Outcome(
            (b"-ERR 'Permissions Violation for Publish to \"nope\"'",), closed=False
        )


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
