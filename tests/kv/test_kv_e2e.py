"""nats-py's KV against both servers: the same calls, the same entries, the same errors.

Every expectation was observed from the reference first. KV is a client-side
convention over one stream per bucket (ADR-8), so what is checked here is
what the client sees: the bucket's stream config, revisions, operations in
history and watches, and the error each refusal maps to.
"""

from __future__ import annotations

import asyncio

import pytest
from nats.js.client import JetStreamContext
from nats.js.errors import (
    APIError,
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoKeysError,
)
from nats.js.kv import KeyValue

from tests.conftest import Connect
from tests.jetstream.test_streams_e2e import api, normalise
from tests.support.clients import current_entries, kv_history, kv_keys
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess

DEADLINE = 10.0  # seconds for an expiry to show; both servers take about one TTL
RACE_ROUNDS = 20


@pytest.fixture
async def js(js_server: ServerProcess, connect: Connect) -> JetStreamContext:
    return (await connect(js_server)).jetstream(timeout=5)


async def gone(kv: KeyValue, key: str) -> bool:
    try:
        await kv.get(key)
    except KeyNotFoundError:
        return True
    return False


def ops(entries: list[KeyValue.Entry]) -> list[tuple[str, bytes | None, str | None, int | None]]:
    return [(e.key, e.value, e.operation, e.revision) for e in entries]


# -- buckets -----------------------------------------------------------------------


async def test_bucket_is_a_stream_as_the_reference_stores_it(
    js_server: ServerProcess, connect: Connect
) -> None:
    nc = await connect(js_server)
    js = nc.jetstream(timeout=5)
    await js.create_key_value(
        bucket="cfg", history=5, ttl=60, max_value_size=1024, description="d", direct=True
    )
    info = await api(nc, "$JS.API.STREAM.INFO.KV_cfg")
    assert normalise(info["config"]) == {
        "name": "KV_cfg",
        "description": "d",
        "subjects": ["$KV.cfg.>"],
        "retention": "limits",
        "max_consumers": -1,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": 60_000_000_000,
        "max_msgs_per_subject": 5,
        "max_msg_size": 1024,
        "discard": "new",
        "storage": "file",
        "num_replicas": 1,
        "duplicate_window": 60_000_000_000,
        "compression": "none",
        "allow_direct": True,
        "mirror_direct": False,
        "sealed": False,
        "deny_delete": True,
        "deny_purge": False,
        "allow_rollup_hdrs": True,
        "consumer_limits": {},
        "allow_msg_ttl": True,
        "metadata": {"_nats.req.level": "1"},
    }
    await js.create_key_value(bucket="marked", limit_marker_ttl=5)
    marked = await api(nc, "$JS.API.STREAM.INFO.KV_marked")
    assert marked["config"]["subject_delete_marker_ttl"] == 5_000_000_000
    assert marked["config"]["duplicate_window"] == 120_000_000_000


async def test_status_and_delete_bucket(js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket="b", history=3, ttl=30)
    await kv.put("a", b"1")
    await kv.put("a", b"2")
    status = await kv.status()
    assert (status.bucket, status.values, status.history, status.ttl) == ("b", 2, 3, 30.0)
    again = await js.key_value("b")
    assert (await again.get("a")).value == b"2"
    assert await js.delete_key_value("b")
    with pytest.raises(BucketNotFoundError):
        await js.key_value("b")


# -- values ------------------------------------------------------------------------


async def test_put_get_create_update(js_server: ServerProcess, connect: Connect) -> None:
    nc = await connect(js_server)
    kv = await nc.jetstream(timeout=5).create_key_value(bucket="v", history=10)
    assert await kv.put("k", b"one") == 1
    entry = await kv.get("k")
    assert (entry.key, entry.value, entry.revision) == ("k", b"one", 1)
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.create("k", b"again")
    # What the client maps to that error, on the wire.
    refused = await api(nc, "$KV.v.k", b"x", **{"Nats-Expected-Last-Subject-Sequence": "0"})
    assert refused == {
        "error": {"code": 400, "err_code": 10071, "description": "wrong last sequence: 1"},
        "stream": "KV_v",
        "seq": 0,
    }
    assert await kv.update("k", b"two", last=1) == 2
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.update("k", b"stale", last=1)
    assert await kv.create("new", b"n") == 3
    assert (await kv.get("k")).value == b"two"
    assert (await kv.get("k", revision=1)).value == b"one"
    with pytest.raises(KeyNotFoundError):
        await kv.get("missing")


