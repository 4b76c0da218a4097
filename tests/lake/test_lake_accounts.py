"""Named accounts' streams in the lake: each account's tables apart, its views the union
of its own table and its own live tail, its KV bucket a view of its own; each table's
Delta description names the account's stream.

Accounts A and B each have a stream `ORDERS` (one name, two tables) and A a KV bucket;
the server seals and holds reclaim for both accounts' streams, the test compacts in
process (the shared session) and reads the views as `A.ORDERS`, `B.ORDERS`,
`A.kv_cfg`.
"""

from __future__ import annotations

import json

import nats
from nats.aio.client import Client as NATS
from nats.js.api import StreamConfig

from log.compactor.compact import lake_progress
from log.compactor.layout import StreamRef
from sql.session import refresh
from tests.lake.conftest import DEADLINE, LAKE_CONF, Lake
from tests.support.http import get_json
from tests.support.poll import poll_async

CONF = (
    LAKE_CONF
    + """
accounts {
  A { jetstream: enabled, users: [{user: a, password: a}] }
  B { jetstream: enabled, users: [{user: b, password: b}] }
}
"""
)


async def _orders(nc: NATS, n: int, first: int = 0) -> None:
    js = nc.jetstream()
    for i in range(first, first + n):
        await js.publish(f"orders.{i % 3}", b"%d" % i)


async def test_each_account_has_its_own_tables_and_views(lake: Lake) -> None:
    server = lake.start("-m", "-1", config=CONF)
    a = await nats.connect(f"nats://a:a@127.0.0.1:{server.port}")
    b = await nats.connect(f"nats://b:b@127.0.0.1:{server.port}")
    try:
        for nc in (a, b):
            await nc.jetstream().add_stream(name="ORDERS", subjects=["orders.>"])
        await _orders(a, 30)
        await _orders(b, 7)
        kv = await a.jetstream().create_key_value(bucket="cfg")
        await kv.put("mode", b"fast")
        await kv.put("mode", b"safe")
        # A typed stream of B's with a fan-out table: its tables and views are B's too.
        typed = {"jetlake.lake.format": "json", "jetlake.lake.tables": "iot.temp.>=temps"}
        await b.jetstream().add_stream(StreamConfig(name="IOT", subjects=["iot.>"], metadata=typed))
        for i in range(3):
            await b.jetstream().publish(f"iot.temp.{i}", json.dumps({"c": i}).encode())
        a_ref = StreamRef.load(lake.stream_dir("ORDERS", "A"))
        b_ref = StreamRef.load(lake.stream_dir("ORDERS", "B"))
        assert (a_ref.qualified, b_ref.qualified) == ("A.ORDERS", "B.ORDERS")
        # The server's seal timer covers every account's streams.
        await lake.sealed("ORDERS", 30, "A")
        await lake.sealed("ORDERS", 7, "B")
        await lake.sealed("KV_cfg", 2, "A")
        await lake.sealed("IOT", 3, "B")
        assert lake.compact().rows == 30 + 7 + 2 + 3  # the KV bucket's and IOT's too
        a_table, b_table = a_ref.table_path(lake.lake_dir), b_ref.table_path(lake.lake_dir)
        assert a_table.parent.name == "A.ORDERS" and b_table.parent.name == "B.ORDERS"
        assert lake_progress(a_table, a_ref.app_id) == 30
        assert lake_progress(b_table, b_ref.app_id) == 7
        # Each table says what it holds, in its Delta log: what Delta's catalog describes.
        described = lake.spark.sql(f"DESCRIBE TABLE EXTENDED delta.`{a_table}`").collect()
        comment = {r.col_name: r.data_type for r in described}.get("Comment")
        assert comment == "jetlake stream A.ORDERS: subjects orders.>, format raw"

        await _orders(a, 2, first=30)  # the live tail, after the lake
        rows = lake.sql("SELECT count(*) AS n, count(DISTINCT seq) AS d FROM `A.ORDERS`")
        assert rows[0] == (32, 32)
        assert lake.sql("SELECT count(*) AS n FROM `B.ORDERS`")[0].n == 7
        stream = lake.sql("SELECT DISTINCT stream FROM `A.ORDERS`")
        assert [r.stream for r in stream] == ["ORDERS"]
        [cfg] = lake.sql("SELECT key, CAST(value AS STRING) AS v FROM `A.kv_cfg`")
        assert (cfg.key, cfg.v) == ("mode", "safe")
        temps = lake.sql("SELECT c FROM `B.temps` ORDER BY c")
        assert [r.c for r in temps] == [0, 1, 2]
        iot = StreamRef.load(lake.stream_dir("IOT", "B")).typed_table_path(lake.lake_dir, "temps")
        assert iot.parent.name == "B.IOT" and iot.is_delta_table()
        # No global account's view of either: `$G` has no JetStream here. (The Spark
        # session is shared with other tests, so its views are asked of this store alone.)
        views = refresh(lake.spark, store_dir=lake.store, lake_dir=lake.lake_dir)
        assert not views.get("$G") and "A.ORDERS" in views["A"] and "B.ORDERS" in views["B"]

        async def pinned() -> bool:  # the server's lag counts the lake's commit
            lake_doc = (await get_json(server.http_url + "/jsz"))["lake"]["streams"]
            return lake_doc["A.ORDERS"]["lake_seq"] == 30 and lake_doc["B.ORDERS"]["lake_seq"] == 7

        await poll_async(pinned, "/jsz shows each account's lake_seq", timeout=DEADLINE)
    finally:
        await a.close()
        await b.close()
