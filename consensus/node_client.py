"""The parent's side of `consensus.node_process`: start node processes, wire them up,
talk to them. Used by the crash tests and the Raft benchmark."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from consensus.types import NodeId

START_SECONDS = 20.0


class NodeProcessError(RuntimeError):
    """A node process did not start or answered with an error."""


class NodeProcess:
    """One child running `python -m consensus.node_process`; its stderr goes to `log`.

    `env`: variables set for it on top of this process's (a crash test's power-loss
    stand-ins, see `consensus.power_loss`)."""

    def __init__(
        self,
        node_id: NodeId,
        directory: Path,
        args: Sequence[str],
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.id = node_id
        self.dir = directory
        self.args = list(args)
        self.env = dict(env or {})
        self.log = directory.with_name(directory.name + ".log")
        self.proc: asyncio.subprocess.Process | None = None
        self.raft_port = 0
        self.client_port = 0

    async def start(self, voters: Sequence[NodeId], raft_port: int = 0) -> None:
        """Spawn it and read its ports; it waits for `connect` before starting Raft."""
        command = [
            sys.executable,
            "-m",
            "consensus.node_process",
            "--id",
            self.id,
            "--dir",
            str(self.dir),
            "--voters",
            ",".join(voters),
            "--raft-port",
            str(raft_port or self.raft_port),
            *self.args,
        ]
        with self.log.open("ab") as sink:
            self.proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=sink,
                env={**os.environ, **self.env} if self.env else None,
            )
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), START_SECONDS)
        except TimeoutError:
            line = b""
        if not line.startswith(b"ready "):
            if line:
                await self.kill()
            else:  # it exited (or closed stdout): reap it, its log says why
                await asyncio.wait_for(self.proc.wait(), START_SECONDS)
            raise NodeProcessError(f"node {self.id} did not start: {self.log.read_text()[-2000:]}")
        self.raft_port, self.client_port = map(int, line.split()[1:])

    def connect(self, addresses: dict[NodeId, tuple[str, int]]) -> None:
        """Tell it where every node's Raft listener is; it starts its node."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(addresses).encode() + b"\n")

    async def kill(self) -> None:
        """SIGKILL: no flush, no goodbye, as a crash."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()

    async def stop(self) -> None:
        """Close its stdin (it closes its node and exits); SIGKILL if it does not."""
        if self.proc is None or self.proc.returncode is not None:
            return
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            await self.kill()


async def start_group(
    root: Path,
    ids: Sequence[NodeId],
    args: Sequence[str],
    *,
    local: tuple[NodeId, int] | None = None,
    env: Mapping[NodeId, Mapping[str, str]] | None = None,
) -> list[NodeProcess]:
    """Start a process per id (its log under root/id) and connect them to each other.

    `local`: a node of the group that runs in the caller (its id and Raft port).
    `env`: extra environment variables per node id.
    """
    voters = [*ids, *([local[0]] if local else [])]
    nodes = [NodeProcess(n, root / n, args, (env or {}).get(n)) for n in ids]
    for node in nodes:
        await node.start(voters)
    addresses = {n.id: ("127.0.0.1", n.raft_port) for n in nodes}
    if local:
        addresses[local[0]] = ("127.0.0.1", local[1])
    for node in nodes:
        node.connect(addresses)
    return nodes


class Client:
    """A line-protocol connection to one node process; requests may overlap."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count()
        self._waiting: dict[str, asyncio.Future[str]] = {}
        self._task = asyncio.ensure_future(self._dispatch())

    @classmethod
    async def connect(cls, port: int) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def send(self, verb: str, arg: str = "") -> asyncio.Future[str]:
        """The answer's result; NodeProcessError for an `err` answer or a lost connection."""
        rid = str(next(self._ids))
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = future
        self._writer.write(f"{rid} {verb} {arg}\n".encode())
        return future

    async def _dispatch(self) -> None:
        try:
            while line := await self._reader.readline():
                rid, status, *rest = line.decode().rstrip("\n").split(" ", 2)
                future = self._waiting.pop(rid, None)
                if future is None:  # an answer to no request of ours
                    continue
                if status == "ok":
                    future.set_result(rest[0] if rest else "")
                else:
                    future.set_exception(NodeProcessError(" ".join(rest)))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        lost = NodeProcessError("connection to the node lost")
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(lost)
        self._waiting.clear()

    async def status(self) -> dict[str, object]:
        return dict(json.loads(await self.send("s")))

    async def close(self) -> None:
        self._writer.close()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await self._task
