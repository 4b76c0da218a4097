"""API level 2 over one stream and the memory store: atomic batches, counters, schedules,
the configs that ask for them, and the entry a batch travels as (no server, no sockets)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from consensus.types import NodeId
from log import counter, cron, schedules
from log.api_levels import required_level, sync_interval_ns
from log.batches import atomic
from log.config import check_update, from_request
from log.errors import ApiError
from log.raft_group import RaftGroup
from log.segments.api import NewMsg
from log.segments.filestore import FileStore, SegmentConfig
from log.segments.inspect import list_segments
from log.segments.memstore import MemoryStore
from log.streams.entries import Batch, Entry, EntryDecodeError, Publish, decode, encode
from log.streams.stream import Stream
from log.timefmt import parse_rfc3339
from tests.consensus.cluster import until
from tests.log.raft_members import NodeFactory, raft_members
from tests.log.test_stream import live, make, pub, pub_headers, read_headers
from tests.log.test_stream_replicated import converged, leading

NS = 1_000_000_000


async def send(stream: Stream, subject: str, data: bytes = b"x", **headers: str) -> Any:
    """Publish; the reply decoded (None for the empty reply of a staged batch message)."""
    acks: list[bytes] = []
    block, hdrs = pub_headers(headers)
    stream.publish(subject, block, data, hdrs, acks.append)
    await stream.flush()
    return json.loads(acks[0]) if acks[0] else None


def err_code(reply: Any) -> int:
    return int(reply["error"]["err_code"])


# -- configs -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "level"),
    [
        ({}, 0),
        ({"allow_msg_ttl": True}, 1),
        ({"allow_msg_counter": True}, 2),
        ({"allow_atomic": True}, 2),
        ({"allow_msg_schedules": True}, 2),
        ({"persist_mode": "async"}, 2),
        ({"persist_mode": "default"}, 0),
        ({"persist_mode": ""}, 0),
    ],
)
def test_the_required_level_follows_the_features_used(extra: dict[str, Any], level: int) -> None:
    cfg = from_request({"name": "s", **extra})
    assert required_level(cfg) == level
    assert cfg.metadata["_nats.req.level"] == str(level)


@pytest.mark.parametrize(
    ("extra", "description"),
    [
        ({"allow_msg_counter": True, "discard": "new"}, "counter stream cannot use discard new"),
        (
            {"allow_msg_counter": True, "allow_msg_ttl": True},
            "counter stream cannot use message TTLs",
        ),
        (
            {"allow_msg_counter": True, "allow_msg_schedules": True},
            "counter stream cannot use message schedules",
        ),
        (
            {"allow_msg_counter": True, "retention": "workqueue"},
            "counter stream can only use limits retention",
        ),
        (
            {"allow_msg_schedules": True, "discard": "new"},
            "message scheduling cannot use discard new",
        ),
        (
            {"persist_mode": "async", "storage": "memory"},
            "async persist mode is only supported on file storage",
        ),
        (
            {"persist_mode": "async", "allow_atomic": True},
            "async persist mode is not supported with atomic batch publish",
        ),
        (
            {"persist_mode": "async", "num_replicas": 3},
            "async persist mode is not supported on replicated streams",
        ),
    ],
)
def test_incompatible_features_are_refused(extra: dict[str, Any], description: str) -> None:
    with pytest.raises(ApiError) as refused:
        from_request({"name": "s", **extra})
    assert refused.value.description == description


@pytest.mark.parametrize(
    ("feature", "code"),
    [
        ("allow_msg_counter", 10173),
        ("allow_atomic", 10198),
        ("allow_batched", 10209),
        ("allow_msg_schedules", 10186),
    ],
)
def test_mirrors_refuse_what_would_rewrite_their_copies(feature: str, code: int) -> None:
    with pytest.raises(ApiError) as refused:
        from_request({"name": "m", "mirror": {"name": "o"}, feature: True})
    assert refused.value.err_code == code


def test_a_field_unknown_inside_a_sources_consumer_is_refused_not_ignored() -> None:
    body = {"name": "o", "consumer": {"name": "c", "deliver_subject": "d", "x": 1}}
    with pytest.raises(ApiError) as refused:
        from_request({"name": "s", "sources": [body]})
    assert refused.value.to_json() == {
        "code": 400,
        "err_code": 10025,
        "description": 'invalid JSON: json: unknown field "x"',
    }


def test_schedules_turn_rollups_on_and_persist_mode_is_kept() -> None:
    cfg = from_request({"name": "s", "allow_msg_schedules": True, "deny_purge": True})
    assert (cfg.allow_rollup_hdrs, cfg.deny_purge) == (True, False)
    out = from_request({"name": "s", "persist_mode": "async"}).to_json()
    assert out["persist_mode"] == "async"
    assert "persist_mode" not in from_request({"name": "s"}).to_json()
    with pytest.raises(ApiError, match="can not unmarshal"):
        from_request({"name": "s", "persist_mode": "later"})


@pytest.mark.parametrize(
    ("old", "new", "description"),
    [
        ({"allow_msg_counter": True}, {}, "can not change message counter setting"),
        ({}, {"allow_msg_counter": True}, "can not change message counter setting"),
        ({"allow_msg_schedules": True}, {}, "message schedules can not be disabled"),
        ({"persist_mode": "async"}, {}, "can not change persist mode"),
    ],
)
def test_updates_cannot_take_back_level2_features(
    old: dict[str, Any], new: dict[str, Any], description: str
) -> None:
    with pytest.raises(ApiError, match=description):
        check_update(from_request({"name": "s", **old}), from_request({"name": "s", **new}))


def test_async_persistence_leaves_sync_always_only_for_its_stream() -> None:
    async_cfg = from_request({"name": "s", "persist_mode": "async"})
    assert sync_interval_ns(async_cfg, None) == 120 * NS
    assert sync_interval_ns(async_cfg, 5 * NS) == 5 * NS
    assert sync_interval_ns(from_request({"name": "s"}), None) is None


# -- atomic batches ------------------------------------------------------------


def test_a_batch_entry_round_trips_and_a_damaged_one_is_refused() -> None:
    entry = Batch(
        (
            Publish(NewMsg("a", None, b"1", 5), 7, "", 0, "id"),
            Publish(NewMsg("b", b"NATS/1.0\r\n\r\n", b"", 6), 8, "sub"),
        )
    )
    data = encode(entry)
    assert decode(data) == entry
    for damaged in (data[:-1], data + b"x", data[:5] + b"\xff" + data[6:]):
        with pytest.raises(EntryDecodeError):
            decode(damaged)


def staged(seq: int, commit: str | None = None, batch_id: str = "b") -> atomic.Staged:
    headers = {atomic.BATCH_ID: [batch_id], atomic.BATCH_SEQ: [str(seq)]}
    if commit is not None:
        headers[atomic.BATCH_COMMIT] = [commit]
    return atomic.Staged("s.a", None, b"x", headers)


def test_the_stager_drops_a_batch_at_a_gap_or_after_its_timeout() -> None:
    stager = atomic.Stager()
    assert stager.stage(staged(1), allowed=True, above_level=False, now=0) is None
    with pytest.raises(ApiError, match="incomplete"):
        stager.stage(staged(3), allowed=True, above_level=False, now=0)
    assert len(stager) == 0
    assert stager.stage(staged(1), allowed=True, above_level=False, now=0) is None
    late = atomic.TIMEOUT_NS + 1
    with pytest.raises(ApiError, match="incomplete"):
        stager.stage(staged(2, "1"), allowed=True, above_level=False, now=late)


def test_the_stager_limits_size_and_batches_in_flight() -> None:
    stager = atomic.Stager()
    with pytest.raises(ApiError, match="too large: 1000"):
        stager.stage(staged(1001), allowed=True, above_level=False, now=0)
    for i in range(atomic.MAX_INFLIGHT):
        stager.stage(staged(1, batch_id=str(i)), allowed=True, above_level=False, now=0)
    with pytest.raises(ApiError) as refused:
        stager.stage(staged(1, batch_id="one more"), allowed=True, above_level=False, now=0)
    assert refused.value.err_code == 10210
    # abandoned batches give their slots back once past their deadline
    later = atomic.TIMEOUT_NS + 1
    assert stager.stage(staged(1, batch_id="x"), allowed=True, above_level=False, now=later) is None


async def test_a_batch_is_stored_at_its_commit_and_acknowledged_whole() -> None:
    s = make(allow_atomic=True)
    assert await send(s, "s.a", Nats_Batch_Id="b", Nats_Batch_Sequence="1") is None
    assert live(s) == []  # nothing stored before the commit
    ack = await send(s, "s.b", Nats_Batch_Id="b", Nats_Batch_Sequence="2", Nats_Batch_Commit="1")
    assert ack == {"stream": "s", "seq": 2, "batch": "b", "count": 2}
    assert live(s) == [1, 2]


async def test_a_refused_message_refuses_the_batch_and_leaves_no_trace() -> None:
    s = make(allow_atomic=True)
    await pub(s, Nats_Msg_Id="seen")
    await send(s, "s.a", Nats_Batch_Id="b", Nats_Batch_Sequence="1")
    reply = await send(
        s,
        "s.b",
        Nats_Batch_Id="b",
        Nats_Batch_Sequence="2",
        Nats_Batch_Commit="1",
        Nats_Msg_Id="seen",
    )
    assert err_code(reply) == 10201
    assert live(s) == [1]
    assert await pub(s, Nats_Expected_Last_Sequence="1") == {"stream": "s", "seq": 2}


async def test_an_end_of_batch_marker_commits_what_came_before() -> None:
    s = make(allow_atomic=True)
    await send(s, "s.a", Nats_Batch_Id="e", Nats_Batch_Sequence="1")
    ack = await send(s, "s.z", Nats_Batch_Id="e", Nats_Batch_Sequence="2", Nats_Batch_Commit="eob")
    assert ack == {"stream": "s", "seq": 1, "batch": "e", "count": 1}
    stored = s.store.load(1)
    assert stored is not None and stored.hdr is not None
    assert stored.hdr.endswith(b"Nats-Batch-Commit: 1\r\n\r\n")


# -- counters ------------------------------------------------------------------


async def test_counters_add_up_in_flight_and_across_reopening() -> None:
    s = make(allow_msg_counter=True)
    acks: list[bytes] = []
    for incr in ("5", "-2", "+10"):  # one group commit: each sees the one before
        block, hdrs = pub_headers({"Nats_Incr": incr})
        s.publish("s.a", block, b"", hdrs, acks.append)
    await s.flush()
    assert [json.loads(a)["val"] for a in acks] == ["5", "3", "13"]
    again = make(store=s.store, allow_msg_counter=True)
    assert (await send(again, "s.a", b"", Nats_Incr="1"))["val"] == "14"
    last = again.store.load_last("s.a")
    assert last is not None and last.data == b'{"val":"14"}'


@pytest.mark.parametrize(
    ("headers", "data", "code"),
    [
        ({"Nats_Incr": "1.5"}, b"", 10171),
        ({"Nats_Incr": "1_0"}, b"", 10171),
        ({"Nats_Incr": "1"}, b"body", 10170),
        ({}, b"", 10169),
        ({"Nats_Incr": "1", "Nats_Rollup": "sub"}, b"", 10171),
        ({"Nats_Incr": "1", "Nats_Expected_Last_Sequence": "0"}, b"", 10171),
    ],
)
async def test_bad_increments_get_the_reference_errors(
    headers: dict[str, str], data: bytes, code: int
) -> None:
    s = make(allow_msg_counter=True)
    assert err_code(await send(s, "s.a", data, **headers)) == code


def test_a_copy_from_a_source_adds_its_difference_and_records_the_origin() -> None:
    start = counter.Counter(10, {"A": {"a": "4"}})
    headers = {"Nats-Incr": ["9"], "Nats-Stream-Source": ["A 3 > > a ident"]}
    got, hdr, data = counter.add(
        start, 9, "s.a", b"NATS/1.0\r\nNats-Incr: 9\r\n\r\n", b'{"val":"7"}', headers
    )
    assert (got.total, data) == (13, b'{"val":"13"}')  # 7 - 4 = 3 more than before
    assert got.sources == {"A": {"a": "7"}}
    assert hdr is not None and b"Nats-Incr: 3\r\n" in hdr
    assert b'Nats-Counter-Sources: {"A":{"a":"7"}}' in hdr


def test_a_counter_body_that_is_not_one_is_broken() -> None:
    from log.segments.api import StoredMsg

    broken = StoredMsg(1, 0, "s.a", None, b'{"val": 5}')
    with pytest.raises(ApiError) as refused:
        counter.stored(broken, lambda _: {})
    assert refused.value.err_code == 10172


# -- schedules -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "after", "expected"),
    [
        ("0 0 * * * *", "2026-01-01T10:20:30Z", "2026-01-01T11:00:00Z"),
        ("*/15 * * * * *", "2026-01-01T10:20:30Z", "2026-01-01T10:20:45Z"),
        ("0 30 9 * * mon-fri", "2026-01-02T10:00:00Z", "2026-01-05T09:30:00Z"),  # Fri → Mon
        ("0 0 0 29 feb *", "2026-03-01T00:00:00Z", "2028-02-29T00:00:00Z"),
        ("0 0 0 1 * 0", "2026-01-01T00:00:00Z", "2026-01-04T00:00:00Z"),  # dom OR dow
    ],
)
def test_cron_finds_the_next_matching_second(pattern: str, after: str, expected: str) -> None:
    from datetime import UTC

    rule = cron.parse(pattern)
    got = rule.next_time(cron.in_zone(parse_rfc3339(after), UTC))
    assert int(got.timestamp()) * NS == parse_rfc3339(expected)


@pytest.mark.parametrize("pattern", ["* * * * *", "60 * * * * *", "5-1 * * * * *", "*/0 * * * * *"])
def test_cron_refuses_what_the_reference_refuses(pattern: str) -> None:
    with pytest.raises(cron.CronError):
        cron.parse(pattern)


def test_next_fire_reads_at_every_and_skips_missed_repeats() -> None:
    now = parse_rfc3339("2026-01-01T00:00:10Z")
    at = {schedules.SCHEDULE: ["@at 2026-01-01T00:00:00Z"]}
    assert schedules.next_fire(at, now, now) == (parse_rfc3339("2026-01-01T00:00:00Z"), False)
    every = {schedules.SCHEDULE: ["@every 5s"]}
    set_at = parse_rfc3339("2025-12-31T00:00:00Z")  # long ago: fires once, from now
    assert schedules.next_fire(every, set_at, now) == (now + 5 * NS, True)
    hourly = {schedules.SCHEDULE: ["@hourly"], schedules.TIME_ZONE: ["Asia/Kolkata"]}
    when, repeats = schedules.next_fire(hourly, now, now) or (0, False)
    assert repeats and when == parse_rfc3339("2026-01-01T00:30:00Z")  # UTC+5:30
    with pytest.raises(ApiError) as refused:
        schedules.next_fire({**every, schedules.TIME_ZONE: ["UTC"]}, now, now)
    assert refused.value.err_code == 10189


async def test_a_one_off_schedule_fires_once_and_retires_itself() -> None:
    s = make(allow_msg_schedules=True)
    now = parse_rfc3339("2026-01-01T00:00:00Z")
    ack = await send(
        s, "s.sched", b"hello", Nats_Schedule="@at 2026-01-01T00:00:00Z", Nats_Schedule_Target="s.t"
    )
    assert ack == {"stream": "s", "seq": 1}
    assert s.next_expiry() == now
    await s.expire(now)
    await s.flush()
    fired = s.store.load_last("s.t")
    assert fired is not None and fired.data == b"hello"
    assert fired.hdr is not None and b"Nats-Schedule-Next: purge" in fired.hdr
    assert s.store.load_last("s.sched") is None  # the firing purged its schedule
    assert s.next_expiry() is None


async def test_schedules_survive_reopening_and_a_plain_message_cancels_one() -> None:
    s = make(allow_msg_schedules=True)
    await send(s, "s.a", Nats_Schedule="@every 1m", Nats_Schedule_Target="s.t")
    await send(s, "s.b", Nats_Schedule="@every 1m", Nats_Schedule_Target="s.t")
    await send(s, "s.b", b"no longer a schedule")
    again = make(store=s.store, allow_msg_schedules=True)
    assert again.next_expiry() is not None  # s.a's
    await send(again, "s.a", b"nor this one")
    assert make(store=s.store, allow_msg_schedules=True).next_expiry() is None


# -- replicated ------------------------------------------------------------------


def replicated_member(n: NodeId, node: NodeFactory) -> Stream:
    rafts: list[RaftGroup[Entry]] = []

    def group(apply: Callable[[list[Entry]], None], _: object) -> RaftGroup[Entry]:
        rafts.append(RaftGroup(apply, node, encode=encode, decode=decode, name=f"s on {n}"))
        return rafts[0]

    config = from_request(
        {"name": "s", "subjects": ["s.>"], "allow_atomic": True, "allow_msg_counter": True}
    )
    stream = Stream(
        config, MemoryStore(name=n), created_ns=0, read_headers=read_headers, group=group
    )
    rafts[0].node.on_leader_change(lambda leader, _term: stream.set_leader(leader == n))
    return stream


async def test_a_counter_batch_commits_whole_on_every_member(tmp_path: Path) -> None:
    async with raft_members(tmp_path, replicated_member) as (c, members):
        leader = await leading(c, members)
        replies: list[bytes] = []
        for seq, incr in enumerate(("1", "2", "3"), 1):
            headers = {"Nats_Incr": incr, "Nats_Batch_Id": "b", "Nats_Batch_Sequence": str(seq)}
            if seq == 3:
                headers["Nats_Batch_Commit"] = "1"
            block, hdrs = pub_headers(headers)
            leader.publish("s.c", block, b"", hdrs, replies.append)
        await until(lambda: len(replies) == 3, "the batch's commit reply")
        assert json.loads(replies[-1]) == {"stream": "s", "seq": 3, "batch": "b", "count": 3}
        state = await converged(members, leader)
        assert [m.data for m in state[-1]] == [b'{"val":"1"}', b'{"val":"3"}', b'{"val":"6"}']


# -- the lake's unit: a batch never straddles a segment ------------------------------


async def test_a_batch_lands_in_one_segment_even_past_the_segment_limit(tmp_path: Path) -> None:
    """The compactor appends whole sealed segments, one Delta transaction per group of
    them; a batch is one append to one segment, so no transaction holds part of one."""
    store = FileStore(tmp_path / "s", name="s", config=SegmentConfig(max_msgs=10))
    s = make(store=store, allow_atomic=True)
    for _ in range(8):
        await pub(s)
    size = 25
    for seq in range(1, size + 1):
        commit = {"Nats_Batch_Commit": "1"} if seq == size else {}
        await send(s, "s.b", Nats_Batch_Id="b", Nats_Batch_Sequence=str(seq), **commit)
    await pub(s)  # the next write rolls: the batch's segment is sealed
    bounds = [(seg.first_seq, seg.last_seq) for seg in list_segments(tmp_path / "s")]
    holding = [last for first, last in bounds if first <= 9 <= last]
    assert holding and holding[0] >= 33, bounds  # one by one, seg one would end at 10
    store.close()


def test_a_firing_names_its_next_time_in_the_schedules_zone() -> None:
    from log.segments.api import StoredMsg

    headers = {
        schedules.SCHEDULE: ["0 0 * * * *"],
        schedules.TARGET: ["s.t"],
        schedules.TIME_ZONE: ["Asia/Kolkata"],
        "X-Kept": ["1"],
        "Nats-Msg-Id": ["dropped"],
    }
    block, _ = pub_headers({k.replace("-", "_"): v[0] for k, v in headers.items()})
    schedule = StoredMsg(1, 0, "s.sched", block, b"body")
    due = parse_rfc3339("2026-01-01T00:30:00Z")  # 06:00 in Kolkata
    firing = schedules.fire(schedule, due, due, read_headers, lambda _: None)
    assert firing is not None and (firing.target, firing.data) == ("s.t", b"body")
    assert firing.hdr == (
        b"NATS/1.0\r\nX-Kept: 1\r\nNats-Scheduler: s.sched\r\n"
        b"Nats-Schedule-Next: 2026-01-01T07:00:00+05:30\r\n\r\n"
    )
