"""Three-server JetStream clusters (reference or jetlake) for the clustering tests."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import StreamConfig, StreamInfo

from tests.support.cluster import ONE_ROUTE_PER_PEER, cluster_args, free_port, wait_mesh
from tests.support.http import _get
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess, print_logs, start_server

T = TypeVar("T")
ELECTION_DEADLINE = 20.0  # the reference's election timeout is 4-9 s: leave it room
PORT_ATTEMPTS = 3


def start_js_cluster(
    kind: str,
    tmp_path: Path,
    size: int = 3,
    *,
    extra: tuple[str, ...] = (),
    config: str = "",
    own: Sequence[str] = (),
) -> list[ServerProcess]:
    """`size` servers S0.. with JetStream, each naming every route (a JetStream cluster
    needs configured routes on both kinds).

    Route ports are picked before any server binds them; another process on the
    machine may take one meanwhile, so a start that lost its port (or whose mesh did not
    form in time, which is how a lost route port can show) is tried again with fresh
    ones (in a fresh folder), a bounded number of times. `own[i]` is more config for
    server i alone."""
    for attempt in range(PORT_ATTEMPTS - 1):
        try:
            return _start(kind, tmp_path / f"try{attempt}", size, extra, config, own)
        except AssertionError as exc:  # a server's start or the mesh poll failed
            if "address already in use" not in str(exc) and " routed to " not in str(exc):
                raise
    return _start(kind, tmp_path / "last", size, extra, config, own)


def _start(
    kind: str,
    tmp_path: Path,
    size: int,
    extra: tuple[str, ...],
    config: str,
    own: Sequence[str],
) -> list[ServerProcess]:
    ports = [free_port() for _ in range(size)]
    servers: list[ServerProcess] = []
    try:
        for i in range(size):
            args = cluster_args(f"S{i}", ports[i], ports)
            store = tmp_path / kind / f"S{i}"
            flags = [*args, "-js", "-sd", str(store), *extra]
            text = ONE_ROUTE_PER_PEER + config + (own[i] if i < len(own) else "")
            servers.append(
                start_server(kind, *flags, config=text, tmp_path=tmp_path / kind, name=f"S{i}")
            )
        wait_mesh(servers, [f"S{i}" for i in range(size)])
    except BaseException:
        stop(servers)
        raise
    return servers


def stop(servers: list[ServerProcess]) -> None:
    for server in servers:
        if server.running:
            server.kill()


def urls(servers: list[ServerProcess]) -> list[str]:
    return [s.url for s in servers if s.running]


async def connect(servers: list[ServerProcess], **kwargs: Any) -> Client:
    return await nats.connect(
        servers=urls(servers), max_reconnect_attempts=-1, reconnect_time_wait=0.1, **kwargs
    )


async def eventually(
    check: Callable[[], Awaitable[T | None]], what: str, timeout: float = ELECTION_DEADLINE
) -> T:
    """Poll `check` over a cluster whose roles may be moving: a timeout or no-responders
    meanwhile counts as not yet, and an election gets its full deadline."""
    return await poll_async(check, what, timeout, interval=0.1, retry=Exception)


async def request(nc: Client, subject: str, body: bytes = b"", timeout: float = 5.0) -> Any:
    msg = await nc.request(subject, body, timeout=timeout)
    return json.loads(msg.data)


def http_json(server: ServerProcess, path: str) -> dict[str, Any]:
    return dict(_get(f"{server.http_url}{path}").json())


def jsz(server: ServerProcess, query: str = "") -> dict[str, Any]:
    return http_json(server, "/jsz" + query)


def stream_messages(server: ServerProcess, stream: str) -> int | None:
    """What this server's own replica holds (None: it has no replica)."""
    doc = jsz(server, "?streams=true")
    for account in doc.get("account_details") or []:
        for detail in account.get("stream_detail") or []:
            if detail["name"] == stream:
                return int(detail["state"]["messages"])
    return None


def leader_of(info: StreamInfo, servers: list[ServerProcess]) -> ServerProcess:
    assert info.cluster is not None and info.cluster.leader
    return next(s for s in servers if server_name(s) == info.cluster.leader)


def server_name(server: ServerProcess) -> str:
    """The `-n` a test started the server with."""
    args = server.args
    return str(args[args.index("-n") + 1])


# A user's shape of configuration: a named account with JetStream beside a system account.
NAMED_ACCOUNTS = """
accounts {
  APP { jetstream: enabled, users: [{user: app, password: app}] }
  SYS { users: [{user: sys, password: sys}] }
}
system_account: SYS
"""
APP_LOGIN = {"user": "app", "password": "app"}


@dataclass
class Running:
    servers: list[ServerProcess]
    nc: Client
    js: JetStreamContext

    async def add_stream(self, name: str, subjects: list[str], replicas: int = 3) -> StreamInfo:
        """Create a stream, retrying while the meta group has no leader yet."""
        config = StreamConfig(name=name, subjects=subjects, num_replicas=replicas)
        return await eventually(lambda: self.js.add_stream(config), f"stream {name} created")

    async def leader(self, stream: str) -> ServerProcess:
        return leader_of(await self.js.stream_info(stream), self.servers)

    async def lead_on(self, stream: str, server: ServerProcess) -> None:
        """Step the stream's leader down, preferring `server`, until `server` is elected
        (without a preference the most caught-up member takes over, ties by name, so
        stepdowns can alternate between two servers and never reach a third)."""
        name = server_name(server)
        body = json.dumps({"placement": {"preferred": name}}).encode()

        async def led_there() -> bool:
            info = await self.js.stream_info(stream)
            if info.cluster is not None and info.cluster.leader == name:
                return True
            await request(self.nc, f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", body)
            return False

        await eventually(led_there, f"{name} leading {stream}", timeout=60)


@contextlib.asynccontextmanager
async def js_cluster(
    kind: str,
    tmp_path: Path,
    *,
    size: int = 3,
    config: str = "",
    own: Sequence[str] = (),
    timeout: float = 2.0,
    **login: str,
) -> AsyncIterator[Running]:
    """`size` servers and a client connected to all of them; all stopped afterwards, and
    their logs printed when the test body failed (they are in its captured output)."""
    servers = start_js_cluster(kind, tmp_path, size, config=config, own=own)
    try:
        nc = await connect(servers, **login)
        try:
            yield Running(servers, nc, nc.jetstream(timeout=timeout))
        finally:
            await nc.close()
    except Exception:
        print_logs(servers)
        raise
    finally:
        stop(servers)
