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
(`raft_batch`), the plain ones as beats in one compact frame, offered on arrival to
each group's node without a `Message` (`RaftNode._beat`); the rest goes at once, as a
batch of one.

A round trip of one publish at a time crosses the routes four times, two of
them Raft messages, and each paid the general path on both ends: a subject
match and routing decision to send, a match and a subscription's callback to
receive. So a message for P goes straight to the route that alone announced P's
inbox (`Cluster.forwarder`: the same interest rule, so a partition or a peer
not yet listening still drops it), and the route hands one for this server's
inbox straight to `take` (`Cluster.direct`). The subscription stays: it is
what announces the inbox, and it serves whatever comes the general way.
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
from consensus.transport import BeatHandler, Handler
from consensus.types import Message, MessageType, NodeId
from ingest.server.cluster.raft_batch import (
    BEATS_MARK,
    MAX_BEATS,
    Beat,
    Outbox,
    pack_beats,
    pack_one,
    unpack,
    unpack_beats,
)

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
    return group_head(group) + codec.encode(msg)


def group_head(group: str) -> bytes:
    """What goes before each of a group's messages: its name behind its length."""
    name = group.encode()
    if not name:
        raise codec.CodecError("a Raft group needs a name: an empty one marks a beats frame")
    return _NAME_LEN.pack(len(name)) + name


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
        self._beat_handlers: dict[str, BeatHandler] = {}
        self._sub: object | None = None
        self._outbox = Outbox()
        self._beats: dict[NodeId, list[Beat]] = {}  # peer -> beats queued this turn
        self._inboxes: dict[NodeId, tuple[str, bytes]] = {}  # peer -> its inbox subject
        self._mine = inbox(server.server_name)
        self.dropped = 0  # frames for groups this server does not run (deleted, not yet made)
        self.heard: dict[tuple[str, NodeId], int] = {}  # (group, peer) -> monotonic ns

    @property
    def me(self) -> NodeId:
        return self._server.server_name

    def start(self) -> None:
        server = self._server
        system = server.accounts.system_account
        mine = self._mine
        sub = server.subscribe(mine, self._on_frame, account=system)
        server.announce(sub)
        self._sub = sub
        if server.cluster is not None:
            server.cluster.direct[mine.encode()] = (system.name, self.take)

    def stop(self) -> None:
        if self._sub is not None:
            self._server.unsubscribe(self._sub)
            self._sub = None
            if self._server.cluster is not None:
                self._server.cluster.direct.pop(self._mine.encode(), None)

    def transport(self, group: str) -> GroupTransport:
        return GroupTransport(self, group)

    def register(self, group: str, handler: Handler, beat: BeatHandler | None = None) -> None:
        self._handlers[group] = handler
        if beat is None:
            self._beat_handlers.pop(group, None)
        else:
            self._beat_handlers[group] = beat

    def unregister(self, group: str) -> None:
        self._handlers.pop(group, None)
        self._beat_handlers.pop(group, None)

    def send(self, group: str, msg: Message, head: bytes | None = None) -> None:
        """`msg` of `group` to its peer; `head` is `group_head(group)`, when the caller keeps
        it (a group's transport), so that it is not encoded per message."""
        if msg.type in GATHERED and not msg.context:
            value = msg.commit if msg.type == MessageType.HEARTBEAT else msg.index
            self._beat(msg.dst, (group, msg.type, msg.term, value))
            return
        try:
            data = (head or group_head(group)) + codec.encode(msg)
        except codec.CodecError as exc:
            log.error("Raft group %s: cannot send to %s: %s", group, msg.dst, exc)
            return
        if msg.type not in GATHERED:
            self._publish(msg.dst, pack_one(data))
            return
        self._gather()
        self._outbox.add(msg.dst, data)

    def _beat(self, peer: NodeId, beat: Beat) -> None:
        self._gather()
        queued = self._beats.get(peer)
        if queued is None:
            self._beats[peer] = [beat]
        else:
            queued.append(beat)

    def _gather(self) -> None:
        """Send what is gathered at the end of this turn (once for the turn)."""
        if not self._outbox and not self._beats:
            asyncio.get_running_loop().call_soon(self._send_gathered)

    def _send_gathered(self) -> None:
        beats, self._beats = self._beats, {}
        me = self.me
        for peer, queued in beats.items():
            for at in range(0, len(queued), MAX_BEATS):
                try:
                    self._outbox.add(peer, pack_beats(me, peer, queued[at : at + MAX_BEATS]))
                except codec.CodecError as exc:  # lost, as a transport may lose them
                    log.error("Raft beats not sent: %s", exc)
        for peer, payload in self._outbox.take():
            self._publish(peer, payload)

    def _publish(self, peer: NodeId, payload: bytes) -> None:
        subjects = self._inboxes.get(peer)
        if subjects is None:
            subject = inbox(peer)
            subjects = self._inboxes[peer] = (subject, subject.encode())
        server = self._server
        system = server.accounts.system_account
        cluster = server.cluster
        route = cluster.sole_route(system.name, subjects[1]) if cluster is not None else None
        if route is None:
            server.publish(subjects[0], None, None, payload, account=system)
        else:
            route.forward_one(system.name.encode(), subjects[1], payload)

    def flush(self) -> None:
        """Write out everything the server queued, the Raft messages among them (and what
        an apply answered: PubAcks), without waiting for the end of the loop's turn."""
        self._server.flush_dirty()

    def _on_frame(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        self.take(data)

    def take(self, data: bytes) -> None:
        """A routed message to this server's inbox: each of its frames to its group."""
        try:
            frames = unpack(data)
        except codec.CodecError as exc:
            log.warning("Raft frames on %s dropped: %s", self._mine, exc)
            return
        now = time.monotonic_ns()
        for one in frames:
            if one[:2] == BEATS_MARK:
                self._take_beats(one, now)
                continue
            try:
                group, msg = unframe(one)
            except codec.CodecError as exc:
                log.warning("Raft frame on %s dropped: %s", self._mine, exc)
                continue
            handler = self._handlers.get(group)
            if handler is None or msg.dst != self.me:
                self.dropped += 1
                continue
            self.heard[(group, msg.src)] = now
            handler(msg)

    def _take_beats(self, data: bytes, now: int) -> None:
        """Each beat to its group's node in place; one it does not take, and one for a
        group without that, as a whole message. A plain heartbeat's answer is a beat too."""
        try:
            src, dst, beats = unpack_beats(data)
        except codec.CodecError as exc:
            log.warning("Raft beats on %s dropped: %s", self._mine, exc)
            return
        me = self.me
        handlers, beat_handlers, heard = self._handlers, self._beat_handlers, self.heard
        for group, kind, term, value in beats:
            handler = handlers.get(group)
            if handler is None or dst != me:
                self.dropped += 1
                continue
            heard[(group, src)] = now
            beat = beat_handlers.get(group)
            answer = None if beat is None else beat(kind, src, term, value)
            if answer is None:
                if kind == MessageType.HEARTBEAT:
                    handler(Message(kind, src, me, term, commit=value))
                else:
                    handler(Message(kind, src, me, term, index=value))
            elif kind == MessageType.HEARTBEAT:
                self._beat(src, (group, MessageType.HEARTBEAT_RESP, term, answer))


class GroupTransport:
    """The `consensus.transport.Transport` of one group on this server."""

    def __init__(self, routes: RaftRoutes, group: str) -> None:
        self._routes = routes
        self._group = group
        # An empty name is refused where a message is sent, and logged there (`group_head`).
        self._head = group_head(group) if group else None

    @property
    def id(self) -> NodeId:
        return self._routes.me

    def set_handler(self, handler: Handler, beat: BeatHandler | None = None) -> None:
        self._routes.register(self._group, handler, beat)

    def send(self, msg: Message) -> None:
        self._routes.send(self._group, msg, self._head)

    def flush(self) -> None:
        self._routes.flush()

    async def close(self) -> None:
        self._routes.unregister(self._group)
