"""One config shape for every server: each lists all the cluster's routes, its own among
them, by an address it does not listen on by that name (it listens on 0.0.0.0).

Users write clusters that way (one file, templated by server name). The server
learns a route is its own only when the dial reaches itself; until then the
routes seem to name one server more than there are, and a meta group waiting
for that many never formed: JetStream never answered. Both kinds, each server
asked in turn, then an R3 stream used through all three.
"""

from __future__ import annotations

import json
from pathlib import Path

import nats
import pytest

from tests.jscluster.support import eventually, stop
from tests.support.cluster import free_port
from tests.support.servers import ServerProcess, enabled_kinds, start_server

pytestmark = pytest.mark.timeout(120)

SIZE = 3
OWN_ADDRESS = "127.0.0.2"  # loopback too, but not a name the server listens on


def shared_config(name: str, route_port: int, route_ports: list[int], store: Path) -> str:
    routes = ", ".join(f"nats://{OWN_ADDRESS}:{p}" for p in route_ports)
    return f"""
server_name: {name}
jetstream {{ store_dir: "{store}" }}
cluster {{
  name: SHARED
  listen: "0.0.0.0:{route_port}"
  routes: [{routes}]
}}
"""


async def _js_info(server: ServerProcess) -> dict[str, object] | None:
    nc = await nats.connect(server.url)
    try:
        doc = json.loads((await nc.request("$JS.API.INFO", b"", timeout=1)).data)
        return None if "error" in doc else doc
    finally:
        await nc.close()


@pytest.mark.parametrize("kind", enabled_kinds())
async def test_every_server_lists_every_route_its_own_included(kind: str, tmp_path: Path) -> None:
    ports = [free_port() for _ in range(SIZE)]
    servers: list[ServerProcess] = []
    try:
        for i in range(SIZE):
            name = f"N{i}"
            config = shared_config(name, ports[i], ports, tmp_path / name)
            servers.append(start_server(kind, config=config, tmp_path=tmp_path, name=name))
        for server in servers:
            await eventually(lambda server=server: _js_info(server), f"JetStream on {server}")
        nc = await nats.connect([s.url for s in servers])
        try:
            js = nc.jetstream(timeout=5)
            info = await eventually(
                lambda: js.add_stream(name="S", subjects=["s"], num_replicas=SIZE), "R3 stream"
            )
            assert info.cluster is not None and len(info.cluster.replicas or []) == SIZE - 1
            assert (await js.publish("s", b"one")).seq == 1
        finally:
            await nc.close()
    finally:
        stop(servers)
