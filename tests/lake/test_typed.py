"""Typing of payloads without Spark: metadata, inference, JSON Schema, Avro, Protobuf, rejects."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from log.compactor.rows import to_lake
from log.compactor.typed import Registry, SpecError, lake_spec, type_rows
from log.compactor.typed.columns import FitError, fitter, retyped
from log.compactor.typed.registry import PREFIX, Revision, parse_pin, registry_from_rows
from log.compactor.typed.typer import REJECTS_SCHEMA, retype

T0 = 1_780_000_000_000_000_000  # ns


def rows(*msgs: tuple[str, bytes | None, dict[str, str] | None], ts: int = T0) -> pa.Table:
    """Lake rows of messages (subject, payload, headers), seq 1.., one microsecond apart."""
    hdrs = []
    for _, _, h in msgs:
        block = None
        if h:
            block = (
                "NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
            ).encode()
        hdrs.append(block)
    seg = pa.table(
        {
            "seq": pa.array(range(1, len(msgs) + 1), pa.uint64()),
            "ts": pa.array([ts + 1000 * i for i in range(len(msgs))], pa.timestamp("ns", tz="UTC")),
            "subject": [m[0] for m in msgs],
            "hdr": pa.array(hdrs, pa.binary()),
            "data": pa.array([m[1] for m in msgs], pa.binary()),
        }
    )
    return to_lake("S", seg)


def js(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def payload(table: pa.Table) -> list[dict[str, Any]]:
    names = [n for n in table.column_names if n not in ("stream", "ts", "headers", "date")]
    return table.select(names).to_pylist()


def registry(*revs: tuple[str, int, Any, int]) -> Registry:
    """Revisions (name, rev, document, ts_ns)."""
    out = Registry()
    for name, rev, doc, ts in revs:
        out.add(Revision(name, rev, ts, doc if isinstance(doc, str) else json.dumps(doc)))
    return out


def test_metadata_rules_and_errors() -> None:
    assert not lake_spec("S", {}).typed
    spec = lake_spec(
        "S",
        {
            "jetlake.lake.format": "JSON",
            "jetlake.lake.tables": "o.created.*=created, o.shipped.*=shipped",
            "jetlake.lake.schema.shipped": "ship",
            "jetlake.lake.keep_raw": "false",
        },
    )
    assert [t.name for t in spec.tables] == ["S", "created", "shipped"]
    assert spec.route("o.created.1").name == "created"
    assert spec.route("o.other").name == "S"
    assert spec.route("o.shipped.2").schema == "ship"
    assert not spec.main.keep_raw and spec.main.schema is None
    for bad, word in (
        ({"jetlake.lake.format": "xml"}, "is not one of"),
        ({"jetlake.lake.format": "avro"}, "needs jetlake.lake.schema"),
        ({"jetlake.lake.format": "json", "jetlake.lake.tables": "a.*"}, "<subject pattern>="),
        ({"jetlake.lake.format": "json", "jetlake.lake.tables": "a.*=S"}, "is taken"),
        ({"jetlake.lake.tables": "a.*=t"}, "needs jetlake.lake.format"),
        ({"jetlake.lake.keep_raw": "maybe"}, "not true or false"),
    ):
        with pytest.raises(SpecError, match=word) as err:
            lake_spec("S", bad)
        assert "stream S" in str(err.value)


def test_inference_nests_widens_and_keeps_conflicts_as_json_text() -> None:
    spec = lake_spec("S", {"jetlake.lake.format": "json"})
    got = type_rows(
        rows(
            ("s", js({"id": 1, "amount": 2, "customer": {"id": 7}, "tags": ["a"], "v": 1}), None),
            ("s", js({"id": 2, "amount": 2.5, "tags": [], "v": "x", "none": None}), None),
            ("s", js({"id": 3, "v": {"deep": True}}), None),
            ("s", b"[1, 2]", None),
            ("s", b"{oops", None),
        ),
        spec,
        Registry(),
        {},
    )["S"]
    assert got.payload == pa.struct(
        [
            ("id", pa.int64()),
            ("amount", pa.float64()),
            ("customer", pa.struct([("id", pa.int64())])),
            ("tags", pa.list_(pa.string())),
            ("v", pa.string()),
            ("none", pa.string()),
        ]
    )
    assert got.conflicts == {"v"}
    assert [r["v"] for r in payload(got.rows)] == ["1", "x", '{"deep":true}']
    assert [r["amount"] for r in payload(got.rows)] == [2.0, 2.5, None]
    assert payload(got.rows)[0]["customer"] == {"id": 7}
    assert got.rejects.column("seq").to_pylist() == [4, 5]
    errors = got.rejects.column("error").to_pylist()
    assert errors[0] == "not a JSON object but a list" and errors[1].startswith("not JSON")
    assert got.rejects.column("data").to_pylist() == [b"[1, 2]", b"{oops"]


def test_evolution_against_the_table_grows_widens_and_turns_conflicts_into_text() -> None:
    spec = lake_spec("S", {"jetlake.lake.format": "json"})
    first = type_rows(rows(("s", js({"id": 1, "c": {"a": 1}}), None)), spec, Registry(), {})["S"]
    base = {"S": first.rows.schema}
    grown = type_rows(
        rows(("s", js({"c": {"a": 2, "b": "new"}, "added": True}), None)), spec, Registry(), base
    )["S"]
    assert grown.rows.column_names[-3:] == ["id", "c", "added"]  # new columns at the end
    assert grown.payload.field("c").type == pa.struct([("a", pa.int64()), ("b", pa.string())])
    assert not retyped(first.payload, grown.payload)  # Delta's merge schema is enough
    later = type_rows(
        rows(("s", js({"id": 2.5}), None), ("s", js({"id": 3, "c": "flat"}), None)),
        spec,
        Registry(),
        base,
    )["S"]
    assert later.payload == pa.struct([("id", pa.float64()), ("c", pa.string())])
    assert later.conflicts == {"c"} and retyped(first.payload, later.payload)  # a rewrite
    assert [(r["id"], r["c"]) for r in payload(later.rows)] == [(2.5, None), (3.0, "flat")]
    # The same values in one batch or in two give the same table.
    both = rows(
        ("s", js({"id": 1, "c": {"a": 1}}), None),
        ("s", js({"id": 2.5}), None),
        ("s", js({"id": 3, "c": "flat"}), None),
    )
    assert type_rows(both, spec, Registry(), {})["S"].payload == later.payload


def test_declared_json_schema_validates_pins_and_refuses_an_incompatible_revision() -> None:
    v1 = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "amount": {"type": "number"}},
        "required": ["id"],
    }
    v2 = {**v1, "properties": {**v1["properties"], "note": {"type": "string"}}}
    bad = {"type": "object", "properties": {"amount": {"type": "number"}}}  # drops required id
    v4 = {**v2, "properties": {**v2["properties"], "id": {"type": "string"}}}  # changes a type
    reg = registry(
        ("orders", 3, v1, T0 - 10_000), ("orders", 5, v2, T0 + 500),
        ("orders", 6, bad, T0 + 2500), ("orders", 7, v4, T0 + 4500),
    )  # fmt: skip
    spec = lake_spec("S", {"jetlake.lake.format": "json", "jetlake.lake.schema": "orders"})
    got = type_rows(
        rows(
            ("s", js({"id": 1, "amount": 1.5, "note": "dropped by v1"}), None),  # v1 (latest at ts)
            ("s", js({"id": 2, "note": "n"}), None),  # v5 (published after the first)
            ("s", js({"amount": 3}), {"Nats-Schema": "orders@3"}),  # pinned: invalid under v1
            ("s", js({"amount": 4}), None),  # v6: incompatible
            ("s", js({"id": "x"}), {"Nats-Schema": "orders@7"}),  # changes id's type
            ("s", js({"id": 6}), {"Nats-Schema": "orders@9"}),  # no such revision
            ("s", js({"id": 7}), {"Nats-Schema": "other"}),  # no such schema
        ),
        spec,
        reg,
        {},
    )["S"]
    assert [(r["seq"], r["id"], r.get("note")) for r in payload(got.rows)] == [
        (1, 1, None),
        (2, 2, "n"),
    ]
    assert got.revisions == {"orders@3", "orders@5"}
    errors = dict(
        zip(
            got.rejects.column("seq").to_pylist(),
            got.rejects.column("error").to_pylist(),
            strict=True,
        )
    )
    assert errors[3] == "JSON Schema: at <root>: 'id' is a required property"
    assert errors[4].startswith("schema orders@6 is incompatible with orders@5: required field id")
    assert "field id changes from int64 to string" in errors[5]
    assert errors[6] == "schema orders@9 is not in bucket jetlake_schemas"
    assert errors[7] == "no schema other in bucket jetlake_schemas when the message was stored"


def test_avro_records_and_int_to_long_promotion() -> None:
    v1 = {"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "int"}, {"name": "customer", "type": {"type": "record",
         "name": "C", "fields": [{"name": "id", "type": "long"}]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ]}  # fmt: skip
    v2 = {**v1, "fields": [{"name": "id", "type": "long"}, *v1["fields"][1:],
          {"name": "note", "type": ["null", "string"], "default": None}]}  # fmt: skip

    def avro(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
        return buf.getvalue()

    reg = registry(("order", 1, v1, T0 - 1), ("order", 2, v2, T0 + 500))
    spec = lake_spec("S", {"jetlake.lake.format": "avro", "jetlake.lake.schema": "order"})
    got = type_rows(
        rows(
            ("s", avro(v1, {"id": 1, "customer": {"id": 2**40}, "tags": ["a", "b"]}), None),
            ("s", avro(v2, {"id": 2**35, "customer": {"id": 1}, "tags": [], "note": "n"}), None),
            (
                "s",
                avro(v1, {"id": 3, "customer": {"id": 1}, "tags": []}),
                {"Nats-Schema": "order@1"},
            ),
            ("s", b"\x02", None),
        ),
        spec,
        reg,
        {},
    )["S"]
    assert got.payload.field("id").type == pa.int64()
    assert [(r["id"], r["customer"], r["tags"], r["note"]) for r in payload(got.rows)] == [
        (1, {"id": 2**40}, ["a", "b"], None),
        (2**35, {"id": 1}, [], "n"),
        (3, {"id": 1}, [], None),
    ]
    assert got.rejects.column("seq").to_pylist() == [4]
    assert got.rejects.column("error")[0].as_py().startswith("Avro: ")


def order_descriptor() -> descriptor_pb2.FileDescriptorSet:
    f = descriptor_pb2.FileDescriptorProto(name="order.proto", package="shop", syntax="proto3")
    item = f.message_type.add(name="Item")
    item.field.add(name="sku", number=1, type=9, label=1)  # string
    item.field.add(name="qty", number=2, type=5, label=1)  # int32
    order = f.message_type.add(name="Order")
    order.field.add(name="id", number=1, type=3, label=1)  # int64
    order.field.add(name="amount", number=2, type=1, label=1)  # double
    order.field.add(name="items", number=3, type=11, label=3, type_name=".shop.Item")
    order.field.add(name="status", number=4, type=14, label=1, type_name=".shop.Status")
    status = f.enum_type.add(name="Status")
    status.value.add(name="NEW", number=0)
    status.value.add(name="PAID", number=1)
    return descriptor_pb2.FileDescriptorSet(file=[f])


def test_protobuf_from_a_descriptor_set() -> None:
    files = order_descriptor()
    pool = descriptor_pool.DescriptorPool()
    pool.Add(files.file[0])
    order = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
    doc = {
        "descriptor_set": base64.b64encode(files.SerializeToString()).decode(),
        "message": "shop.Order",
    }
    spec = lake_spec("S", {"jetlake.lake.format": "protobuf", "jetlake.lake.schema": "order"})
    msg = order(id=7, amount=9.5, status=1)
    msg.items.add(sku="a", qty=2)
    got = type_rows(
        rows(("s", msg.SerializeToString(), None), ("s", b"\xff\xff", None)),
        spec,
        registry(("order", 1, doc, T0 - 1)),
        {},
    )["S"]
    assert payload(got.rows)[0] | {"data": None} == {
        "seq": 1, "subject": "s", "data": None, "id": 7, "amount": 9.5,
        "items": [{"sku": "a", "qty": 2}], "status": "PAID",
    }  # fmt: skip
    assert got.rejects.column("error")[0].as_py().startswith("Protobuf shop.Order: ")


def test_fan_out_markers_raw_kept_or_dropped_and_envelope_names() -> None:
    spec = lake_spec(
        "S",
        {
            "jetlake.lake.format": "json",
            "jetlake.lake.tables": "o.a.*=a_events",
            "jetlake.lake.keep_raw": "false",
        },
    )
    got = type_rows(
        rows(
            ("o.a.1", js({"seq": "mine", "x": 1}), None),
            ("o.b", js({"y": 1}), None),
            ("o.b", None, {"KV-Operation": "DEL"}),
            ("o.a.2", b"nope", None),
        ),
        spec,
        Registry(),
        {},
    )
    a, main = got["a_events"], got["S"]
    assert payload(a.rows) == [
        {"seq": 1, "subject": "o.a.1", "data": None, "payload_seq": "mine", "x": 1}
    ]
    assert payload(main.rows) == [
        {"seq": 2, "subject": "o.b", "data": None, "y": 1},
        {"seq": 3, "subject": "o.b", "data": None, "y": None},
    ]
    assert a.rejects.column("data").to_pylist() == [b"nope"]  # rejects keep the payload
    assert not len(main.rejects)


def test_registry_from_the_bucket_rows_and_pins() -> None:
    bucket = rows(
        (PREFIX + "orders", b'{"type": "object"}', None),
        (PREFIX + "other", b"{}", None),
        (PREFIX + "orders", None, {"KV-Operation": "DEL"}),
        ("$KV.elsewhere.orders", b"{}", None),
    )
    reg = registry_from_rows(pa.concat_tables([bucket, bucket]))  # live and lake rows overlap
    assert [r.rev for r in reg.history("orders")] == [1, 3]
    assert reg.resolve("orders", T0 + 500).rev == 1
    with pytest.raises(LookupError, match="no schema orders"):
        reg.resolve("orders", T0 + 5000)  # deleted by then
    assert reg.resolve("orders", T0 + 5000, pinned=1).text == '{"type": "object"}'
    assert parse_pin("orders@3") == ("orders", 3) and parse_pin("orders") == ("orders", None)
    with pytest.raises(ValueError, match="Nats-Schema"):
        parse_pin("orders@x")


def test_typing_is_deterministic() -> None:
    spec = lake_spec("S", {"jetlake.lake.format": "json"})
    batch = rows(*[("s", js({"i": i, "v": i if i % 3 else str(i)}), None) for i in range(50)])
    one = type_rows(batch, spec, Registry(), {})["S"]
    two = type_rows(batch, spec, Registry(), {})["S"]
    assert one.rows.equals(two.rows) and one.rejects.equals(two.rejects)


def test_fit_errors_name_the_field_and_a_retype_keeps_every_value() -> None:
    t = pa.struct([("a", pa.list_(pa.struct([("b", pa.int64())])))])
    with pytest.raises(FitError, match=r"^field a\[1\]\.b: 2\.5 is not a bigint$"):
        fitter(t)({"a": [{"b": 1}, {"b": 2.5}]})
    spec = lake_spec("S", {"jetlake.lake.format": "json"})
    old = type_rows(rows(("s", js({"n": 1, "o": {"k": [1]}}), None)), spec, Registry(), {})["S"]
    wider = pa.struct([("n", pa.float64()), ("o", pa.string())])
    schema = pa.schema([*REJECTS_SCHEMA][:-1] + list(wider))
    got = retype(old.rows, schema)
    assert got.schema == schema and payload(got) == [
        {"seq": 1, "subject": "s", "data": old.rows.column("data")[0].as_py(), "n": 1.0,
         "o": '{"k":[1]}'}
    ]  # fmt: skip
