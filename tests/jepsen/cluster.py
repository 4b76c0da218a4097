"""N servers of one kind, each in its own network namespace, meshed by routes.

Every node listens on the same fixed ports inside its own namespace (no port
races), routes to every other node's address, and is reached by clients at its
namespace address through the lab's bridge. Node ``i`` is named ``S{i}``.

The nodes are configured the way users run them: the stream lives in a named
account (``APP``, JetStream enabled) whose users the clients log in as, beside
a system account; not in the global account.
"""

from __future__ import annotations

import signal
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from consensus.power_loss import BOOT_ID_ENV, SYNC_RECORD_ENV
from tests.support.netns import NetLab
from tests.support.servers import ServerError, ServerProcess, start_server

CLIENT_PORT = 4222
CLUSTER_PORT = 6222
HTTP_PORT = 8222
CLUSTER_NAME = "JEPSEN"
ACCOUNT = "APP"
LOGIN = {"user": "app", "password": "app"}
ACCOUNTS = f"""
accounts {{
  {ACCOUNT} {{
    jetstream: enabled
    users: [{{user: {LOGIN["user"]}, password: {LOGIN["password"]}}}]
  }}
  SYS {{ users: [{{user: sys, password: sys}}] }}
}}
system_account: SYS
"""


@dataclass(frozen=True, slots=True)
class PowerFiles:
    """A jetlake node's stand-ins for the power supply (see consensus/power_loss.py)."""

    sync_record: Path
    boot_id: Path

    def env(self) -> dict[str, str]:
        return {SYNC_RECORD_ENV: str(self.sync_record), BOOT_ID_ENV: str(self.boot_id)}


@dataclass(slots=True)
class NodeSet:
    """The servers of one lab, by index; a killed node restarts on the same ports.

    ``stores`` are the nodes' ``-sd`` directories, by index. ``power`` is empty
    unless the nodes were started able to simulate a power loss.
    """

    lab: NetLab
    servers: list[ServerProcess]
    stores: list[Path]
    power: list[PowerFiles] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.servers[0].kind

    @property
    def names(self) -> list[str]:
        return [node_name(i) for i in range(len(self.servers))]

    @property
    def urls(self) -> list[str]:
        return [f"nats://{addr}:{CLIENT_PORT}" for addr in self.lab.addrs]

    def index(self, name: str) -> int:
        """The node called ``name`` (as a stream's cluster info reports it)."""
        try:
            return self.names.index(name)
        except ValueError:
            raise ServerError(f"no node named {name!r} in {self.names}") from None

    def shut_down(self) -> None:
        """SIGTERM every node at once and require a clean exit (0) from each.

        Used before reading the nodes' stores from disk: a graceful shutdown
        syncs and closes every store, and a node that cannot exit cleanly after
        the run is itself a finding.
        """
        with ThreadPoolExecutor(len(self.servers)) as pool:
            for done in [pool.submit(s.stop) for s in self.servers if s.running]:
                done.result()

    def stop(self) -> None:
        """Stop every server still running; a paused one is resumed first so it can exit."""
        for server in self.servers:
            if server.running:
                server.send_signal(signal.SIGCONT)
                try:
                    server.stop(expect_code=None)
                except ServerError:
                    server.kill()


def node_name(index: int) -> str:
    return f"S{index}"


def node_args(lab: NetLab, index: int, store: Path) -> list[str]:
    """The reference's flags for node ``index``: JetStream, name, ports, routes to all peers."""
    addr = lab.addrs[index]
    peers = [f"nats://{a}:{CLUSTER_PORT}" for i, a in enumerate(lab.addrs) if i != index]
    return [
        "-js", "-sd", str(store), "-n", node_name(index),
        "-a", addr, "-p", str(CLIENT_PORT), "-m", str(HTTP_PORT),
        "--cluster", f"nats://{addr}:{CLUSTER_PORT}", "--cluster_name", CLUSTER_NAME,
        "--routes", ",".join(peers),
    ]  # fmt: skip


def start_nodes(kind: str, lab: NetLab, tmp_path: Path, *, power_loss: bool = False) -> NodeSet:
    """Start one ``kind`` server per namespace, in parallel (each waits for its peers' routes).

    ``power_loss`` (jetlake only) gives each node its own sync record and boot id
    file, through ``env(1)``, which execs like ``ip netns exec`` does: the pid a
    test signals is still the server's.
    """
    size = len(lab.netns)
    power = [_power_files(tmp_path, i) for i in range(size)] if power_loss else []
    stores = [tmp_path / f"{node_name(i)}-store" for i in range(size)]

    def start(i: int) -> ServerProcess:
        env = [f"{k}={v}" for k, v in power[i].env().items()] if power else []
        wrapper = lab.wrapper(i) + (["env", *env] if env else [])
        return start_server(
            kind,
            *node_args(lab, i, stores[i]),
            config=ACCOUNTS,
            tmp_path=tmp_path,
            name=f"{kind}-{node_name(i)}",
            wrapper=wrapper,
        )

    with ThreadPoolExecutor(size) as pool:
        futures = [pool.submit(start, i) for i in range(size)]
    started = [f.result() for f in futures if f.exception() is None]
    nodes = NodeSet(lab, started, stores, power)
    failures = [f.exception() for f in futures if f.exception() is not None]
    if failures:
        nodes.stop()
        raise failures[0]  # type: ignore[misc]
    return nodes


def _power_files(tmp_path: Path, index: int) -> PowerFiles:
    """An empty sync record and a first boot id, so the first start is an ordinary boot."""
    files = PowerFiles(
        tmp_path / f"{node_name(index)}.syncs", tmp_path / f"{node_name(index)}.boot_id"
    )
    files.sync_record.touch()
    files.boot_id.write_text(f"{uuid.uuid4()}\n")
    return files
