"""The meta group's pure parts: its operations, placement, and the Raft frame over routes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from consensus.codec import CodecError
from consensus.types import ConfChange, ConfOp, Entry, EntryKind, Message, MessageType
from ingest.server.cluster.raft_transport import frame, inbox, unframe
from ingest.server.jetstream.cluster import meta
from ingest.server.jetstream.cluster.groups import membership_step
from ingest.server.jetstream.cluster.meta import MetaOpError, MetaState, StreamAssignment
from ingest.server.jetstream.cluster.placement import choose_peers, group_name
from ingest.server.jetstream.cluster.requests import stream_token
from log.errors import ApiError


def assignment(name: str = "S", peers: tuple[str, ...] = ("A", "B", "C")) -> StreamAssignment:
    return StreamAssignment(
        account="$G",
        config={"name": name, "subjects": [f"{name}.>"]},
        peers=peers,
        group=f"S-R{len(peers)}F-{name}",
        created="2026-01-01T00:00:00Z",
        reply="_INBOX.x",
    )


def test_operations_round_trip_and_replay_changes_nothing() -> None:
    state = MetaState()
    ops = [
        meta.add_stream(assignment("S")),
        meta.add_stream(assignment("T", ("A", "B"))),
        meta.update_stream(
            "$G", {"name": "S", "subjects": ["S.>"], "max_msgs": 5}, ("A", "B", "C")
        ),
        meta.remove_stream("$G", "T"),
    ]
    changes = [state.apply(meta.decode(op)) for op in ops]
    assert [c.kind for c in changes if c is not None] == ["added", "added", "updated", "removed"]
    assert sorted(state.streams) == [("$G", "S")]
    assert state.streams[("$G", "S")].config["max_msgs"] == 5
    assert state.streams[("$G", "S")].reply == ""  # an update is answered by its own request
    before = dict(state.streams)
    replayed = [state.apply(meta.decode(op)) for op in ops[:1] + ops[2:]]
    assert replayed == [None, None, None]  # a restart replays the meta log: idempotent
    assert state.streams == before


def test_a_stream_created_again_is_a_new_group() -> None:
    state = MetaState()
    state.apply(meta.decode(meta.add_stream(assignment("S"))))
    again = StreamAssignment("$G", {"name": "S"}, ("A",), "S-R1F-new", "2026-01-02T00:00:00Z")
    change = state.apply(meta.decode(meta.add_stream(again)))
    assert change is not None and change.kind == "added" and change.previous is not None
    assert state.load() == {"A": 1}


def test_a_snapshot_restored_yields_the_changes_a_replay_would_have_made() -> None:
    leader = MetaState()
    for op in (
        meta.add_stream(assignment("KEEP")),
        meta.add_stream(assignment("MOVED")),
        meta.add_stream(assignment("NEW", ("A",))),
        meta.update_stream("$G", {"name": "MOVED", "subjects": ["m"]}, ("A", "B", "D")),
    ):
        leader.apply(meta.decode(op))
    behind = MetaState()
    for op in (
        meta.add_stream(assignment("KEEP")),
        meta.add_stream(assignment("MOVED")),
        meta.add_stream(assignment("GONE")),
        meta.add_stream(replace(assignment("NEW", ("A",)), group="NEW-old")),
    ):
        behind.apply(meta.decode(op))
    changes = behind.restore(leader.snapshot())
    kinds = {c.assignment.name: c.kind for c in changes}
    assert kinds == {"GONE": "removed", "NEW": "added", "MOVED": "updated"}
    assert behind.streams[("$G", "MOVED")].peers == ("A", "B", "D")
    assert behind.streams == {k: replace(v, reply="") for k, v in leader.streams.items()}
    assert behind.restore(leader.snapshot()) == []  # restoring the same state changes nothing
    with pytest.raises(MetaOpError):
        MetaState().restore(b'{"streams": 3}')


@pytest.mark.parametrize(
    "data", [b"", b"[]", b"{", b'{"op":"nope"}', b'{"op":"add_stream","account":"$G"}']
)
def test_bad_meta_entries_are_typed_errors(data: bytes) -> None:
    with pytest.raises(MetaOpError):
        MetaState().apply(meta.decode(data))


def test_placement_prefers_the_least_loaded_and_refuses_what_cannot_be_placed() -> None:
    online = {"A", "B", "C", "D"}
    peers = choose_peers("S", 3, online, {"A": 5, "B": 0, "C": 1, "D": 0}, cluster="C")
    assert set(peers) == {"B", "C", "D"}
    spread = {choose_peers(f"S{i}", 1, {"A", "B"}, {}, cluster="C")[0] for i in range(20)}
    assert spread == {"A", "B"}  # ties broken by the stream's name, not always the first
    down = choose_peers("S", 2, online, {}, online={"A", "B"}, cluster="C")
    assert set(down) == {"A", "B"}  # servers that are up come first
    with pytest.raises(ApiError) as too_many:
        choose_peers("S", 5, online, {}, cluster="C")
    assert too_many.value.err_code == 10005
    with pytest.raises(ApiError) as over_max:
        choose_peers("S", 6, online, {}, cluster="C")
    assert over_max.value.err_code == 10052
    tags = {"A": frozenset({"ssd", "az:1"}), "B": frozenset({"az:2"}), "C": frozenset({"ssd"})}
    assert set(choose_peers("S", 2, online, {}, cluster="C", tags=tags, wanted_tags=["SSD"])) == {
        "A",
        "C",
    }
    with pytest.raises(ApiError, match=r"tags not matched \['az:2'\]"):
        choose_peers("S", 2, online, {}, cluster="C", tags=tags, wanted_tags=["az:2"])
    with pytest.raises(ApiError) as elsewhere:
        choose_peers("S", 1, online, {}, cluster="C", wanted_cluster="OTHER")
    assert elsewhere.value.err_code == 10005


def test_placement_needs_room_for_max_bytes_and_prefers_room_among_equals() -> None:
    servers = {"A", "B", "C"}
    room = {"A": 10, "B": 100, "C": 30}
    assert choose_peers("S", 1, servers, {}, cluster="C", available=room, need=50) == ("B",)
    assert set(choose_peers("S", 2, servers, {}, cluster="C", available=room, need=20)) == {
        "B",
        "C",
    }
    assert choose_peers("S", 1, servers, {"B": 1}, cluster="C", available=room) == ("C",)
    assert choose_peers("S", 1, servers, {}, cluster="C", available=room) == ("B",)
    for replicas, need in ((1, 200), (3, 20)):
        with pytest.raises(ApiError, match="insufficient storage") as full:
            choose_peers("S", replicas, servers, {}, cluster="C", available=room, need=need)
        assert full.value.err_code == 10005
    unknown = choose_peers("S", 1, {"A", "D"}, {}, cluster="C", available=room, need=50)
    assert unknown == ("D",)  # a server that never said its size is not ruled out


def test_group_names_say_replicas_and_storage_and_never_repeat() -> None:
    a, b = group_name("S", 3, "file", b"1"), group_name("S", 3, "file", b"2")
    assert a.startswith("S-R3F-") and b.startswith("S-R3F-") and a != b
    assert group_name("S", 1, "memory", b"1").startswith("S-R1M-")


def test_raft_frames_carry_the_group_and_reject_garbage() -> None:
    msg = Message(
        MessageType.APPEND, src="A", dst="B", term=3, index=7, log_term=2, commit=5,
        entries=(Entry(term=3, index=8, kind=EntryKind.NORMAL, data=b"x" * 10),),
    )  # fmt: skip
    group, back = unframe(frame("S-R3F-abc", msg))
    assert group == "S-R3F-abc" and back == msg
    for garbage in (b"", b"\x00", b"\x00\x05abc", b"\x00\x01a" + b"\xff" * 8):
        with pytest.raises(CodecError):
            unframe(garbage)


def test_inboxes_are_one_token_per_server_name() -> None:
    names = ["S0", "a.b", "with space", "ü"]
    subjects = [inbox(n) for n in names]
    assert len(set(subjects)) == len(names)
    assert all(s.count(".") == 1 and " " not in s for s in subjects)


@pytest.mark.parametrize(
    ("subject", "stream"),
    [
        ("STREAM.INFO.S", "S"),
        ("STREAM.MSG.GET.S", "S"),
        ("CONSUMER.DURABLE.CREATE.S.c", "S"),
        ("CONSUMER.CREATE.S.c.f", "S"),
        ("CONSUMER.LEADER.STEPDOWN.S.c", "S"),
        ("STREAM.LEADER.STEPDOWN.S", "S"),
        ("STREAM.PEER.REMOVE.S", "S"),
        ("STREAM.NAMES", ""),
    ],
)
def test_the_stream_a_request_names(subject: str, stream: str) -> None:
    assert stream_token(subject.split(".")) == stream


def test_membership_moves_one_change_at_a_time_toward_the_assignment() -> None:
    status = {"voters": ["A", "B", "C"], "learners": [], "commit": 9, "peers": {}}
    assert membership_step(status, ("A", "B", "C")) is None
    assert membership_step(status, ("A", "B", "D")) == ConfChange(ConfOp.REMOVE, "C")
    status["voters"] = ["A", "B"]
    assert membership_step(status, ("A", "B", "D")) == ConfChange(ConfOp.ADD_LEARNER, "D")
    status["learners"] = ["D"]
    status["peers"] = {"D": {"match": 4}}
    assert membership_step(status, ("A", "B", "D")) is True  # still catching up
    status["peers"] = {"D": {"match": 9}}
    assert membership_step(status, ("A", "B", "D")) == ConfChange(ConfOp.PROMOTE, "D")
