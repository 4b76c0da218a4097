"""A `Transport` over plain TCP: for tests, benchmarks and single-machine groups.

Each node listens once; for every peer it dials one outgoing connection and
sends only on it, so a pair of nodes shares two connections, one per
direction, and nothing on a connection ever needs a reply. A peer that is
down is redialled with exponential backoff while messages for it are dropped
(Raft resends what matters). Frames sent in one pass of the event loop go
out in one write per peer; a peer that stops reading is dropped from once
its socket buffer passes `max_buffer`, instead of growing memory without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from functools import partial

from consensus.codec import CodecError, FrameDecoder, encode
from consensus.transport import BeatHandler, Handler
from consensus.types import Message, NodeId

log = logging.getLogger("jetlake.raft")

Address = tuple[str, int]
BACKOFF_MIN = 0.02  # seconds before the first redial
BACKOFF_MAX = 1.0
MAX_BUFFER = 8 << 20


class TcpTransport:
    def __init__(
        self,
        node_id: NodeId,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        peers: Mapping[NodeId, Address] | None = None,
        max_buffer: int = MAX_BUFFER,
    ) -> None:
        self._id = node_id
        self._bind = (host, port)
        self._max_buffer = max_buffer
        self._handler: Handler | None = None
        self._server: asyncio.Server | None = None
        self._peers: dict[NodeId, _Peer] = {}
        self._incoming: set[asyncio.Transport] = set()
        self._flush_scheduled = False
        self._closed = False
        self.dropped = 0  # messages not sent: unknown, down or backed-up peer
        for peer, address in (peers or {}).items():
            self.add_peer(peer, address)

    @property
    def id(self) -> NodeId:
        return self._id

    @property
    def address(self) -> Address:
        """Where this node listens (the bound port once `start` returned)."""
        if self._server is None:
            return self._bind
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    async def start(self) -> Address:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Incoming(self), *self._bind, reuse_address=True
        )
        for peer in self._peers.values():
            peer.dial()
        return self.address

    def add_peer(self, node: NodeId, address: Address) -> None:
        """Learn (or move) a peer; dialling starts once the transport has started."""
        old = self._peers.pop(node, None)
        if old is not None:
            old.close()
        if node == self._id:
            return
        peer = _Peer(self, node, address)
        self._peers[node] = peer
        if self._server is not None:
            peer.dial()

    def set_handler(self, handler: Handler, beat: BeatHandler | None = None) -> None:
        self._handler = handler

    def send(self, msg: Message) -> None:
        peer = self._peers.get(msg.dst)
        if peer is None or peer.transport is None or self._closed:
            self.dropped += 1
            return
        if peer.transport.get_write_buffer_size() > self._max_buffer:
            self.dropped += 1
            return
        try:
            peer.out.append(encode(msg))
        except CodecError:
            log.exception("raft %s: cannot encode a message for %s", self._id, msg.dst)
            return
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        for peer in self._peers.values():
            if peer.out:
                frames, peer.out = peer.out, []
                # The peer may have gone since `send` queued these: Raft resends what is lost.
                if peer.transport is not None and not peer.transport.is_closing():
                    peer.transport.write(b"".join(frames))
                else:
                    self.dropped += len(frames)

    def connected(self, node: NodeId) -> bool:
        peer = self._peers.get(node)
        return peer is not None and peer.transport is not None

    def deliver(self, msg: Message) -> None:
        if msg.dst != self._id or self._handler is None or self._closed:
            return
        try:
            self._handler(msg)
        except Exception:  # the connection carries other messages: keep it
            log.exception("raft %s: handling %s from %s failed", self._id, msg.type, msg.src)

    async def close(self) -> None:
        self._closed = True
        for peer in self._peers.values():
            peer.close()
        for transport in self._incoming:
            transport.abort()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        for peer in self._peers.values():
            if peer.task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await peer.task

    def __str__(self) -> str:
        return f"raft transport {self._id}"


class _Peer:
    """The outgoing side to one peer: its connection while up, its dialler always."""

    def __init__(self, owner: TcpTransport, node: NodeId, address: Address) -> None:
        self.owner = owner
        self.node = node
        self.address = address
        self.transport: asyncio.Transport | None = None
        self.out: list[bytes] = []
        self.task: asyncio.Task[None] | None = None

    def dial(self) -> None:
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        delay = BACKOFF_MIN
        while True:
            lost = asyncio.Event()
            try:
                transport, _ = await loop.create_connection(partial(_Outgoing, lost), *self.address)
            except OSError:
                await asyncio.sleep(delay)  # backoff, not synchronisation: nobody waits on it
                delay = min(delay * 2, BACKOFF_MAX)
                continue
            self.transport = transport  # type: ignore[assignment]
            delay = BACKOFF_MIN
            try:
                await lost.wait()
            finally:
                self.transport = None
                self.out = []
                transport.abort()

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.transport is not None:
            self.transport.abort()


class _Outgoing(asyncio.Protocol):
    def __init__(self, lost: asyncio.Event) -> None:
        self._lost = lost

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost.set()


class _Incoming(asyncio.Protocol):
    def __init__(self, owner: TcpTransport) -> None:
        self._owner = owner
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        self._owner._incoming.add(self._transport)

    def data_received(self, data: bytes) -> None:
        try:
            messages = self._decoder.feed(data)
        except CodecError as exc:
            assert self._transport is not None
            peer = self._transport.get_extra_info("peername")
            log.warning("raft %s: dropping connection from %s: %s", self._owner.id, peer, exc)
            self._transport.abort()
            return
        for msg in messages:
            self._owner.deliver(msg)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._owner._incoming.discard(self._transport)