async def test_max_value_size(js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket="small", max_value_size=16)
    await kv.put("k", b"x" * 16)
    with pytest.raises(APIError) as refused:
        await kv.put("k", b"x" * 17)
    assert (refused.value.err_code, refused.value.description) == (
        10054,
        "message size exceeds maximum allowed",
    )


async def test_concurrent_compare_and_set_one_winner(
    js_server: ServerProcess, connect: Connect
) -> None:
    """Two clients race on the same revision: the server's check must let exactly one through."""
    first = (await connect(js_server)).jetstream(timeout=5)
    second = (await connect(js_server)).jetstream(timeout=5)
    kv1 = await first.create_key_value(bucket="race", history=64)
    kv2 = await second.key_value("race")
    last = await kv1.put("k", b"start")
    for round_ in range(RACE_ROUNDS):
        mine, theirs = f"a{round_}".encode(), f"b{round_}".encode()
        results = await asyncio.gather(
            kv1.update("k", mine, last=last),
            kv2.update("k", theirs, last=last),
            return_exceptions=True,
        )
        wins = [r for r in results if isinstance(r, int)]
        losses = [r for r in results if isinstance(r, KeyWrongLastSequenceError)]
        assert (len(wins), len(losses)) == (1, 1), results
        winner = mine if isinstance(results[0], int) else theirs
        entry = await kv2.get("k")
        assert (entry.value, entry.revision) == (winner, wins[0])
        last = wins[0]
    created = await asyncio.gather(
        kv1.create("fresh", b"1"), kv2.create("fresh", b"2"), return_exceptions=True
    )
    assert sorted(type(r).__name__ for r in created) == ["KeyWrongLastSequenceError", "int"]


# -- deletes, purges, history, keys -------------------------------------------------


async def test_delete_purge_history_keys(js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket="h", history=3)
    with pytest.raises(NoKeysError):
        await kv.keys()
    for value in (b"1", b"2", b"3", b"4"):
        await kv.put("a", value)
    await kv.put("b", b"x")
    assert ops(await kv_history(kv, "a")) == [
        ("a", b"2", None, 2),
        ("a", b"3", None, 3),
        ("a", b"4", None, 4),
    ]
    assert sorted(await kv_keys(kv)) == ["a", "b"]
    assert await kv.delete("a")
    with pytest.raises(KeyNotFoundError):
        await kv.get("a")
    assert ops(await kv_history(kv, "a"))[-1] == ("a", b"", "DEL", 6)
    assert await kv_keys(kv) == ["b"]
    assert await kv.create("a", b"back") == 7  # over the delete marker
    await kv.purge("a")
    assert ops(await kv_history(kv, "a")) == [("a", b"", "PURGE", 8)]
    status = await kv.status()
    assert status.values == 2  # b's value and a's purge marker
    await kv.purge_deletes(olderthan=-1)
    assert (await kv.status()).values == 1
    with pytest.raises(KeyNotFoundError):
        await kv.get("a")


async def test_watch_sees_puts_updates_deletes(js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket="w", history=5)
    await kv.put("a", b"1")
    await kv.put("b", b"1")
    await kv.put("a", b"2")
    watcher = await kv.watchall()
    initial = await current_entries(watcher, 2)
    assert ops(initial) == [("b", b"1", None, 2), ("a", b"2", None, 3)]
    assert [e.delta for e in initial] == [1, 0]
    await kv.put("c", b"new")
    await kv.update("a", b"3", last=3)
    await kv.delete("b")
    await kv.purge("c")
    live = [await watcher.updates(timeout=5) for _ in range(4)]
    assert ops(live) == [
        ("c", b"new", None, 4),
        ("a", b"3", None, 5),
        ("b", b"", "DEL", 6),
        ("c", b"", "PURGE", 7),
    ]
    await watcher.stop()
    one = await kv.watch("a", include_history=True)
    assert ops(await current_entries(one, 3)) == [
        ("a", b"1", None, 1),
        ("a", b"2", None, 3),
        ("a", b"3", None, 5),
    ]
    await one.stop()


# -- time to live --------------------------------------------------------------------


async def test_bucket_ttl_expires_values(js: JetStreamContext) -> None:
    kv = await js.create_key_value(bucket="ttl", ttl=1)
    await kv.put("k", b"v")
    assert (await kv.get("k")).value == b"v"
    await poll_async(lambda: gone(kv, "k"), "a value outliving the bucket's 1 s ttl", DEADLINE)
    assert (await kv.status()).values == 0
    marked = await js.create_key_value(bucket="ttlm", ttl=1, history=3, limit_marker_ttl=1)
    await marked.put("k", b"1")
    await marked.put("k", b"2")
    watcher = await marked.watchall()
    assert ops(await current_entries(watcher, 1)) == [("k", b"2", None, 2)]
    # Both revisions age out together: one marker for the key, not one per revision.
    assert ops([await watcher.updates(timeout=DEADLINE)]) == [("k", b"", "PURGE", 3)]
    await poll_async(
        lambda: _values_are(marked, 0), "the marker outliving the bucket ttl", DEADLINE
    )
    await watcher.stop()


