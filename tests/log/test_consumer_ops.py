"""The consumer-op codec: what a replicated stream's log carries for its consumers."""

from __future__ import annotations

import random
from array import array

import pytest

from log.consumers.ops import (
    CREATE,
    META,
    RECORDS,
    ConsumerOpError,
    Create,
    Delete,
    Meta,
    Records,
    decode,
    encode_create,
    encode_delete,
    encode_meta,
    encode_records,
)
from log.consumers.store import ACKED, DELIVERED, GAVE_UP, POSITION

STATE = {
    "dseq": 1,
    "sseq": 7,
    "adflr": 0,
    "asflr": 6,
    "pending": [],
    "redelivered": [],
    "lps": [],
    "lps_resume": 0,
    "last_delivered": 0,
    "last_acked": 0,
}
CONFIG = {"durable_name": "d", "ack_policy": "explicit", "filter_subject": "orders.>"}
CREATED = "2026-11-23T23:30:22.066520133Z"
TURN = [DELIVERED, 7, 1, 1, 10, ACKED, 7, GAVE_UP, 8, POSITION, 2, 9, 1, 7, 10, 11]


def test_create_meta_delete_round_trip() -> None:
    assert decode(encode_create(CONFIG, CREATED, STATE)) == Create(CONFIG, CREATED, STATE)
    assert decode(encode_meta(CONFIG, CREATED)) == Meta(CONFIG, CREATED)
    assert decode(encode_delete()) == Delete()


def test_records_round_trip_to_the_bytes_the_ack_log_stores() -> None:
    op = decode(encode_records(TURN))
    assert isinstance(op, Records)
    assert op.payload == array("q", TURN).tobytes()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"\x09{}", "unknown kind 9"),
        (encode_delete() + b"x", "trailing"),
        (bytes((RECORDS,)), "multiple of 8"),
        (bytes((RECORDS,)) + b"\x01" * 12, "multiple of 8"),
        (encode_records([99, 1]), "unknown record tag 99"),
        (encode_records([DELIVERED, 1, 1, 1]), "cut short"),
        (encode_records([ACKED, 1, POSITION, 1, 2]), "cut short"),
        (bytes((META,)) + b"{not json", "invalid JSON"),
        (bytes((META,)) + b"\xff\xfe", "invalid JSON"),
        (bytes((META,)) + b"[1]", "not an object"),
        (bytes((META,)) + b'{"config": 1, "created": "x"}', "config"),
        (bytes((META,)) + b'{"config": {}}', "created"),
        (bytes((CREATE,)) + b'{"config": {}, "created": "x"}', "state is not"),
        (encode_create(CONFIG, CREATED, {**STATE, "sseq": "7"}), "state.sseq"),
        (encode_create(CONFIG, CREATED, {**STATE, "pending": None}), "state.pending"),
    ],
)
def test_garbage_raises_a_typed_error_naming_the_consumer(data: bytes, reason: str) -> None:
    with pytest.raises(ConsumerOpError, match=reason) as caught:
        decode(data, where="stream S consumer 'd'")
    assert "stream S consumer 'd'" in str(caught.value)


def test_any_bytes_decode_or_raise_the_typed_error() -> None:
    """Fuzz: mutations of valid ops either decode to an op or raise ConsumerOpError."""
    rng = random.Random(7)
    seeds = [encode_create(CONFIG, CREATED, STATE), encode_meta(CONFIG, CREATED)]
    seeds += [encode_records(TURN), encode_delete()]
    decoded = failed = 0
    for _ in range(3000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(data) + 1)
            if rng.random() < 0.5 and i < len(data):
                data[i] = rng.randrange(256)
            else:
                data[i:i] = bytes([rng.randrange(256)])
        if rng.random() < 0.2:
            del data[rng.randrange(len(data)) :]
        try:
            decode(bytes(data))
        except ConsumerOpError:
            failed += 1
        else:
            decoded += 1
    assert decoded and failed  # both outcomes were exercised
