"""Typed tables in named accounts, end to end: each account's JSON stream infers its own
schema (two accounts, one stream name, different payloads), its declared schema comes from
its own `jetlake_schemas` bucket, and its tables, rejects and inferred schema stay its own,
the same before and after compaction.
"""

from __future__ import annotations

import json
from typing import Any

import nats
import pytest
from nats.js.api import StreamConfig
from nats.js.errors import KeyNotFoundError

from tests.lake.conftest import DEADLINE, Lake
from tests.lake.test_lake_accounts import CONF
from tests.lake.test_typed_e2e import SHIP_SCHEMA
from tests.support.http import get_json
from tests.support.poll import poll_async

TYPED = {
    "jetlake.lake.format": "json",
    "jetlake.lake.tables": "orders.shipped.*=shipped",
    "jetlake.lake.schema.shipped": "ship",
}


def _rows(lake: Lake, *views: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of each view as dicts, by seq, from one refresh."""
    lake.sql("SELECT 1")  # refresh
    return {
        view: [
            r.asDict(recursive=True) for r in lake.spark.table(f"`{view}`").orderBy("seq").collect()
        ]
        for view in views
    }


@pytest.mark.soak  # five Delta tables compacted and read twice: 140 s on two busy cores
@pytest.mark.timeout(600)
async def test_each_account_infers_and_declares_its_own_typed_tables(lake: Lake) -> None:
    server = lake.start("-m", "-1", config=CONF)
    a = await nats.connect(f"nats://a:a@127.0.0.1:{server.port}")
    b = await nats.connect(f"nats://b:b@127.0.0.1:{server.port}")
    try:
        kv = await a.jetstream().create_key_value(bucket="jetlake_schemas")
        await kv.put("ship", json.dumps(SHIP_SCHEMA).encode())
        for nc in (a, b):
            await nc.jetstream().add_stream(
                StreamConfig(name="ORDERS", subjects=["orders.>"], metadata=TYPED)
            )
        ja, jb = a.jetstream(), b.jetstream()
        for i in range(3):  # the same name, other fields and types in each account
            await ja.publish("orders.created", json.dumps({"id": i, "amount": i}).encode())
            await jb.publish("orders.created", json.dumps({"sku": f"s{i}"}).encode())
        await ja.publish("orders.created", json.dumps({"id": 3, "amount": 3.5}).encode())
        await ja.publish("orders.shipped.eu", json.dumps({"id": 1, "carrier": "ups"}).encode())
        bad = await ja.publish("orders.shipped.eu", json.dumps({"id": "x", "carrier": 1}).encode())
        # B has no schema "ship" in a bucket of its own: A's is not B's.
        b_unknown = await jb.publish("orders.shipped.eu", json.dumps({"id": 1}).encode())

        names = ("A.ORDERS", "A.shipped", "A.shipped_rejects", "B.ORDERS", "B.shipped_rejects")
        before = _rows(lake, *names)
        await lake.sealed("ORDERS", bad.seq, "A")
        await lake.sealed("ORDERS", b_unknown.seq, "B")
        lake.compact()
        after = _rows(lake, *names)
        assert after == before  # the union read types each tail as compaction did

        assert [r["amount"] for r in after["A.ORDERS"]] == [0.0, 1.0, 2.0, 3.5]
        assert "sku" not in after["A.ORDERS"][0] and "amount" not in after["B.ORDERS"][0]
        assert [r["sku"] for r in after["B.ORDERS"]] == ["s0", "s1", "s2"]
        assert [(r["seq"], r["carrier"]) for r in after["A.shipped"]] == [(bad.seq - 1, "ups")]
        [rejected] = after["A.shipped_rejects"]
        assert rejected["seq"] == bad.seq and rejected["error"].startswith("JSON Schema")
        [unknown] = after["B.shipped_rejects"]
        assert unknown["seq"] == b_unknown.seq and "ship" in unknown["error"]

        streams = (await get_json(server.http_url + "/jsz"))["lake"]["streams"]
        assert streams["A.ORDERS"]["tables"]["ORDERS"]["columns"]["amount"] == "double"
        assert "amount" not in streams["B.ORDERS"]["tables"]["ORDERS"]["columns"]

        async def inferred() -> bool:  # in the account's own bucket
            try:
                entry = await kv.get("ORDERS.inferred")
            except KeyNotFoundError:
                return False
            return json.loads(entry.value or b"{}")["properties"]["amount"] == {"type": "number"}

        await poll_async(
            inferred, "ORDERS.inferred in account A's bucket jetlake_schemas", timeout=DEADLINE
        )
    finally:
        await a.close()
        await b.close()
