"""Typed lake tables end to end: nats-py producers, schemas in the `jetlake_schemas` KV bucket,
Spark SQL over typed columns before and after compaction, rejects, fan-out, `/jsz`, `/metrics`.

Two tests on the shared Spark session (each a server, a few appends and queries).
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import fastavro
import pytest
from google.protobuf import descriptor_pool, message_factory
from nats.js.api import StreamConfig
from nats.js.errors import KeyNotFoundError

from tests.conftest import Connect
from tests.lake.conftest import DEADLINE, Lake
from tests.lake.test_typed import order_descriptor
from tests.support.http import get_json, http_get
from tests.support.poll import poll_async

SHIP_SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "carrier": {"type": "string"}},
    "required": ["id", "carrier"],
}


def views(lake: Lake, *names: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of each view as dicts (column order aside), by seq, from one refresh."""
    lake.sql("SELECT 1")  # refresh
    out = {}
    for name in names:
        rows = lake.spark.table(f"`{name}`").orderBy("seq").collect()
        out[name] = [r.asDict(recursive=True) for r in rows]
    return out


@pytest.mark.timeout(600)  # a JVM start, appends and queries on two busy cores
async def test_json_inferred_declared_fan_out_rejects_and_the_live_tail(
    lake: Lake, connect: Connect
) -> None:
    server = lake.start()
    nc = await connect(server)
    js = nc.jetstream()
    kv = await js.create_key_value(bucket="jetlake_schemas")
    await kv.put("ship", json.dumps(SHIP_SCHEMA).encode())
    metadata = {
        "jetlake.lake.format": "json",
        "jetlake.lake.tables": "orders.shipped.*=shipped",
        "jetlake.lake.schema.shipped": "ship",
    }
    await js.add_stream(StreamConfig(name="ORDERS", subjects=["orders.>"], metadata=metadata))
    for i in range(6):
        await js.publish(
            "orders.created.eu",
            json.dumps({"id": i, "amount": i, "customer": {"id": i % 3}}).encode(),
        )
    # A new field mid-stream, and a fraction where integers came before (a widening).
    doc = {"id": 6, "amount": 6.5, "customer": {"id": 1}, "coupon": "X"}
    await js.publish("orders.created.us", json.dumps(doc).encode())
    bad = await js.publish("orders.created.eu", b"{not json")
    await js.publish("orders.shipped.eu", json.dumps({"id": 1, "carrier": "ups"}).encode())
    invalid = await js.publish(
        "orders.shipped.eu", json.dumps({"id": "one", "carrier": "ups"}).encode()
    )

    before = views(lake, "ORDERS", "ORDERS_rejects", "shipped", "shipped_rejects")
    await lake.sealed("ORDERS", invalid.seq)
    assert lake.compact().rows >= invalid.seq
    after = views(lake, *before)
    assert after == before  # the union read types the tail exactly as compaction did

    orders = after["ORDERS"]
    assert [r["amount"] for r in orders] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.5]
    assert [r["coupon"] for r in orders] == [None] * 6 + ["X"]  # nulls before it appeared
    assert lake.sql("SELECT count(*) AS n FROM ORDERS WHERE customer.id = 1")[0].n == 3
    assert [(r["seq"], r["carrier"]) for r in after["shipped"]] == [(invalid.seq - 1, "ups")]
    (reject,) = after["ORDERS_rejects"]
    assert (reject["seq"], reject["data"]) == (bad.seq, b"{not json")
    assert reject["error"].startswith("not JSON")
    (reject,) = after["shipped_rejects"]
    assert reject["seq"] == invalid.seq and reject["error"] == (
        "JSON Schema: at id: 'one' is not of type 'integer'"
    )

    # Right after its PubAck, a message is typed in the view, and a reject in the rejects view.
    ack = await js.publish(
        "orders.created.eu", json.dumps({"id": 9, "customer": {"id": 7}}).encode()
    )
    late = await js.publish("orders.created.eu", b"[]")
    rows = lake.sql("SELECT seq, amount FROM ORDERS WHERE customer.id = 7")
    assert [(r.seq, r.amount) for r in rows] == [(ack.seq, None)]
    rows = lake.sql("SELECT seq, error FROM ORDERS_rejects ORDER BY seq")
    assert [r.seq for r in rows] == [bad.seq, late.seq]

    stream = (await get_json(server.http_url + "/jsz"))["lake"]["streams"]["ORDERS"]
    assert stream["rejects"] == 2  # in the rejects tables (the compacted ones)
    assert stream["tables"]["ORDERS"]["columns"]["amount"] == "double"
    assert stream["tables"]["shipped"]["revisions"] == [f"ship@{1}"]

    async def inferred() -> bool:  # the server puts it in the bucket as JSON Schema
        try:
            entry = await kv.get("ORDERS.inferred")
        except KeyNotFoundError:
            return False
        doc = json.loads(entry.value or b"{}")
        return doc["properties"]["amount"] == {"type": "number"}

    await poll_async(inferred, "ORDERS.inferred in bucket jetlake_schemas", timeout=DEADLINE)
    metrics = (await http_get(server.http_url + "/metrics")).body.decode()
    assert 'jetlake_lake_rejects{server_id="' in metrics and 'stream="ORDERS"} 2' in metrics