async def test_never_ttl_outlives_max_age(js: JetStreamContext) -> None:
    """`Nats-TTL: never` exempts a message from the stream's max_age; its neighbours go."""
    await js.add_stream(name="NEVER", subjects=["nv.>"], max_age=1.0, allow_msg_ttl=True)
    for subject, ttl in (("nv.a", "never"), ("nv.b", ""), ("nv.c", "never"), ("nv.d", "")):
        await js.publish(subject, subject.encode(), headers={"Nats-TTL": ttl} if ttl else None)

    async def aged_out() -> bool:
        return (await js.stream_info("NEVER")).state.messages == 2

    await poll_async(aged_out, "the messages without a TTL outliving max_age", DEADLINE)
    state = (await js.stream_info("NEVER")).state
    assert (state.first_seq, state.last_seq, state.num_deleted) == (1, 4, 2)
    assert [(await js.get_msg("NEVER", seq)).data for seq in (1, 3)] == [b"nv.a", b"nv.c"]


async def test_limit_marker_config_rules(js_server: ServerProcess, connect: Connect) -> None:
    """Markers need TTLs and rollups, so asking for them turns both on, purge included."""
    nc = await connect(js_server)
    made = await api(
        nc,
        "$JS.API.STREAM.CREATE.KV_x",
        {
            "name": "KV_x",
            "subjects": ["$KV.x.>"],
            "subject_delete_marker_ttl": 10**9,
            "deny_purge": True,
        },
    )
    flags = ("allow_msg_ttl", "allow_rollup_hdrs", "deny_purge", "subject_delete_marker_ttl")
    assert [made["config"][k] for k in flags] == [True, True, False, 10**9]
    for ttl, words in ((5 * 10**8, "must be at least 1 second"), (-1, "must not be negative")):
        refused = await api(
            nc,
            "$JS.API.STREAM.CREATE.KV_y",
            {"name": "KV_y", "subjects": ["$KV.y.>"], "subject_delete_marker_ttl": ttl},
        )
        assert refused["error"] == {
            "code": 500,
            "err_code": 10052,
            "description": f"subject delete marker TTL {words}",
        }


async def test_per_key_ttl_leaves_a_marker_watchers_see(
    js_server: ServerProcess, connect: Connect
) -> None:
    """Limit markers (ADR-48): a TTL'd key expires and a server-placed marker says so."""
    nc = await connect(js_server)
    js = nc.jetstream(timeout=5)
    kv = await js.create_key_value(bucket="m", history=2, limit_marker_ttl=2)
    await kv.put("stays", b"s")
    revision = await kv.create("brief", b"b", msg_ttl=1)
    stored = await js.get_msg("KV_m", revision)
    # Raised to the marker TTL (history 1 would be exempt), and stored so.
    assert stored.headers == {"Nats-Expected-Last-Subject-Sequence": "0", "Nats-TTL": "2"}
    watcher = await kv.watchall()
    assert ops(await current_entries(watcher, 2)) == [
        ("stays", b"s", None, 1),
        ("brief", b"b", None, 2),
    ]
    marker = await watcher.updates(timeout=DEADLINE)
    assert ops([marker]) == [("brief", b"", "PURGE", 3)]
    raw = await js.get_msg("KV_m", 3)
    assert raw.headers == {
        "Nats-Marker-Reason": "MaxAge",
        "Nats-TTL": "2s",
        "Nats-Rollup": "sub",
    }
    # nats-py 2.16's get reads KV-Operation only: the marker reads as a value-less entry.
    assert (await kv.get("brief")).value is None
    await poll_async(lambda: _values_are(kv, 1), "the marker outliving its own 2 s TTL", DEADLINE)
    await watcher.stop()
    plain = await js.create_key_value(bucket="plain")
    await plain.create("brief", b"b", msg_ttl=1)
    await poll_async(lambda: gone(plain, "brief"), "a key outliving its 1 s TTL", DEADLINE)
    assert (await plain.status()).values == 0  # no markers unless the bucket asks


async def _values_are(kv: KeyValue, n: int) -> bool:
    return (await kv.status()).values == n
