"""Raft messages straight between route connections: sent to the one route that announced
the peer's inbox, taken on arrival by the inbox's handler, the general path otherwise.

Two servers' Raft ends (`RaftRoutes` over a real `Cluster`) with the route connection
between them replaced by the route codec: what one frames as an RMSG, the other parses
and takes, as a route does."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from consensus.types import Entry, EntryKind, Message, MessageType
from ingest.parser.routes import RMsg, RouteCodec, encode_rmsg
from ingest.server.cluster.mesh import Cluster
from ingest.server.cluster.raft_batch import pack, pack_beats, unpack, unpack_beats
from ingest.server.cluster.raft_transport import RaftRoutes, frame, inbox
from ingest.server.cluster.route import Route
from ingest.server.cluster.settings import ClusterConfig

SYS = "$SYS"


@dataclass(eq=False)
class Wire:
    """A route connection as the sending `Cluster` sees it: what `forward_run` got, framed,
    and what the route's own `forward_one` framed."""

    closed: bool = False
    superseded: bool = False
    sent: list[bytes] = field(default_factory=list)

    def forward_run(
        self, account: bytes, subject: bytes, replies: list[bytes], payloads: list[bytes]
    ) -> None:
        for reply, payload in zip(replies, payloads, strict=True):
            self.sent.append(encode_rmsg(account, subject, reply, (), None, payload))

    forward_one = Route.forward_one

    def forward_acks(self, data: bytes, msgs: int, size: int) -> None:
        self.sent.append(data)


class Host:
    """The server as `RaftRoutes` and `Cluster` use it; `published` is the general path."""

    def __init__(self, name: str) -> None:
        self.server_name = self.server_id = name
        self.accounts = SimpleNamespace(system_account=SimpleNamespace(name=SYS), get=self._get)
        self.in_msgs = self.in_bytes = 0
        self.published: list[tuple[str, bytes]] = []
        self.routed: list[bytes] = []
        self.cluster = Cluster(self, ClusterConfig(name="c"))  # type: ignore[arg-type]

    def _get(self, name: str) -> object:
        return SimpleNamespace(name=name)

    def subscribe(self, subject: str, callback: Any, *, account: Any = None) -> object:
        return (subject, callback)

    def announce(self, sub: object) -> None:
        pass

    def unsubscribe(self, token: object) -> None:
        pass

    def publish(self, subject: str, reply: Any, hdr: Any, data: bytes, *, account: Any) -> None:
        self.published.append((subject, data))

    def route_from_peer(self, account: Any, subject: bytes, *args: Any, **kwargs: Any) -> None:
        self.routed.append(subject)


def append(src: str, dst: str) -> Message:
    entry = Entry(3, 8, EntryKind.NORMAL, b"publish")
    return Message(MessageType.APPEND, src, dst, 3, log_term=3, index=7, entries=(entry,))


def ends() -> tuple[Host, RaftRoutes, Wire, Host, RaftRoutes, list[Message]]:
    """n1 sending over `wire`, on which n2 announced its inbox; n2's group G listening."""
    sender, receiver = Host("n1"), Host("n2")
    wire = Wire()
    sender.cluster.routes["n2"] = wire  # type: ignore[assignment]
    sender.cluster.remote.add(wire, inbox("n2"), None, 1, SYS)
    out, into = RaftRoutes(sender), RaftRoutes(receiver)  # type: ignore[arg-type]
    out.start()
    into.start()
    got: list[Message] = []
    into.register("G", got.append)
    return sender, out, wire, receiver, into, got


def carry(wire: Wire, receiver: Host) -> None:
    ops = RouteCodec().receive(b"".join(wire.sent))
    wire.sent.clear()
    for op in ops:
        assert isinstance(op, RMsg)
        receiver.cluster.deliver_inbound(op)


async def test_an_append_goes_straight_to_the_route_and_to_its_group() -> None:
    sender, out, wire, receiver, _, got = ends()
    msg = append("n1", "n2")
    out.send("G", msg)
    assert sender.published == [] and len(wire.sent) == 1
    carry(wire, receiver)
    assert got == [msg]
    assert receiver.routed == []  # no subscription match on the way in
    assert receiver.in_msgs == 1


