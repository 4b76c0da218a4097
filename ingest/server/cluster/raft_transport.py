"""Raft over the routes: every Raft group of a server talks through the cluster mesh.

A separate Raft port would be one more listener to configure, firewall and
partition; the reference carries its Raft traffic as system-account messages
over the routes, and so does jetlake. Each server subscribes (and announces)
one inbox in the system account, `$NRG.<digest of its server name>`; a
message for peer P is published to P's inbox, with the group's name in front
of the encoded Raft message. Routing does the rest: one hop over the route to
P, dropped when no route reaches P (a partition), which is what Raft expects
of a transport (`consensus.transport`). The heartbeats (and their answers)
that all groups send to P in one turn of the event loop go as one message
(`raft_batch`); the rest goes at once, as a batch of one.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import struct
import time
from typing import TYPE_CHECKING

from consensus import codec
from consensus.transport import Handler
from consensus.types import Message, MessageType, NodeId
from ingest.server.cluster.raft_batch import Outbox, pack, unpack

if TYPE_CHECKING:
    from ingest.server.cluster.ports import SystemBus

log = logging.getLogger("jetlake.raft")

INBOX_PREFIX = "$NRG."
_NAME_LEN = struct.Struct(">H")
# Liveness and commit news, every tick of every group: gathered per peer for a turn.
# Raft takes them reordered against the APPENDs that go at once.
GATHERED = frozenset((MessageType.HEARTBEAT, MessageType.HEARTBEAT_RESP))


def inbox(server_name: str) -> str:
    """A subject token for any server name (names may hold dots or spaces)."""
    digest = hashlib.sha256(server_name.encode()).digest()[:10]
    return INBOX_PREFIX + base64.b32encode(digest).decode().rstrip("=")


def frame(group: str, msg: Message) -> bytes:
    name = group.encode()
    return _NAME_LEN.pack(len(name)) + name + codec.encode(msg)


def unframe(data: bytes) -> tuple[str, Message]:
    """Raises `codec.CodecError` on anything that is not a frame built by `frame`."""
    if len(data) < _NAME_LEN.size:
        raise codec.CodecError("raft frame shorter than its group name's length")
    (size,) = _NAME_LEN.unpack_from(data)
    end = _NAME_LEN.size + size
    try:
        group = data[_NAME_LEN.size : end].decode()
    except UnicodeDecodeError as exc:
        raise codec.CodecError(f"raft frame group name is not UTF-8: {exc}") from None
    return group, codec.decode(data[end:])


class RaftRoutes:
    """The server's end: one inbox, a handler per group, sends through the mesh."""

    def __init__(self, server: SystemBus) -> None:
        self._server = server
        self._handlers: dict[str, Handler] = {}
        self._sub: object | None = None
        self._outbox = Outbox()
        self._inboxes: dict[NodeId, str] = {}  # peer -> its inbox subject
        self.dropped = 0  # frames for groups this server does not run (deleted, not yet made)
        self.heard: dict[tuple[str, NodeId], int] = {}  # (group, peer) -> monotonic ns

    @property
    def me(self) -> NodeId:
        return self._server.server_name

    def start(self) -> None:
        server = self._server
        sub = server.subscribe(
            inbox(self.me), self._on_frame, account=server.accounts.system_account
        )
        server.announce(sub)
        self._sub = sub

    def stop(self) -> None:
        if self._sub is not None:
            self._server.unsubscribe(self._sub)
            self._sub = None

    def transport(self, group: str) -> GroupTransport:
        return GroupTransport(self, group)

    def register(self, group: str, handler: Handler) -> None:
        self._handlers[group] = handler

    def unregister(self, group: str) -> None:
        self._handlers.pop(group, None)

    def send(self, group: str, msg: Message) -> None:
        try:
            data = frame(group, msg)
        except codec.CodecError as exc:
            log.error("Raft group %s: cannot send to %s: %s", group, msg.dst, exc)
            return
        if msg.type not in GATHERED:
            self._publish(msg.dst, pack([data]))
            return
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._send_gathered)
        self._outbox.add(msg.dst, data)

    def _send_gathered(self) -> None:
        for peer, payload in self._outbox.take():
            self._publish(peer, payload)

    def _publish(self, peer: NodeId, payload: bytes) -> None:
        subject = self._inboxes.get(peer)
        if subject is None:
            subject = self._inboxes[peer] = inbox(peer)
        server = self._server
        server.publish(subject, None, None, payload, account=server.accounts.system_account)

    def flush(self) -> None:
        """Write out everything the server queued, the Raft messages among them (and what
        an apply answered: PubAcks), without waiting for the end of the loop's turn."""
        self._server.flush_dirty()

    def _on_frame(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        try:
            frames = unpack(data)
        except codec.CodecError as exc:
            log.warning("Raft frames on %s dropped: %s", subject, exc)
            return
        now = time.monotonic_ns()
        for one in frames:
            try:
                group, msg = unframe(one)
            except codec.CodecError as exc:
                log.warning("Raft frame on %s dropped: %s", subject, exc)
                continue
            handler = self._handlers.get(group)
            if handler is None or msg.dst != self.me:
                self.dropped += 1
                continue
            self.heard[(group, msg.src)] = now
            handler(msg)


class GroupTransport:
    """The `consensus.transport.Transport` of one group on this server."""

    def __init__(self, routes: RaftRoutes, group: str) -> None:
        self._routes = routes
        self._group = group

    @property
    def id(self) -> NodeId:
        return self._routes.me

    def set_handler(self, handler: Handler) -> None:
        self._routes.register(self._group, handler)

    def send(self, msg: Message) -> None:
        self._routes.send(self._group, msg)

    def flush(self) -> None:
        self._routes.flush()

    async def close(self) -> None:
        self._routes.unregister(self._group)
