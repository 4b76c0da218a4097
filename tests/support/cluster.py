"""Clusters of real server processes (reference or jetlake) on loopback, for e2e tests.

Both kinds take the same flags. Route ports are picked before any server starts
(each must know its peers'), from below the kernel's ephemeral range so that no
socket binding port 0 meanwhile takes one (`free_port`). Mesh formation is awaited by polling
/routez with a deadline, never by sleeping.
"""

from __future__ import annotations

import os
import random
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.support.http import _get
from tests.support.poll import poll
from tests.support.servers import ServerError, ServerProcess, start_server

MESH_TIMEOUT = 15.0

# One route per peer on both kinds, so route counts compare (the reference pools 3 by default).
ONE_ROUTE_PER_PEER = "cluster { pool_size: -1 }\n"


def free_port() -> int:
    """A port nothing holds now, for a server to bind later (its peers must know it
    first). Drawn below the kernel's ephemeral range: in between, the kernel hands that
    range's ports to other sockets binding port 0 (a server's client listener, started
    meanwhile, once took a route port picked by binding port 0 here). Each xdist worker
    draws from its own share, and a port is handed out once per run."""
    low, high = _pick_range()
    for _ in range(1000):
        port = random.randrange(low, high)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))  # clashes with a socket on any address
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {low}-{high - 1}")


PORT_FLOOR = 10000
_handed_out: set[int] = set()


def _pick_range() -> tuple[int, int]:
    """This worker's share of the ports from PORT_FLOOR to the ephemeral range's start."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768  # Linux's default start
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    share = max((ephemeral - PORT_FLOOR) // workers, 1000)
    low = PORT_FLOOR + share * (int(worker) % workers if worker.isdigit() else 0)
    return low, low + share


def route_url(port: int, user: str = "") -> str:
    return f"nats://{user + '@' if user else ''}127.0.0.1:{port}"


def cluster_args(name: str, port: int, seeds: list[int], *, cluster: str = "C") -> list[str]:
    args = ["-m", "-1", "-n", name, "--cluster", route_url(port), "--cluster_name", cluster]
    if seeds:
        args += ["--routes", ",".join(route_url(seed) for seed in seeds)]
    return args


def start_cluster(
    kind: str,
    tmp_path: Path,
    size: int = 3,
    *,
    extra: tuple[str, ...] = (),
    config: str = ONE_ROUTE_PER_PEER,
) -> list[ServerProcess]:
    """`size` servers S0..; every other server has S0 as its only seed route."""
    ports = [free_port() for _ in range(size)]

    def start(i: int) -> ServerProcess:
        args = cluster_args(f"S{i}", ports[i], [ports[0]] if i else [])
        return start_server(
            kind, *args, *extra, config=config, tmp_path=tmp_path, name=f"{kind}-S{i}"
        )

    with ThreadPoolExecutor(size) as pool:
        return list(pool.map(start, range(size)))


def routez(server: ServerProcess) -> dict[str, Any]:
    return dict(_get(server.http_url + "/routez?subs=1").json())


def varz(server: ServerProcess) -> dict[str, Any]:
    return dict(_get(server.http_url + "/varz").json())


def peers(server: ServerProcess) -> set[str]:
    """Names of the servers this one has a route to."""
    return {str(r["remote_name"]) for r in routez(server)["routes"]}


def wait_mesh(
    servers: list[ServerProcess], names: list[str], timeout: float = MESH_TIMEOUT
) -> None:
    """Each server in `servers` has a route to every other name in `names`."""
    for server, name in zip(servers, names, strict=True):
        want = set(names) - {name}
        poll(lambda s=server, w=want: peers(s) == w, f"{name} routed to {sorted(want)}", timeout)


def has_route_interest(server: ServerProcess, subject: str) -> bool:
    """Some peer told `server` it has interest in `subject`."""
    return any(subject in (r.get("subscriptions_list") or []) for r in routez(server)["routes"])


def stop_all(servers: list[ServerProcess]) -> None:
    for server in servers:
        if server.running:
            try:
                server.stop(expect_code=None)
            except ServerError:
                server.kill()


def start_js_mesh(
    kind: str, tmp_path: Path, names: list[str], *, config: str
) -> list[ServerProcess]:
    """JetStream servers called `names`, meshed; each names every route, since the
    reference's JetStream cluster refuses to start without configured routes. What
    started is stopped again if one fails."""
    ports = [free_port() for _ in names]
    servers: list[ServerProcess] = []
    try:
        for i, name in enumerate(names):
            servers.append(
                start_server(
                    kind,
                    *cluster_args(name, ports[i], ports),
                    "-js",
                    "-sd",
                    str(tmp_path / f"js{i}"),
                    config=config,
                    tmp_path=tmp_path,
                    name=f"{kind}-{name}",
                )
            )
        wait_mesh(servers, names)
    except BaseException:
        stop_all(servers)
        raise
    return servers
