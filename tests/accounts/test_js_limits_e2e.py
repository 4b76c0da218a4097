"""JetStream limits of an account on real servers, the reference and jetlake alike:
the limits and reservations `$JS.API.INFO` reports, and the reference's errors for
streams, consumers and publishes past them."""

from __future__ import annotations

import json
from typing import Any

from nats.aio.client import Client as NATS

from tests.conftest import Connect
from tests.support.servers import ServerProcess

MB = 1024 * 1024


async def api(nc: NATS, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    reply = await nc.request(subject, json.dumps(body).encode() if body else b"", timeout=5)
    doc: dict[str, Any] = json.loads(reply.data)
    return doc


async def create(nc: NATS, name: str, **config: Any) -> dict[str, Any] | None:
    body = {"name": name, "subjects": [name.lower()], **config}
    return (await api(nc, f"$JS.API.STREAM.CREATE.{name}", body)).get("error")


def error(code: int, err_code: int, description: str) -> dict[str, Any]:
    return {"code": code, "err_code": err_code, "description": description}


async def test_account_limits_and_their_errors(shared: ServerProcess, connect: Connect) -> None:
    a = await connect(f"nats://qa:qa@{shared.host}:{shared.port}")
    info = await api(a, "$JS.API.INFO")
    assert info["api"]["total"] == 0  # a request is counted once answered
    assert info["limits"] == {
        "max_memory": MB,
        "max_storage": 2 * MB,
        "max_streams": 3,
        "max_consumers": 1,
        "max_ack_pending": -1,
        "memory_max_stream_bytes": -1,
        "storage_max_stream_bytes": -1,
        "max_bytes_required": False,
    }
    assert await create(a, "BIG", storage="memory", max_bytes=2 * MB) == error(
        500, 10028, "insufficient memory resources available"
    )
    assert await create(a, "HUGE", storage="file", max_bytes=3 * MB) == error(
        500, 10047, "insufficient storage resources available"
    )
    assert await create(a, "R", storage="file", max_bytes=MB) is None
    assert await create(a, "M", storage="memory", max_bytes=1000) is None
    info = await api(a, "$JS.API.INFO")
    assert (info["reserved_storage"], info["reserved_memory"]) == (MB, 1000)
    grow = {"name": "R", "subjects": ["r"], "storage": "file", "max_bytes": 3 * MB}
    assert (await api(a, "$JS.API.STREAM.UPDATE.R", grow))["error"] == error(
        500, 10047, "insufficient storage resources available"
    )
    assert await create(a, "S", storage="file") is None
    assert await create(a, "T", storage="file") == error(
        400, 10027, "maximum number of streams reached"
    )
    durable = {"stream_name": "S", "config": {"durable_name": "C1", "ack_policy": "explicit"}}
    assert "error" not in await api(a, "$JS.API.CONSUMER.CREATE.S.C1", durable)
    durable["config"]["durable_name"] = "C2"  # type: ignore[index]
    assert (await api(a, "$JS.API.CONSUMER.CREATE.S.C2", durable))["error"] == error(
        400, 10026, "maximum consumers limit reached"
    )
    # The account's max_consumers bounds each stream, not the account: R takes one too.
    durable = {"stream_name": "R", "config": {"durable_name": "C1", "ack_policy": "explicit"}}
    assert "error" not in await api(a, "$JS.API.CONSUMER.CREATE.R.C1", durable)
    # Stored bytes: a publish that would pass max_file is refused.
    acks = [json.loads((await a.request("s", b"x" * 100_000, timeout=5)).data) for _ in range(21)]
    assert [ack.get("seq") for ack in acks[:20]] == list(range(1, 21))
    assert acks[20] == {
        "error": error(400, 10002, "resource limits exceeded for account"),
        "stream": "S",
        "seq": 0,
    }


async def test_stream_bytes_and_ack_pending_rules(shared: ServerProcess, connect: Connect) -> None:
    b = await connect(f"nats://qb:qb@{shared.host}:{shared.port}")
    assert await create(b, "T1", storage="file") == error(
        400, 10113, "account requires a stream config to have max bytes set"
    )
    assert await create(b, "T2", storage="file", max_bytes=2 * MB) == error(
        400, 10122, "stream max bytes exceeds account limit max stream bytes"
    )
    assert await create(b, "T3", storage="file", max_bytes=MB // 2) is None
    config = {"durable_name": "C1", "ack_policy": "explicit", "max_ack_pending": 100}
    asked = {"stream_name": "T3", "config": config}
    assert (await api(b, "$JS.API.CONSUMER.CREATE.T3.C1", asked))["error"] == error(
        400, 10121, "consumer max ack pending exceeds system limit of 10"
    )
    del config["max_ack_pending"]
    created = await api(b, "$JS.API.CONSUMER.CREATE.T3.C1", asked)
    assert created["config"]["max_ack_pending"] == 10
