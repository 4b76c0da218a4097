"""Account lookup at login, differentially: a user of an account whose JWT the server
does not hold logs in once a full resolver fetched it from the other servers of its
cluster; an account no server holds, or one no server answers for within the resolver's
`timeout`, is refused with the reference's error and warnings."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Connect
from tests.e2e.test_operator_mode import AUTH_VIOLATION, _login, _seed_of
from tests.support.cluster import ONE_ROUTE_PER_PEER, cluster_args, free_port, stop_all, wait_mesh
from tests.support.nsc import Nsc
from tests.support.poll import poll_async
from tests.support.raw import Outcome
from tests.support.servers import ServerProcess, start_server

NAMES = ["S0", "S1", "S2"]
TIMEOUT = 1.0  # the resolvers' `timeout`
NOT_FOUND = "[WRN] Account fetch failed: account jwt not found"


@pytest.fixture
def nsc(tmp_path: Path) -> Nsc:
    nsc = Nsc(tmp_path / "nsc")
    nsc.operator()
    for account, user in (("B", "alice"), ("C", "carol"), ("N", "nobody")):
        nsc.run("add", "account", account)
        nsc.run("add", "user", "-a", account, user)
    return nsc


@pytest.fixture
def trio(server_kind: str, nsc: Nsc, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """Three routed full resolvers; only the first holds B, none holds C or N."""
    ports = [free_port() for _ in NAMES]
    (tmp_path / "jwt0").mkdir()
    account = nsc.public("account", "B")
    (tmp_path / "jwt0" / f"{account}.jwt").write_text(nsc.account_jwt("B"))
    servers: list[ServerProcess] = []
    try:
        for i, name in enumerate(NAMES):
            config = nsc.full_config(tmp_path / f"jwt{i}") + ONE_ROUTE_PER_PEER
            config = config.replace('timeout: "1.9s"', f'timeout: "{TIMEOUT}s"')
            args = cluster_args(name, ports[i], [ports[0]] if i else [])
            servers.append(
                start_server(server_kind, *args, config=config, tmp_path=tmp_path, name=name)
            )
        wait_mesh(servers, NAMES)
        yield servers
    finally:
        for server in servers:
            if server.running:
                os.kill(server.pid, signal.SIGCONT)
        stop_all(servers)


def _user(nsc: Nsc, account: str, user: str) -> tuple[str, bytes]:
    return nsc.user_jwt(account, user), _seed_of(nsc.creds(account, user))


async def _logged_in(server: ServerProcess, user: tuple[str, bytes]) -> bool:
    return await _login(server, *user) == Outcome((b"+OK",), closed=False)


async def test_login_fetches_the_account_from_the_cluster(
    trio: list[ServerProcess], nsc: Nsc, tmp_path: Path, server_kind: str
) -> None:
    first, second, third = trio
    account = nsc.public("account", "B")
    # The reference waits for answers only from the servers it has heard of since the
    # routes came up; until then its own empty answer refuses the login.
    alice = _user(nsc, "B", "alice")
    await poll_async(lambda: _logged_in(third, alice), third.log, 5, interval=0.1)
    fetched = tmp_path / "jwt2" / f"{account}.jwt"
    assert fetched.read_text().strip() == nsc.account_jwt("B")

    # An account no server holds: every server answers empty, the login is refused at once.
    nobody = _user(nsc, "N", "nobody")
    started = time.monotonic()
    assert await _login(third, *nobody) == Outcome((AUTH_VIOLATION,), closed=True)
    assert time.monotonic() - started < TIMEOUT
    await third.wait_for_log_async(re.escape(NOT_FOUND), 2)

    # Two servers that do not answer: the login waits `timeout`, then is refused.
    for server in (first, second):
        os.kill(server.pid, signal.SIGSTOP)
    try:
        carol = _user(nsc, "C", "carol")
        started = time.monotonic()
        assert await _login(third, *carol) == Outcome((AUTH_VIOLATION,), closed=True)
        took = time.monotonic() - started
        assert took < TIMEOUT + 1.0
        waited = took > TIMEOUT - 0.1
        if server_kind == "jetlake":
            assert waited
    finally:
        for server in (first, second):
            os.kill(server.pid, signal.SIGCONT)
    if waited:
        c_key = nsc.public("account", "C")
        await third.wait_for_log_async(rf"\[WRN\] Account \[{c_key}\] fetch took [\d.]+m?s", 2)
        await third.wait_for_log_async(r"\[WRN\] Account fetch failed: fetching jwt timed out", 2)
    else:  # the reference at times refuses at once, as for an account no server holds
        await _logged_twice(third, NOT_FOUND)


async def _logged_twice(server: ServerProcess, line: str) -> None:
    """`line` twice in the log: the first from an earlier refusal, the second from this."""
    await poll_async(lambda: server.log().count(line) >= 2, server.log, 5)


@pytest.fixture
def full_and_cache(server_kind: str, nsc: Nsc, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """A full resolver holding B and C, routed to a cache resolver holding none."""
    ports = [free_port(), free_port()]
    (tmp_path / "jwt0").mkdir()
    for name in ("B", "C"):
        account = nsc.public("account", name)
        (tmp_path / "jwt0" / f"{account}.jwt").write_text(nsc.account_jwt(name))
    full = nsc.full_config(tmp_path / "jwt0")
    start, end = full.index("resolver {"), full.index("}", full.index("resolver {")) + 1
    cache = f'resolver {{ type: cache, dir: "{tmp_path / "cache"}", limit: 1, ttl: "1h" }}'
    servers: list[ServerProcess] = []
    try:
        for i, config in enumerate((full, full[:start] + cache + full[end:])):
            args = cluster_args(NAMES[i], ports[i], [ports[0]] if i else [])
            config += ONE_ROUTE_PER_PEER
            servers.append(
                start_server(server_kind, *args, config=config, tmp_path=tmp_path, name=NAMES[i])
            )
        wait_mesh(servers, NAMES[:2])
        yield servers
    finally:
        stop_all(servers)


async def test_a_cache_keeps_the_newest_fetched(
    full_and_cache: list[ServerProcess], nsc: Nsc, tmp_path: Path, connect: Connect
) -> None:
    cache = full_and_cache[1]
    alice, carol = _user(nsc, "B", "alice"), _user(nsc, "C", "carol")
    await poll_async(lambda: _logged_in(cache, alice), cache.log, 5, interval=0.1)
    b_file = tmp_path / "cache" / f"{nsc.public('account', 'B')}.jwt"
    assert b_file.read_text().strip() == nsc.account_jwt("B")
    assert await _login(cache, *carol) == Outcome((b"+OK",), closed=False)
    c_file = tmp_path / "cache" / f"{nsc.public('account', 'C')}.jwt"
    assert c_file.read_text().strip() == nsc.account_jwt("C")
    assert not b_file.exists()  # `limit: 1`
    # B stays in use while the server runs; the cache lists only what `dir` holds.
    assert await _login(cache, *alice) == Outcome((b"+OK",), closed=False)
    sys_nc = await connect(cache, user_credentials=str(nsc.creds("SYS", "sys")))
    inbox = sys_nc.new_inbox()
    answers = await sys_nc.subscribe(inbox)
    await sys_nc.publish("$SYS.REQ.CLAIMS.LIST", b"", reply=inbox)  # both servers answer
    listed = [json.loads((await answers.next_msg(timeout=2)).data)["data"] for _ in range(2)]
    every = sorted(nsc.public("account", name) for name in ("SYS", "B", "C"))
    assert sorted(listed) == sorted([every, [nsc.public("account", "C")]])
    nobody = _user(nsc, "N", "nobody")
    assert await _login(cache, *nobody) == Outcome((AUTH_VIOLATION,), closed=True)
    await cache.wait_for_log_async(r"\[WRN\] Account fetch failed: account jwt not found", 2)
