"""Shared fixtures: every end-to-end scenario runs against both servers.

``server_kind`` is parametrised over the reference nats-server (id ``ref``) and
jetlake (id ``jl``) so the same assertions hold for both -- the differential
contract of the project. ``JETLAKE_TEST_SERVERS=nats-server`` (or ``jetlake``)
restricts a run to one kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import DEFAULT_FLUSH_TIMEOUT
from nats.aio.client import Client as NATS

from tests.support.servers import (
    ServerError,
    ServerProcess,
    enabled_kinds,
    print_logs,
    start_server,
)
from tests.support.tls import Pki, make_pki

KIND_IDS = {"nats-server": "ref", "jetlake": "jl"}

# A lake server starts the SQL service (a JVM) by default; the suite's many lake servers do
# not need it, and the SQL service's tests start theirs with this unset.
os.environ.setdefault("JETLAKE_SQL", "off")

MakeServer = Callable[..., ServerProcess]
Connect = Callable[..., Awaitable[NATS]]

_client_flush = NATS.flush


async def _flush_in_order(self: NATS, timeout: int = DEFAULT_FLUSH_TIMEOUT) -> None:
    """nats-py's flush() with the protocol's barrier: the tests use flush() to know the
    server has processed what the client sent before it, e.g. a SUB before another
    connection publishes. nats-py 2.16 writes flush's PING to the socket at once, ahead
    of the SUB and PUB still queued for its flusher task, so its PONG proved nothing of
    them: under load a request from another client found no responder (the reference
    handles each connection on its own goroutine). Push that queue out first."""
    await self._flush_pending(force_flush=True)
    await _client_flush(self, timeout)


NATS.flush = _flush_in_order  # type: ignore[method-assign]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test run against the reference alone gets one more try; every test that runs
    jetlake gets none. The reference's run says what clients observe there, and a timing
    race in our test's setup against it (a close it has not yet processed, a client
    library's own race with its fast replies) is not a difference in jetlake. A rerun
    shows in the summary line ("N rerun"), so it is seen, and a second failure fails."""
    for item in items:
        spec = getattr(item, "callspec", None)
        kinds = (
            {v for v in spec.params.values() if isinstance(v, str) and v in KIND_IDS}
            if spec
            else set()
        )
        if kinds == {"nats-server"}:
            item.add_marker(pytest.mark.flaky(reruns=1))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Remember whether the test body failed so fixtures can dump server logs."""
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Seeds of the Raft simulator (tests/consensus/test_sim*.py): replay one, or run more."""
    group = parser.getgroup("raft simulator")
    group.addoption("--raft-seed", type=int, default=None, help="run only this seed")
    group.addoption("--raft-seeds", type=int, default=None, help="seeds per scenario")


@pytest.fixture(params=enabled_kinds(), ids=lambda kind: KIND_IDS[kind])
def server_kind(request: pytest.FixtureRequest) -> str:
    """Which server binary the test runs against."""
    return str(request.param)


@pytest.fixture
def make_server(
    server_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[MakeServer]:
    """Start servers of the test's kind (or an explicit ``kind=``); stop them after.

    ``make_server("-js", "-sd", str(tmp_path / "js"), config="...")``. Each gets
    its own name so several can share one tmp dir.
    """
    started: list[ServerProcess] = []

    def make(*args: str, config: str | None = None, kind: str | None = None) -> ServerProcess:
        kind = kind or server_kind
        name = f"{KIND_IDS[kind]}{len(started)}"
        server = start_server(kind, *args, config=config, tmp_path=tmp_path, name=name)
        started.append(server)
        return server

    yield make
    for server in started:
        if server.running:
            try:
                server.stop(expect_code=None)
            except ServerError:
                server.kill()
    print_logs_if_failed(request, started)


@pytest.fixture
def js_server(make_server: MakeServer, tmp_path: Path) -> ServerProcess:
    """One server of the test's kind with JetStream on, its store in the test's folder."""
    return make_server("-js", "-sd", str(tmp_path / "store"))


def print_logs_if_failed(request: pytest.FixtureRequest, servers: Iterable[ServerProcess]) -> None:
    """After a failed test body, each server's stderr, for the report's captured output."""
    if request.node.stash.get(_FAILED, False):
        print_logs(servers)


class ServerPool:
    """Servers shared by read-only tests, one per (kind, flags, config).

    Starting a server per parametrised case would dominate the run time of
    table-driven protocol tests; tests that change server state (auth
    failures are fine, signals and restarts are not) may share one.
    """

    def __init__(self, tmp_path: Path) -> None:
        self._tmp_path = tmp_path
        self._servers: dict[tuple[str, tuple[str, ...], str | None], ServerProcess] = {}

    def get(self, kind: str, *args: str, config: str | None = None) -> ServerProcess:
        key = (kind, args, config)
        server = self._servers.get(key)
        if server is None or not server.running:
            name = f"{KIND_IDS[kind]}-pool{len(self._servers)}"
            server = start_server(kind, *args, config=config, tmp_path=self._tmp_path, name=name)
            self._servers[key] = server
        return server

    def stop_all(self) -> None:
        for server in self._servers.values():
            if server.running:
                try:
                    server.stop(expect_code=None)
                except ServerError:
                    server.kill()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA with server, client and route certificates, for one test module."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """Certificates from a CA `pki`'s users do not trust."""
    return make_pki(tmp_path_factory.mktemp("other-pki"))


@pytest.fixture(scope="session")
def server_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    """Session-wide shared servers; see ServerPool."""
    pool = ServerPool(tmp_path_factory.mktemp("pool"))
    yield pool
    pool.stop_all()


@pytest.fixture
def server(make_server: MakeServer) -> ServerProcess:
    """A default server: loopback, random port, no auth."""
    return make_server()


@pytest.fixture
async def connect() -> AsyncIterator[Connect]:
    """nats-py connections that fail fast and are closed after the test.

    Reconnects are off unless asked for, so a server that drops a client shows
    up as an error instead of a silent retry loop.
    """
    clients: list[NATS] = []

    async def _connect(target: ServerProcess | str, **options: Any) -> NATS:
        url = target if isinstance(target, str) else target.url
        opts: dict[str, Any] = {
            "connect_timeout": 2,
            "allow_reconnect": False,
            "max_reconnect_attempts": 0,
        }
        opts.update(options)
        if "error_cb" not in opts:
            opts["error_cb"] = _quiet_error
        nc = await nats.connect(url, **opts)
        clients.append(nc)
        return nc

    yield _connect
    for nc in clients:
        if not nc.is_closed:
            # A test may have broken the connection on purpose.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), 5)


async def _quiet_error(exc: Exception) -> None:
    """Default error callback: tests that care pass their own."""


@pytest.fixture
def jetlake_js(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """jetlake alone with JetStream on, for what only jetlake promises (its own files, kill -9).

    The store is ``tmp_path / "store"``.
    """
    server = start_server("jetlake", "-js", "-sd", str(tmp_path / "store"), tmp_path=tmp_path)
    yield server
    if server.running:
        server.stop()
    print_logs_if_failed(request, [server])