@pytest.mark.timeout(600)
async def test_avro_protobuf_with_pins_and_a_typed_kv_bucket(lake: Lake, connect: Connect) -> None:
    server = lake.start()
    nc = await connect(server)
    js = nc.jetstream()
    schemas = await js.create_key_value(bucket="jetlake_schemas")
    v1 = {"type": "record", "name": "Click", "fields": [{"name": "user", "type": "long"}]}
    v2 = {
        **v1,
        "fields": [*v1["fields"], {"name": "page", "type": ["null", "string"], "default": None}],
    }
    rev1 = await schemas.put("click", json.dumps(v1).encode())
    await schemas.put("click", json.dumps(v2).encode())
    files = order_descriptor()
    proto = {
        "descriptor_set": base64.b64encode(files.SerializeToString()).decode(),
        "message": "shop.Order",
    }
    await schemas.put("order", json.dumps(proto).encode())

    def avro(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
        return buf.getvalue()

    meta = {"jetlake.lake.format": "avro", "jetlake.lake.schema": "click"}
    await js.add_stream(StreamConfig(name="CLICKS", subjects=["clicks"], metadata=meta))
    await js.publish("clicks", avro(v2, {"user": 1, "page": "/home"}))
    await js.publish("clicks", avro(v1, {"user": 2}), headers={"Nats-Schema": f"click@{rev1}"})
    await js.publish("clicks", b"\xff")

    pool = descriptor_pool.DescriptorPool()
    pool.Add(files.file[0])
    order = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
    meta = {"jetlake.lake.format": "protobuf", "jetlake.lake.schema": "order"}
    await js.add_stream(StreamConfig(name="PB", subjects=["pb"], metadata=meta))
    msg = order(id=5, amount=2.5, status=1)
    msg.items.add(sku="a", qty=3)
    await js.publish("pb", msg.SerializeToString())

    cfg = await js.create_key_value(bucket="cfg")
    info = await js.stream_info("KV_cfg")
    info.config.metadata = {"jetlake.lake.format": "json"}
    await js.update_stream(info.config)
    await cfg.put("a", b'{"limit": 5, "on": true}')
    await cfg.put("b", b'{"limit": 7}')
    await cfg.put("a", b'{"limit": 6, "on": false}')
    await cfg.delete("b")

    for _ in range(2):  # the live tail, then the lake
        clicks = lake.sql("SELECT user, page FROM CLICKS ORDER BY seq")
        assert [(r.user, r.page) for r in clicks] == [(1, "/home"), (2, None)]
        (rej,) = lake.sql("SELECT seq, error FROM CLICKS_rejects")
        assert rej.seq == 3 and rej.error.startswith("Avro: ")
        (row,) = lake.sql("SELECT id, amount, items, status FROM PB")
        assert (row.id, row.amount, row.status) == (5, 2.5, "PAID")
        assert [i.asDict() for i in row.items] == [{"sku": "a", "qty": 3}]
        keys = lake.sql("SELECT key, limit, on FROM kv_cfg ORDER BY key")
        assert [tuple(r) for r in keys] == [("a", 6, False)]
        await lake.sealed("CLICKS", 3)
        await lake.sealed("PB", 1)
        await lake.sealed("KV_cfg", 4)
        lake.compact()
    # A message delete reaches the typed stream's tables (here its rejects table) too.
    await js.delete_msg("CLICKS", 3)
    assert lake.compact().deletes == 1
    assert lake.sql("SELECT count(*) AS n FROM CLICKS_rejects")[0].n == 0
    assert len(lake.sql("SELECT user FROM CLICKS")) == 2
