"""Raft frames gathered per peer (`raft_batch`): order kept, size capped, bad runs refused."""

from __future__ import annotations

import pytest

from consensus.codec import CodecError
from consensus.types import Message, MessageType
from ingest.server.cluster import raft_batch
from ingest.server.cluster.raft_transport import frame, unframe


def test_frames_reach_each_peer_in_order_in_one_payload() -> None:
    box = raft_batch.Outbox()
    for i in range(3):
        box.add("n2", b"to n2 %d" % i)
        box.add("n3", b"to n3 %d" % i)
    taken = list(box.take())
    assert not box and list(box.take()) == []
    assert [(peer, raft_batch.unpack(data)) for peer, data in taken] == [
        ("n2", [b"to n2 0", b"to n2 1", b"to n2 2"]),
        ("n3", [b"to n3 0", b"to n3 1", b"to n3 2"]),
    ]


def test_a_full_payload_starts_another_and_a_long_frame_goes_alone() -> None:
    box = raft_batch.Outbox(max_bytes=20)
    for data in (b"a" * 6, b"b" * 6, b"c" * 6, b"d" * 40, b"e"):
        box.add("n2", data)
    payloads = [raft_batch.unpack(data) for _, data in box.take()]
    assert payloads == [[b"a" * 6, b"b" * 6], [b"c" * 6], [b"d" * 40], [b"e"]]


def test_real_raft_frames_round_trip() -> None:
    msgs = [
        Message(MessageType.HEARTBEAT, "n1", "n2", 7, commit=3),
        Message(MessageType.HEARTBEAT_RESP, "n1", "n2", 7),
    ]
    payload = raft_batch.pack([frame("S-R3F-X", m) for m in msgs])
    assert [unframe(f) for f in raft_batch.unpack(payload)] == [("S-R3F-X", m) for m in msgs]


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\x00\x00", "2 bytes left"),
        (b"\x00\x00\x00\x09abc", "a frame of 9 bytes, 3 left"),
    ],
)
def test_a_broken_payload_is_refused_saying_why(data: bytes, words: str) -> None:
    with pytest.raises(CodecError, match=words):
        raft_batch.unpack(data)


def test_an_empty_payload_has_no_frames() -> None:
    assert raft_batch.unpack(b"") == []


def test_beats_round_trip_in_one_compact_frame() -> None:
    beats = [
        ("S-R3F-X", MessageType.HEARTBEAT, 7, 3),
        ("S-R3F-Ü", MessageType.HEARTBEAT_RESP, 7, 1 << 40),
    ]
    data = raft_batch.pack_beats("n1", "n2", beats)
    assert data.startswith(raft_batch.BEATS_MARK)
    assert raft_batch.unpack_beats(data) == ("n1", "n2", beats)
    assert raft_batch.unpack_beats(raft_batch.pack_beats("n1", "n2", [])) == ("n1", "n2", [])


def test_no_group_frame_opens_like_a_beats_frame() -> None:
    assert not frame("G", Message(MessageType.HEARTBEAT, "n1", "n2", 1)).startswith(
        raft_batch.BEATS_MARK
    )
    with pytest.raises(CodecError, match="needs a name"):
        frame("", Message(MessageType.HEARTBEAT, "n1", "n2", 1))


_GOOD = raft_batch.pack_beats("n1", "n2", [("G", MessageType.HEARTBEAT, 7, 3)])


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\x00\x00\x09" + _GOOD[3:], "no mark and version 1"),
        (_GOOD[:6], "a server name of 2 bytes, 1 left"),
        (_GOOD[:-1], "a group name of 1 bytes, 0 left"),
        (_GOOD[:-5], "bytes left, too few for a beat"),
        (_GOOD[:11] + b"\x04" + _GOOD[12:], "type 4 is not a heartbeat"),
        (_GOOD[:-1] + b"\xff", "a group name is not UTF-8"),
    ],
)
def test_a_broken_beats_frame_is_refused_saying_why(data: bytes, words: str) -> None:
    with pytest.raises(CodecError, match=words):
        raft_batch.unpack_beats(data)


def test_a_beat_that_does_not_fit_its_record_is_refused() -> None:
    with pytest.raises(CodecError, match="beats to n2"):
        raft_batch.pack_beats("n1", "n2", [("G", MessageType.HEARTBEAT, -1, 0)])
