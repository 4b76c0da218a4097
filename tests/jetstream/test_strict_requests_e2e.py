"""Unknown fields in stream and consumer requests, at any depth, are refused as the
reference's strict decoder refuses them (10025), never accepted and ignored; against both
servers with the same assertions (observed from nats-server 2.15)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Connect
from tests.jetstream.test_streams_e2e import api
from tests.support.servers import ServerProcess

UNKNOWN = {"code": 400, "err_code": 10025, "description": 'invalid JSON: json: unknown field "%s"'}


def unknown(field: str) -> dict[str, Any]:
    return {**UNKNOWN, "description": UNKNOWN["description"] % field}


@pytest.mark.parametrize(
    ("subject", "body", "field"),
    [
        (
            "STREAM.CREATE.Q",
            {"name": "Q", "subjects": ["q"], "bogus_field": 1, "x": 2},
            "bogus_field",
        ),
        ("STREAM.CREATE.T", {"name": "T", "republish": {"src": ">", "dest": "x.>", "b": 1}}, "b"),
        ("STREAM.CREATE.U", {"name": "U", "sources": [{"name": "S"}, {"name": "S", "c": 1}]}, "c"),
        ("STREAM.CREATE.V", {"name": "V", "consumer_limits": {"max_ack_pending": 1, "d": 1}}, "d"),
        ("STREAM.CREATE.W", {"name": "W", "mirror": {"name": "S", "external": {"e": 1}}}, "e"),
        ("STREAM.UPDATE.S", {"name": "S", "subjects": ["s.>"], "f": 1}, "f"),
        ("CONSUMER.CREATE.S", {"stream_name": "S", "config": {"g": 1}}, "g"),
        ("CONSUMER.CREATE.S", {"stream_name": "S", "h": 1, "config": {}}, "h"),
        ("CONSUMER.CREATE.S.i", {"stream_name": "S", "config": {"name": "i", "i": True}}, "i"),
    ],
)
async def test_unknown_fields_are_refused(
    js_server: ServerProcess,
    connect: Connect,
    subject: str,
    body: dict[str, Any],
    field: str,
) -> None:
    nc = await connect(js_server)
    await api(nc, "$JS.API.STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
    got = await api(nc, f"$JS.API.{subject}", body)
    assert got["error"] == unknown(field)
    names = await api(nc, "$JS.API.STREAM.NAMES")
    assert names["streams"] == ["S"]
