"""Publish with nats-py to a real jetlake server, compact, and ask Spark SQL: the answers match.

The view of a stream is the Delta table up to L plus the live segments after
L, so every count here must hold both before and after compaction.
"""

from __future__ import annotations

from collections import Counter

from nats.aio.client import Client as NATS

from log.compactor.compact import lake_progress
from log.compactor.layout import StreamRef
from tests.conftest import Connect
from tests.lake.conftest import Lake

SUBJECTS = ("orders.eu", "orders.us", "orders.apac")


async def publish(nc: NATS, n: int, *, first: int = 0) -> Counter[str]:
    js = nc.jetstream()
    sent: Counter[str] = Counter()
    for i in range(first, first + n):
        subject = SUBJECTS[i % len(SUBJECTS)]
        headers = {"Trace": str(i), "Kind": "order"} if i % 2 else None
        await js.publish(subject, b"body-%d" % i, headers=headers)
        sent[subject] += 1
    return sent


def group_by(lake: Lake, stream: str) -> Counter[str]:
    rows = lake.sql(f"SELECT subject, count(*) AS n FROM {stream} GROUP BY subject")
    return Counter({r.subject: r.n for r in rows})


async def test_counts_and_group_bys_match_what_was_published(lake: Lake, connect: Connect) -> None:
    server = lake.start()
    nc = await connect(server)
    await nc.jetstream().add_stream(name="ORDERS", subjects=["orders.>"])
    sent = await publish(nc, 600)
    assert group_by(lake, "ORDERS") == sent  # all live: nothing compacted yet
    await lake.sealed("ORDERS", 600)
    summary = lake.compact()
    assert summary.rows == 600
    assert group_by(lake, "ORDERS") == sent
    ref = StreamRef.load(lake.stream_dir("ORDERS"))
    assert lake_progress(ref.table_path(lake.lake_dir), ref.app_id) == 600
    row = lake.sql("SELECT stream, headers, data, date FROM ORDERS WHERE seq = 2")[0]
    assert row.stream == "ORDERS" and row.data == b"body-1"
    assert row.headers == {"Trace": ["1"], "Kind": ["order"]}
    assert lake.sql("SELECT count(*) AS n FROM ORDERS WHERE headers IS NULL")[0].n == 300
    # The union view sees a message the moment it is acknowledged, exactly once.
    ack = await nc.jetstream().publish("orders.eu", b"just now")
    rows = lake.sql("SELECT seq, data FROM ORDERS WHERE seq >= 600 ORDER BY seq")
    assert [(r.seq, r.data) for r in rows] == [(600, b"body-599"), (ack.seq, b"just now")]
    assert lake.sql("SELECT count(*) AS n, count(DISTINCT seq) AS d FROM ORDERS")[0] == (601, 601)


async def test_lake_keeps_history_past_the_stream_limits(lake: Lake, connect: Connect) -> None:
    server = lake.start()
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="CAPPED", subjects=["capped.>"], max_msgs=100)
    for i in range(1000):
        await js.publish(f"capped.{i % 7}", b"%d" % i)
    info = await js.stream_info("CAPPED")
    assert (info.state.messages, info.state.first_seq) == (100, 901)
    assert lake.sql("SELECT count(*) AS n FROM CAPPED")[0].n == 1000
    await lake.sealed("CAPPED", 1000)
    assert lake.compact().rows == 1000
    assert lake.sql("SELECT count(*) AS n, min(seq) AS lo FROM CAPPED")[0] == (1000, 1)
    info = await js.stream_info("CAPPED")
    assert info.state.messages == 100  # the live log still holds only its limit


async def test_a_recreated_stream_gets_a_fresh_table(lake: Lake, connect: Connect) -> None:
    server = lake.start()
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="AGAIN", subjects=["again.>"])
    for i in range(20):
        await js.publish("again.old", b"%d" % i)
    await lake.sealed("AGAIN", 20)
    lake.compact()
    old = StreamRef.load(lake.stream_dir("AGAIN"))
    await js.delete_stream("AGAIN")
    await js.add_stream(name="AGAIN", subjects=["again.>"])
    for i in range(5):
        await js.publish("again.new", b"%d" % i)
    await lake.sealed("AGAIN", 5)
    lake.compact()
    new = StreamRef.load(lake.stream_dir("AGAIN"))
    assert new.table_path(lake.lake_dir) != old.table_path(lake.lake_dir)
    assert lake_progress(old.table_path(lake.lake_dir), old.app_id) == 20  # history kept
    assert lake_progress(new.table_path(lake.lake_dir), new.app_id) == 5
    rows = lake.sql("SELECT subject, count(*) AS n FROM AGAIN GROUP BY subject")
    assert [(r.subject, r.n) for r in rows] == [("again.new", 5)]
