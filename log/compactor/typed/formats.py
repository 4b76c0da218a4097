"""Schemas of the three payload formats, compiled once into a decoder and a lake column type.

Decoding is done in Python with the formats' own libraries (`json` plus
`jsonschema` for validation, `fastavro`, `protobuf`), not with Spark's
`from_json`/`from_avro`: the live tail of the union view must be typed by the
same function as the compactor, and Spark has no Protobuf reader without
another Maven package; a per-record error (which the rejects table keeps) is
also what a Python decoder gives, where Spark's readers give a null or fail
the whole job. What a schema's document looks like:
- json: a JSON Schema (any draft `jsonschema` knows; the `$schema` key picks it);
- avro: Avro schema JSON (a record); payloads are plain Avro binary, no
  container header and no registry framing: the `Nats-Schema` header names
  the writer's schema;
- protobuf: `{"descriptor_set": "<base64 FileDescriptorSet>", "message": "pkg.Name"}`
  (`protoc --include_imports --descriptor_set_out`).

A compiled schema also gives the paths it requires, so a new revision that
drops one (or changes a column's type) can be refused as incompatible.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from log.compactor.typed.columns import BIGINT, DOUBLE, STRING

Decode = Callable[[bytes], Any]


class SchemaError(ValueError):
    """A schema document that cannot type anything; the message says why."""


class DecodeError(ValueError):
    """A payload its schema does not decode or validate; the message says where."""


@dataclass(frozen=True, slots=True)
class Compiled:
    """A schema revision ready to type payloads."""

    type: pa.StructType  # the columns it gives
    required: frozenset[str]  # field paths every valid payload has
    decode: Decode  # payload bytes -> a dict of Python values (DecodeError when bad)


def compile_schema(fmt: str, text: str) -> Compiled:
    """`text` (the KV value) as a compiled schema of format `fmt`; SchemaError when unusable."""
    try:
        if fmt == "json":
            return _json_schema(json.loads(text))
        if fmt == "avro":
            return _avro(json.loads(text))
        if fmt == "protobuf":
            return _protobuf(json.loads(text))
    except SchemaError:
        raise
    except Exception as exc:  # each library raises its own kinds for a bad document
        raise SchemaError(f"not a valid {fmt} schema: {exc}") from exc
    raise SchemaError(f"no schemas for format {fmt}")


def decode_json(data: bytes) -> Any:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DecodeError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise DecodeError(f"not a JSON object but a {type(doc).__name__}")
    return doc


# -- JSON Schema -----------------------------------------------------------------------


def _json_schema(doc: Any) -> Compiled:
    import jsonschema
    from jsonschema.exceptions import best_match

    if not isinstance(doc, dict):
        raise SchemaError("a JSON Schema must be an object")
    cls = jsonschema.validators.validator_for(doc)
    cls.check_schema(doc)
    validator = cls(doc)
    required: set[str] = set()
    t = _json_type(doc, "", required)
    if not pa.types.is_struct(t):
        raise SchemaError('the top level of a JSON Schema must be {"type": "object"}')

    def decode(data: bytes) -> Any:
        value = decode_json(data)
        error = best_match(validator.iter_errors(value))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "<root>"
            raise DecodeError(f"JSON Schema: at {where}: {error.message}")
        return value

    return Compiled(t, frozenset(required), decode)


def _json_type(node: Any, path: str, required: set[str]) -> pa.DataType:
    if not isinstance(node, dict):
        return STRING
    kinds = node.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    kinds = [k for k in kinds if k != "null"]
    if len(kinds) != 1:  # no type, a union, $ref, oneOf: kept as JSON text
        return STRING
    kind = kinds[0]
    if kind == "object" and isinstance(node.get("properties"), dict):
        must = set(node.get("required") or ())
        fields = []
        for name, sub in node["properties"].items():
            here = f"{path}.{name}" if path else name
            if name in must:
                required.add(here)
            fields.append(pa.field(name, _json_type(sub, here, required)))
        return pa.struct(fields)
    if kind == "array":
        return pa.list_(_json_type(node.get("items"), path + "[]", set()))
    simple = {"integer": BIGINT, "number": DOUBLE, "string": STRING, "boolean": pa.bool_()}
    return simple.get(kind, STRING)


# -- Avro ------------------------------------------------------------------------------


def _avro(doc: Any) -> Compiled:
    import fastavro

    parsed = fastavro.parse_schema(doc)
    required: set[str] = set()
    t = _avro_type(doc, "", required, {})
    if not pa.types.is_struct(t):
        raise SchemaError("an Avro schema for the lake must be a record")

    def decode(data: bytes) -> Any:
        buf = io.BytesIO(data)
        try:
            value = fastavro.schemaless_reader(buf, parsed, None)
        except Exception as exc:  # fastavro raises EOFError, ValueError, UnicodeDecodeError...
            raise DecodeError(f"Avro: {type(exc).__name__}: {exc}") from exc
        if buf.tell() != len(data):
            raise DecodeError(f"Avro: {len(data) - buf.tell()} bytes after the record")
        return value

    return Compiled(t, frozenset(required), decode)


_AVRO_SIMPLE = {
    "boolean": pa.bool_(),
    "int": BIGINT,
    "long": BIGINT,
    "float": DOUBLE,
    "double": DOUBLE,
    "bytes": pa.binary(),
    "string": STRING,
}
_AVRO_LOGICAL = {
    "timestamp-millis": pa.timestamp("us", tz="UTC"),
    "timestamp-micros": pa.timestamp("us", tz="UTC"),
    "date": pa.date32(),
}


def _avro_type(
    node: Any, path: str, required: set[str], named: dict[str, pa.DataType]
) -> pa.DataType:
    if isinstance(node, str):
        return _AVRO_SIMPLE.get(node) or named.get(node) or STRING
    if isinstance(node, list):  # a union: [null, T] is a nullable T, others JSON text
        rest = [n for n in node if n != "null"]
        return _avro_type(rest[0], path, required, named) if len(rest) == 1 else STRING
    kind = node.get("type")
    if node.get("logicalType") in _AVRO_LOGICAL:
        return _AVRO_LOGICAL[node["logicalType"]]
    if kind == "record":
        fields = []
        for f in node.get("fields", []):
            here = f"{path}.{f['name']}" if path else f["name"]
            nullable = isinstance(f["type"], list) and "null" in f["type"]
            if not nullable and "default" not in f:
                required.add(here)
            fields.append(pa.field(f["name"], _avro_type(f["type"], here, required, named)))
        t = pa.struct(fields)
        named[node.get("name", "")] = t
        return t
    if kind == "array":
        return pa.list_(_avro_type(node.get("items"), path + "[]", set(), named))
    if kind == "map":
        return pa.map_(STRING, _avro_type(node.get("values"), path + "{}", set(), named))
    if kind == "enum":
        named[node.get("name", "")] = STRING
        return STRING
    if kind == "fixed":
        named[node.get("name", "")] = pa.binary()
        return pa.binary()
    return _avro_type(kind, path, required, named)


# -- Protobuf --------------------------------------------------------------------------


def _protobuf(doc: Any) -> Compiled:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from google.protobuf.message import DecodeError as ProtoDecodeError

    if not isinstance(doc, dict) or not {"descriptor_set", "message"} <= doc.keys():
        raise SchemaError('a Protobuf schema is {"descriptor_set": <base64>, "message": <name>}')
    files = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(doc["descriptor_set"]))
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    desc = pool.FindMessageTypeByName(doc["message"])
    cls = message_factory.GetMessageClass(desc)
    required: set[str] = set()
    t = _proto_type(desc, "", required)

    def decode(data: bytes) -> Any:
        try:
            return _proto_value(cls.FromString(data))
        except ProtoDecodeError as exc:
            raise DecodeError(f"Protobuf {doc['message']}: {exc}") from exc

    return Compiled(t, frozenset(required), decode)


def _proto_field_type(field: Any, path: str, required: set[str]) -> pa.DataType:
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.type == F.TYPE_MESSAGE:
        if field.message_type.GetOptions().map_entry:
            value = field.message_type.fields_by_name["value"]
            return pa.map_(STRING, _proto_field_type(value, path + "{}", set()))
        return _proto_type(field.message_type, path, required)
    if field.type in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return DOUBLE
    if field.type == F.TYPE_BOOL:
        return pa.bool_()
    if field.type == F.TYPE_BYTES:
        return pa.binary()
    if field.type in (F.TYPE_STRING, F.TYPE_ENUM):
        return STRING
    return BIGINT  # every integer kind (uint64 above 2^63 does not fit: a reject)


def _proto_type(desc: Any, path: str, required: set[str]) -> pa.StructType:
    fields = []
    for field in desc.fields:
        here = f"{path}.{field.name}" if path else field.name
        if field.is_required:
            required.add(here)
        t = _proto_field_type(field, here, required)
        if field.is_repeated and not pa.types.is_map(t):
            t = pa.list_(t)
        fields.append(pa.field(field.name, t))
    return pa.struct(fields)


def _proto_value(msg: Any) -> dict[str, Any]:
    """A parsed message as plain values: unset message fields None, enums by name."""
    from google.protobuf.descriptor import FieldDescriptor as F

    out: dict[str, Any] = {}
    for field in msg.DESCRIPTOR.fields:
        value = getattr(msg, field.name)
        if field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            out[field.name] = {
                str(k): _proto_scalar(field.message_type.fields_by_name["value"], v)
                for k, v in value.items()
            }
        elif field.is_repeated:
            out[field.name] = [_proto_scalar(field, v) for v in value]
        elif field.type == F.TYPE_MESSAGE and not msg.HasField(field.name):
            out[field.name] = None
        else:
            out[field.name] = _proto_scalar(field, value)
    return out


def _proto_scalar(field: Any, value: Any) -> Any:
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.type == F.TYPE_MESSAGE:
        return _proto_value(value)
    if field.type == F.TYPE_ENUM:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else str(value)
    return value
