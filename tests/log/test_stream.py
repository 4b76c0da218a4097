"""Publish rules, limits and expiry of one stream over the memory store (no server, no sockets)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from ingest.parser.headers import encode_headers
from log.config import from_request
from log.errors import ApiError
from log.segments.api import MEMORY_OVERHEAD, msg_size
from log.segments.memstore import MemoryStore
from log.streams.stream import Stream
from log.timefmt import now_ns

NS = 1_000_000_000


def read_headers(block: bytes) -> dict[str, list[str]]:
    from ingest.parser.headers import parse_headers

    return parse_headers(block)[2]


def make(store: MemoryStore | None = None, **cfg: Any) -> Stream:
    config = from_request({"name": "s", "subjects": ["s.>"], **cfg})
    return Stream(config, store or MemoryStore(name="s"), created_ns=0, read_headers=read_headers)


def pub_headers(headers: dict[str, str]) -> tuple[bytes | None, dict[str, list[str]]]:
    """Header block and parsed headers from keyword names (`Nats_Msg_Id` is Nats-Msg-Id)."""
    hdrs = {k.replace("_", "-"): [v] for k, v in headers.items()}
    return (encode_headers({k: v[0] for k, v in hdrs.items()}) if hdrs else None), hdrs


async def pub(stream: Stream, subject: str = "s.a", data: bytes = b"x", **headers: str) -> Any:
    """Publish and return the decoded PubAck once it is sent."""
    acks: list[bytes] = []
    block, hdrs = pub_headers(headers)
    stream.publish(subject, block, data, hdrs, acks.append)
    await stream.flush()
    return json.loads(acks[0])


def live(stream: Stream) -> list[int]:
    return list(stream.store.seqs_for(">", 0))


async def test_acks_count_up_and_duplicates_answer_the_first_sequence() -> None:
    s = make()
    assert await pub(s) == {"stream": "s", "seq": 1}
    assert await pub(s, Nats_Msg_Id="a") == {"stream": "s", "seq": 2}
    assert await pub(s, Nats_Msg_Id="a") == {"stream": "s", "seq": 2, "duplicate": True}
    assert live(s) == [1, 2]


async def test_dedup_window_and_last_msg_id_survive_reopening_the_store() -> None:
    first = make()
    await pub(first, Nats_Msg_Id="a")
    again = make(store=first.store)
    assert (await pub(again, Nats_Msg_Id="a"))["duplicate"] is True
    assert (await pub(again, Nats_Expected_Last_Msg_Id="a"))["seq"] == 2


async def test_reopening_restores_the_ids_of_live_messages_only() -> None:
    first = make()
    for msg_id in ("a", "b", "c"):
        await pub(first, Nats_Msg_Id=msg_id)
        await pub(first, Trace="no id")
    assert first.store.remove(3)  # b's message
    again = make(store=first.store)
    assert [(await pub(again, Nats_Msg_Id=i)).get("duplicate", False) for i in "abc"] == [
        True,
        False,
        True,
    ]


@pytest.mark.parametrize(
    ("headers", "err_code", "description"),
    [
        ({"Nats_Expected_Stream": "other"}, 10060, "expected stream does not match"),
        ({"Nats_Expected_Last_Sequence": "5"}, 10071, "wrong last sequence: 1"),
        ({"Nats_Expected_Last_Subject_Sequence": "0"}, 10071, "wrong last sequence: 1"),
        ({"Nats_Expected_Last_Msg_Id": "zz"}, 10070, "wrong last msg ID: "),
        ({"Nats_Rollup": "sub"}, 10111, "rollup not permitted"),
        ({"Nats_TTL": "5s"}, 10166, "per-message TTL is disabled"),
        (
            {"Nats_Expected_Last_Subject_Sequence_Subject": "s.b"},
            10193,
            "missing sequence for expected last sequence per subject",
        ),
    ],
)
async def test_expectations_refuse_with_the_reference_errors(
    headers: dict[str, str], err_code: int, description: str
) -> None:
    s = make()
    await pub(s)
    ack = await pub(s, **headers)
    assert ack["error"]["err_code"] == err_code
    assert ack["error"]["description"] == description
    assert ack["seq"] == 0
    assert live(s) == [1]


async def test_expectations_see_accepted_but_uncommitted_publishes() -> None:
    s = make()
    acks: list[bytes] = []
    for expected in ("0", "1", "2"):
        hdrs = {"Nats-Expected-Last-Sequence": [expected]}
        s.publish(
            "s.a", encode_headers({"Nats-Expected-Last-Sequence": expected}), b"", hdrs, acks.append
        )
    await s.flush()
    assert [json.loads(a)["seq"] for a in acks] == [1, 2, 3]


async def test_expected_last_subject_sequence_checks_the_named_subject() -> None:
    s = make()
    await pub(s, "s.a")
    await pub(s, "s.b")
    assert (await pub(s, "s.a", Nats_Expected_Last_Subject_Sequence="1"))["seq"] == 3
    assert (await pub(s, "s.c", Nats_Expected_Last_Subject_Sequence="0"))["seq"] == 4
    ack = await pub(
        s,
        "s.z",
        Nats_Expected_Last_Subject_Sequence="2",
        Nats_Expected_Last_Subject_Sequence_Subject="s.b",
    )
    assert ack["seq"] == 5


async def test_max_msg_size_counts_headers() -> None:
    s = make(max_msg_size=10)
    assert (await pub(s, data=b"0123456789"))["seq"] == 1
    assert (await pub(s, data=b"01234567890"))["error"]["err_code"] == 10054
    assert (await pub(s, data=b"1", X="y"))["error"]["err_code"] == 10054


@pytest.mark.parametrize(
    ("limits", "description"),
    [
        ({"max_msgs": 2}, "maximum messages exceeded"),
        # Room for exactly two one-byte messages on "s.a" as the memory store counts them.
        ({"max_bytes": 2 * msg_size("s.a", None, b"x", MEMORY_OVERHEAD)}, "maximum bytes exceeded"),
        (
            {"max_msgs_per_subject": 2, "discard_new_per_subject": True},
            "maximum messages per subject exceeded",
        ),
    ],
)
async def test_discard_new_refuses_past_the_limit(limits: dict[str, int], description: str) -> None:
    s = make(discard="new", **limits)
    await pub(s)
    await pub(s)
    ack = await pub(s)
    assert ack["error"] == {"code": 503, "err_code": 10077, "description": description}
    assert live(s) == [1, 2]


async def test_discard_old_keeps_the_newest_within_each_limit() -> None:
    s = make(max_msgs=3)
    for _ in range(5):
        await pub(s)
    assert live(s) == [3, 4, 5]
    per = make(max_msgs_per_subject=2)
    for subject in ("s.a", "s.b", "s.a", "s.a", "s.b"):
        await pub(per, subject)
    assert live(per) == [2, 3, 4, 5]
    sized = make(max_bytes=200)
    for _ in range(5):
        await pub(sized, data=b"y" * 50)
    assert sized.store.state().bytes <= 200
    assert live(sized)[-1] == 5


async def test_tightening_limits_by_update_applies_at_once() -> None:
    s = make()
    for _ in range(4):
        await pub(s)
    s.update(from_request({"name": "s", "subjects": ["s.>"], "max_msgs": 1}))
    assert live(s) == [4]


async def test_rollups_purge_the_subject_or_the_stream() -> None:
    s = make(allow_rollup_hdrs=True)
    for subject in ("s.a", "s.b", "s.a"):
        await pub(s, subject)
    await pub(s, "s.a", Nats_Rollup="sub")
    assert live(s) == [2, 4]
    await pub(s, "s.c", Nats_Rollup="all")
    assert live(s) == [5]
    bad = await pub(s, Nats_Rollup="bad")
    assert bad["error"]["description"] == 'rollup value invalid: "bad"'


async def test_sealed_streams_refuse_publishes_and_deletes() -> None:
    s = make()
    await pub(s)
    s.update(from_request({"name": "s", "subjects": ["s.>"], "sealed": True}))
    assert (await pub(s))["error"]["err_code"] == 10109


async def test_ttls_and_max_age_expire_on_the_clock_given() -> None:
    s = make(allow_msg_ttl=True)
    await pub(s, Nats_TTL="2s")
    await pub(s, Nats_TTL="never")
    assert (await pub(s, Nats_TTL="bogus"))["error"]["err_code"] == 10165
    deadline = s.next_expiry()
    assert deadline is not None
    await s.expire(deadline - 1)
    assert live(s) == [1, 2]
    await s.expire(deadline)
    assert live(s) == [2]
    aged = make(max_age=NS)
    await pub(aged)
    s_deadline = aged.next_expiry()
    assert s_deadline is not None and s_deadline <= now_ns() + NS
    await aged.expire(s_deadline + 1)
    assert live(aged) == []


async def test_max_age_passes_over_messages_whose_ttl_is_never() -> None:
    s = make(max_age=NS, allow_msg_ttl=True)
    await pub(s, "s.a", Nats_TTL="never")
    await pub(s, "s.b")
    await pub(s, "s.c", Nats_TTL="never")
    await pub(s, "s.d")
    deadline = s.next_expiry()
    assert deadline is not None  # s.b's, the oldest that can age out
    await s.expire(deadline + 1)
    assert live(s) == [1, 3, 4]
    await s.expire(now_ns() + NS)
    assert live(s) == [1, 3]
    assert s.next_expiry() is None  # only never-expiring messages left: nothing to wake for
    await pub(s, "s.e")
    later = s.next_expiry()
    assert later is not None and later > deadline
    again = make(store=s.store, max_age=NS, allow_msg_ttl=True)  # a restart recovers them
    await again.expire(later + 1)
    assert live(again) == [1, 3]
    await again.delete_msg(1)
    await again.expire(later + 2)
    assert live(again) == [3]


class GatedStore(MemoryStore):
    """A memory store whose sync waits for the test, to observe the commit barrier."""

    def __init__(self) -> None:
        super().__init__(name="s")
        self.release = threading.Event()

    def sync(self) -> None:
        assert self.release.wait(5)


async def test_readers_wait_for_the_commit_of_what_they_would_see() -> None:
    store = GatedStore()
    s = make(store=store)
    acks: list[bytes] = []
    s.publish("s.a", None, b"x", {}, acks.append)
    await asyncio.sleep(0)  # let the group write the batch and start its fsync
    barrier = s.commit_barrier(1)
    assert barrier is not None and not barrier.done()
    store.release.set()
    await barrier
    assert s.commit_barrier(1) is None
    assert acks


async def test_a_purge_covers_what_was_accepted_before_it_not_after() -> None:
    s = make()
    for _ in range(3):
        s.publish("s.a", None, b"x", {}, None)  # accepted, not yet committed
    purged = s.purge()
    s.publish("s.a", None, b"y", {}, None)
    assert await purged == 3
    await s.flush()
    assert live(s) == [4]
    assert await s.purge("s.a", keep=1) == 0


async def test_deletes_and_removals_complete_on_commit() -> None:
    s = make()
    for _ in range(4):
        await pub(s)
    deleted = s.delete_msg(2)
    assert not deleted.done() and live(s) == [1, 2, 3, 4]
    await deleted
    with pytest.raises(ApiError, match="no message found"):
        await s.delete_msg(2)
    done: list[BaseException | None] = []
    s.remove([1, 2, 3], done.append)  # 2 is gone already: skipped
    await s.flush()
    assert done == [None] and live(s) == [4]
