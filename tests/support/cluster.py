"""Clusters of real server processes (reference or jetlake) on loopback, for e2e tests.

Both kinds take the same flags. Route ports are picked by binding port 0 and
releasing it just before the server binds it: each server must know its
peers' ports before any of them starts. Mesh formation is awaited by polling
/routez with a deadline, never by sleeping.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from tests.support.http import _get
from tests.support.servers import ServerError, ServerProcess, start_server

MESH_TIMEOUT = 15.0
POLL = 0.05

# One route per peer on both kinds, so route counts compare (the reference pools 3 by default).
ONE_ROUTE_PER_PEER = "cluster { pool_size: -1 }\n"

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def poll(check: Callable[[], T | None], what: str, timeout: float = MESH_TIMEOUT) -> T:
    """Call `check` until it returns something truthy; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise ServerError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(POLL)


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
