"""One Raft node as a process, replicating a journal of byte strings: for crash tests and
the benchmark, where a node must be a real process that a SIGKILL can take down.

    python -m consensus.node_process --id n1 --dir DIR --voters n1,n2,n3 [--raft-port P]
        [--sync always|NANOSECONDS] [--tick SECONDS] [--snapshot-entries N]

It listens for Raft on --raft-port (0: any) and for clients on a free port,
prints `ready <raft port> <client port>`, then reads one JSON line on stdin
mapping every node id to [host, port], and starts. Clients send lines
`<id> <verb> [arg]` and get `<id> ok [result]` or `<id> err <message>`:
  p <hex>   propose one entry; answered once applied here (the commit ack)
  r         linearizable read point: answered with the applied index
  l         the journal: hex of every applied entry, space-separated
  s         status, as JSON
  t <id>    hand leadership to node <id> (answered at once; watch `s` for the outcome)
Answers to proposals come in commit order; others as they complete.
A crash test may simulate a power loss of the process with the environment
variables `consensus.power_loss` describes (JETLAKE_BOOT_ID_FILE, JETLAKE_SYNC_RECORD).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import struct
import sys
from pathlib import Path

from consensus.core import Config
from consensus.driver import TICK_SECONDS, RaftNode
from consensus.durability import DEFAULT_SYNC_INTERVAL_NS
from consensus.log_store import LogStore
from consensus.tcp import TcpTransport
from consensus.types import Entry, EntryKind, RaftError


class Journal:
    """The replicated state machine: every NORMAL payload applied, in order."""

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.indexes: list[int] = []  # the log index of each applied entry, any kind

    def apply(self, entries: list[Entry]) -> None:
        self.indexes += [e.index for e in entries]
        self.items += [e.data for e in entries if e.kind is EntryKind.NORMAL]

    def snapshot(self) -> bytes:
        return b"".join(struct.pack(">I", len(i)) + i for i in self.items)

    def restore(self, data: bytes) -> None:
        items, at = [], 0
        while at < len(data):
            (size,) = struct.unpack_from(">I", data, at)
            items.append(data[at + 4 : at + 4 + size])
            at += 4 + size
        self.items = items


def parse_sync(text: str) -> int | None:
    """`always` (None) or a window in nanoseconds, as `jetstream { sync_interval }` means."""
    return None if text == "always" else int(text)


def build_node(args: argparse.Namespace, transport: TcpTransport, journal: Journal) -> RaftNode:
    """The node as the arguments describe it, its log opened (and recovered) from --dir."""
    sync_interval_ns = parse_sync(args.sync)
    store, restored = LogStore.open(
        Path(args.dir), name=args.id, acks_unsynced=sync_interval_ns is not None
    )
    return RaftNode(
        Config(args.id, seed=args.seed),
        args.voters.split(","),
        store,
        restored,
        transport,
        apply=journal.apply,
        snapshot=journal.snapshot,
        restore=journal.restore,
        sync_interval_ns=sync_interval_ns,
        tick_seconds=args.tick,
        snapshot_entries=args.snapshot_entries,
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m consensus.node_process", description=__doc__)
    p.add_argument("--id", required=True)
    p.add_argument("--dir", required=True, help="the node's Raft log directory")
    p.add_argument("--voters", required=True, help="comma-separated node ids")
    p.add_argument("--raft-port", type=int, default=0)
    p.add_argument("--sync", default=str(DEFAULT_SYNC_INTERVAL_NS), help="always | nanoseconds")
    p.add_argument("--tick", type=float, default=TICK_SECONDS, help="seconds per Raft tick")
    p.add_argument("--snapshot-entries", type=int, default=0)
    p.add_argument(
        "--seed",
        type=int,
        default=int.from_bytes(os.urandom(4), "big"),
        help="of the election timeouts; nodes sharing one time out together (default: random)",
    )
    return p


class _Client:
    """One client connection: requests in, answers out, each tagged with its request id."""

    def __init__(self, node: RaftNode, journal: Journal, writer: asyncio.StreamWriter) -> None:
        self.node = node
        self.journal = journal
        self.writer = writer
        self.reads: set[asyncio.Future[None]] = set()

    def answer(self, rid: str, error: BaseException | None, result: str = "") -> None:
        if self.writer.is_closing():
            return
        if error is None:
            line = f"{rid} ok {result}".rstrip()
        else:
            line = f"{rid} err {type(error).__name__}: {error}".replace("\n", " ")
        self.writer.write(line.encode() + b"\n")

    async def serve(self, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            try:
                rid, verb, *rest = line.decode().split()
            except ValueError:  # fewer than two words, or not text: no id to answer to
                self.writer.write(b"- err malformed request\n")
                continue
            try:
                self._request(rid, verb, rest)
            except (ValueError, IndexError) as exc:  # bad hex, a missing argument
                self.answer(rid, exc)

    def _request(self, rid: str, verb: str, args: list[str]) -> None:
        if verb == "p":
            self.node.propose([bytes.fromhex(args[0])], lambda e: self.answer(rid, e))
        elif verb == "r":
            self.reads.add(read := asyncio.ensure_future(self._read(rid)))
            read.add_done_callback(self.reads.discard)
        elif verb == "l":
            self.answer(rid, None, " ".join(i.hex() for i in self.journal.items))
        elif verb == "t":
            self.node.transfer_leadership(args[0])
            self.answer(rid, None)
        elif verb == "s":
            self.answer(rid, None, json.dumps(self.node.status(), default=str))
        else:
            raise ValueError(f"unknown verb {verb!r}")

    async def _read(self, rid: str) -> None:
        try:
            applied = await self.node.read_index()
        except RaftError as exc:
            self.answer(rid, exc)
        else:
            self.answer(rid, None, str(applied))


async def _main(args: argparse.Namespace) -> None:
    journal = Journal()
    transport = TcpTransport(args.id, port=args.raft_port)
    raft_port = (await transport.start())[1]
    clients: list[_Client] = []
    node_ready = asyncio.get_running_loop().create_future()

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        client = _Client(await node_ready, journal, writer)
        clients.append(client)
        await client.serve(reader)
        writer.close()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    client_port = server.sockets[0].getsockname()[1]
    print(f"ready {raft_port} {client_port}", flush=True)
    peers = json.loads(await asyncio.to_thread(sys.stdin.readline))
    for peer, (host, port) in peers.items():
        transport.add_peer(peer, (host, port))
    node = build_node(args, transport, journal)
    node.start()
    node_ready.set_result(node)
    await asyncio.to_thread(sys.stdin.readline)  # stdin closed: the parent is done with us
    server.close()
    await node.close()


if __name__ == "__main__":
    with contextlib.suppress(ImportError):  # as the server does: uvloop when installed
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    asyncio.run(_main(parser().parse_args()))
