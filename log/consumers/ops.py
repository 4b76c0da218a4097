"""Consumer state changes as entries of their stream's replicated log.

A replicated stream carries its consumers' durable state in its own Raft
group, so the consumer leader is the stream leader and one log (one fsync)
serves both. Each change is an opaque `ConsumerOp(consumer_name, op_bytes)`
entry to the stream; this module is the codec of `op_bytes`:

    CREATE   kind byte, JSON {"config", "created", "state"}: the initial
             snapshot travels with the create, because a start position
             (deliver new, by start time, last per subject) is chosen once,
             on the leader, and a follower must not choose again.
    META     kind byte, JSON {"config", "created"}: update or pause.
    DELETE   kind byte alone.
    RECORDS  kind byte, then the store's int64 records (`log.consumers.store`)
             little-endian: one loop turn of deliveries and acks.

Records are applied on every member in log order and replayed from the start
after a restart, which is safe because each record sets a value rather than
adjusting one. Decoding checks the shape of everything it returns (a record's
tag and width included), so a corrupt entry raises `ConsumerOpError` instead
of reaching the files.
"""

from __future__ import annotations

import json
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from log.consumers.store import record_runs

CREATE = 1
META = 2
DELETE = 3
RECORDS = 4

_POSITION_FIELDS = ("dseq", "sseq", "adflr", "asflr")


class ConsumerOpError(ValueError):
    """An entry that is not a consumer op of this format (corrupt or from elsewhere)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: bad consumer op: {reason}")
        self.where = where
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Create:
    config: dict[str, Any]
    created: str  # RFC 3339, as meta.json keeps it: it names the incarnation
    state: dict[str, Any]  # Consumer.snapshot() at creation


@dataclass(frozen=True, slots=True)
class Meta:
    config: dict[str, Any]
    created: str


@dataclass(frozen=True, slots=True)
class Delete:
    pass


@dataclass(frozen=True, slots=True)
class Records:
    payload: bytes  # int64 records, native order: what `ConsumerStore.append_payload` writes


Op = Create | Meta | Delete | Records


def encode_create(config: dict[str, Any], created: str, state: dict[str, Any]) -> bytes:
    return _json_op(CREATE, {"config": config, "created": created, "state": state})


def encode_meta(config: dict[str, Any], created: str) -> bytes:
    return _json_op(META, {"config": config, "created": created})


def encode_delete() -> bytes:
    return bytes((DELETE,))


def encode_records(records: Sequence[int]) -> bytes:
    values = array("q", records)
    if sys.byteorder != "little":
        values.byteswap()
    return bytes((RECORDS,)) + values.tobytes()


def decode(data: bytes, *, where: str = "consumer op") -> Op:
    """The op in `data`; `where` (stream and consumer) names it in errors."""
    if not data:
        raise ConsumerOpError(where, "empty")
    kind, body = data[0], data[1:]
    if kind == RECORDS:
        return Records(_records(body, where))
    if kind == DELETE:
        if body:
            raise ConsumerOpError(where, f"delete with {len(body)} trailing bytes")
        return Delete()
    if kind == CREATE:
        doc = _json_body(body, where)
        return Create(_config(doc, where), _created(doc, where), _state(doc, where))
    if kind == META:
        doc = _json_body(body, where)
        return Meta(_config(doc, where), _created(doc, where))
    raise ConsumerOpError(where, f"unknown kind {kind}")


def _json_op(kind: int, doc: dict[str, Any]) -> bytes:
    return bytes((kind,)) + json.dumps(doc, separators=(",", ":")).encode()


def _json_body(body: bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConsumerOpError(where, f"invalid JSON ({err})") from None
    if not isinstance(doc, dict):
        raise ConsumerOpError(where, "JSON body is not an object")
    return doc


def _config(doc: dict[str, Any], where: str) -> dict[str, Any]:
    config = doc.get("config")
    if not isinstance(config, dict):
        raise ConsumerOpError(where, "config is not an object")
    return config


def _created(doc: dict[str, Any], where: str) -> str:
    created = doc.get("created")
    if not isinstance(created, str) or not created:
        raise ConsumerOpError(where, "created is not a timestamp")
    return created


def _state(doc: dict[str, Any], where: str) -> dict[str, Any]:
    """The initial snapshot, with what `store.replay` reads checked to be there."""
    state = doc.get("state")
    if not isinstance(state, dict):
        raise ConsumerOpError(where, "state is not an object")
    for key in _POSITION_FIELDS:
        if type(state.get(key)) is not int:
            raise ConsumerOpError(where, f"state.{key} is not an integer")
    for key in ("pending", "redelivered"):
        if not isinstance(state.get(key), list):
            raise ConsumerOpError(where, f"state.{key} is not a list")
    return state


def _records(body: bytes, where: str) -> bytes:
    """The payload in native order, once every record's tag and width check out."""
    if not body or len(body) % 8:
        raise ConsumerOpError(where, f"records of {len(body)} bytes (a multiple of 8 above 0)")
    values = array("q")
    values.frombytes(body)
    if sys.byteorder != "little":
        values.byteswap()
    try:
        for _ in record_runs(values):
            pass
    except ValueError as err:
        raise ConsumerOpError(where, str(err)) from None
    return body if sys.byteorder == "little" else values.tobytes()
