"""Account JWT imports across a cluster, differentially: an import pushed with `nsc push`
to one server of two serves a requester on the other, whose responder is on the first,
and a stream import carries messages published on one server to subscribers on the
other; an import deleted and pushed stops on both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Connect
from tests.e2e.test_jwt_claims import _until
from tests.support.clients import crossed
from tests.support.cluster import ONE_ROUTE_PER_PEER, cluster_args, free_port, stop_all, wait_mesh
from tests.support.nsc import Nsc
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess, start_server

pytestmark = pytest.mark.soak


@pytest.fixture
def nsc(tmp_path: Path) -> Nsc:
    nsc = Nsc(tmp_path / "nsc")
    nsc.operator()
    for name in ("A", "B"):
        nsc.run("add", "account", name)
        nsc.run("add", "user", "-a", name, name.lower())
    nsc.run("add", "export", "-a", "A", "--subject", "svc.>", "--service")
    nsc.run("add", "export", "-a", "A", "--subject", "events.>")
    return nsc


@pytest.fixture
def pair(server_kind: str, nsc: Nsc, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    ports = [free_port(), free_port()]
    servers = []
    try:
        for i in range(2):
            config = nsc.full_config(tmp_path / f"jwt{i}") + ONE_ROUTE_PER_PEER
            args = cluster_args(f"S{i}", ports[i], [ports[0]] if i else [])
            servers.append(
                start_server(server_kind, *args, config=config, tmp_path=tmp_path, name=f"S{i}")
            )
        wait_mesh(servers, ["S0", "S1"])
        yield servers
    finally:
        stop_all(servers)


async def test_imports_across_the_cluster(
    pair: list[ServerProcess], nsc: Nsc, connect: Connect
) -> None:
    first, second = pair
    account_a = nsc.public("account", "A")
    nsc.run("add", "import", "-a", "B", "--src-account", account_a, "--service",
            "--remote-subject", "svc.>", "--local-subject", "b.>")  # fmt: skip
    nsc.run("add", "import", "-a", "B", "--src-account", account_a,
            "--remote-subject", "events.>", "--local-subject", "ev.>")  # fmt: skip
    assert nsc.run("push", "-A", "-u", first.url).count("jwt updated") >= 6
    a = await connect(first, user_credentials=str(nsc.creds("A", "a")))

    async def answer(msg: object) -> None:
        await a.publish(msg.reply, b"from A " + msg.subject.encode())  # type: ignore[attr-defined]

    await a.subscribe("svc.>", cb=answer)
    await a.flush()
    b = await connect(second, user_credentials=str(nsc.creds("B", "b")))
    await _until(b, "b.x", "from A svc.x", within=10)
    events = await b.subscribe("ev.>")
    await b.flush()
    event = await poll_async(
        lambda: crossed(a, "events.1", events, b"e", 0.3), "B's interest across the route", 10
    )
    assert event.subject == "ev.1"
    nsc.run("delete", "import", "-a", "B", "--subject", "svc.>")
    assert nsc.run("push", "-a", "B", "-u", first.url).count("jwt updated") == 2
    await _until(b, "b.x", "no responders", within=10)