async def test_without_a_route_that_alone_announced_the_inbox_it_is_published() -> None:
    sender, out, wire, _, _, _ = ends()
    wire.closed = True  # its dialler has not noticed yet: the general path decides
    out.send("G", append("n1", "n2"))
    assert wire.sent == [] and [s for s, _ in sender.published] == [inbox("n2")]
    sender.published.clear()
    out.send("G", append("n1", "n3"))  # no peer announced n3's inbox
    assert [s for s, _ in sender.published] == [inbox("n3")]


async def test_another_account_or_subject_takes_the_general_path() -> None:
    _, _, _, receiver, into, got = ends()
    payload = pack([frame("G", append("n1", "n2"))])
    mine = inbox("n2").encode()
    for account, subject in (("APP", mine), (SYS, inbox("n3").encode())):
        receiver.cluster.deliver_inbound(RMsg(account, subject, b"", (), None, payload))
    assert got == [] and receiver.routed == [mine, inbox("n3").encode()]
    into.stop()
    receiver.cluster.deliver_inbound(RMsg(SYS, mine, b"", (), None, payload))
    assert got == [] and receiver.routed[-1] == mine


async def test_frames_for_another_server_or_an_unknown_group_or_garbage_are_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, _, _, receiver, into, got = ends()
    mine = inbox("n2").encode()
    frames = [frame("G", append("n1", "n9")), frame("H", append("n1", "n2")), b"\x00\x01"]
    receiver.cluster.deliver_inbound(RMsg(SYS, mine, b"", (), None, pack(frames)))
    receiver.cluster.deliver_inbound(RMsg(SYS, mine, b"", (), None, b"\x00\x00"))
    assert got == [] and into.dropped == 2
    warnings = [r.getMessage() for r in caplog.records]
    assert any(w.startswith(f"Raft frame on {inbox('n2')} dropped") for w in warnings)
    assert any(w.startswith(f"Raft frames on {inbox('n2')} dropped") for w in warnings)


async def test_plain_heartbeats_go_as_beats_and_are_answered_in_place() -> None:
    _, out, wire, receiver, into, got = ends()
    beats: list[tuple[MessageType, str, int, int]] = []

    def beat(kind: MessageType, src: str, term: int, value: int) -> int | None:
        beats.append((kind, src, term, value))
        return 5 if kind == MessageType.HEARTBEAT else None

    into.register("G", got.append, beat)
    read = Message(MessageType.HEARTBEAT, "n1", "n2", 3, commit=2, context=b"round 1")
    out.send("G", Message(MessageType.HEARTBEAT, "n1", "n2", 3, commit=2))
    out.send("G", read)  # a read round: a whole message
    await asyncio.sleep(0)  # the turn's end, when what was gathered leaves
    carry(wire, receiver)
    assert beats == [(MessageType.HEARTBEAT, "n1", 3, 2)] and got == [read]
    await asyncio.sleep(0)
    ((subject, payload),) = receiver.published  # no route back to n1 in this test
    assert subject == inbox("n1")
    answer = ("G", MessageType.HEARTBEAT_RESP, 3, 5)
    assert [unpack_beats(f) for f in unpack(payload)] == [("n2", "n1", [answer])]


async def test_a_beat_not_taken_or_not_for_this_server_or_broken_is_not_lost_silently(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, _, _, receiver, into, got = ends()
    into.register("G", got.append, lambda kind, src, term, value: None)
    mine = inbox("n2").encode()
    frames = [
        pack_beats("n1", "n2", [("G", MessageType.HEARTBEAT_RESP, 3, 9)]),
        pack_beats("n1", "n9", [("G", MessageType.HEARTBEAT, 3, 9)]),
        pack_beats("n1", "n2", [("H", MessageType.HEARTBEAT, 3, 9)]),
        b"\x00\x00\x07",
    ]
    receiver.cluster.deliver_inbound(RMsg(SYS, mine, b"", (), None, pack(frames)))
    assert got == [Message(MessageType.HEARTBEAT_RESP, "n1", "n2", 3, index=9)]
    assert into.dropped == 2
    warnings = [r.getMessage() for r in caplog.records]
    assert any(w.startswith(f"Raft beats on {inbox('n2')} dropped: beats frame") for w in warnings)
