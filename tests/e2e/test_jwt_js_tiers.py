"""Tiered JetStream limits of an account JWT (`nsc edit account --js-tier N ...`),
differentially: each replica count's streams, consumers and storage bounded by its own
tier, a replica count without a tier refused, and `$JS.API.INFO` reporting every tier."""

from __future__ import annotations

import json
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from tests.conftest import Connect, ServerPool
from tests.support.nsc import Nsc
from tests.support.servers import ServerProcess


@pytest.fixture(scope="module")
def nsc(tmp_path_factory: pytest.TempPathFactory) -> Nsc:
    nsc = Nsc(tmp_path_factory.mktemp("nsc-tiers"))
    nsc.operator()
    nsc.run("add", "account", "T")
    nsc.run("edit", "account", "T", "--js-tier", "1", "--js-mem-storage", "1M",
            "--js-disk-storage", "2000", "--js-streams", "3", "--js-consumer", "1")  # fmt: skip
    nsc.run("edit", "account", "T", "--js-tier", "3", "--js-mem-storage", "2M",
            "--js-disk-storage", "20M", "--js-streams", "1")  # fmt: skip
    nsc.run("add", "user", "-a", "T", "t")
    return nsc


@pytest.fixture
async def client(
    server_kind: str, server_pool: ServerPool, nsc: Nsc, connect: Connect, tmp_path: Any
) -> NATS:
    """A fresh server each (the streams made are the state under test)."""
    store = str(tmp_path / "js")
    server: ServerProcess = server_pool.get(
        server_kind, "-js", "-sd", store, config=nsc.memory_config()
    )
    return await connect(server, user_credentials=str(nsc.creds("T", "t")))


async def _api(nc: NATS, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else b""
    doc: dict[str, Any] = json.loads((await nc.request(subject, data, timeout=3)).data)
    return doc


async def _create(nc: NATS, name: str, **config: Any) -> dict[str, Any] | None:
    body = {"name": name, "subjects": [name.lower()], **config}
    error: dict[str, Any] | None = (await _api(nc, f"$JS.API.STREAM.CREATE.{name}", body)).get(
        "error"
    )
    return error


async def test_each_tier_bounds_its_own_streams(client: NATS) -> None:
    nc = client
    assert await _create(nc, "S1", max_bytes=1000) is None
    assert await _create(nc, "S2", max_bytes=1500) == {
        "code": 500,
        "err_code": 10047,
        "description": "insufficient storage resources available",
    }
    assert await _create(nc, "M1", storage="memory", max_bytes=100_000) is None
    assert await _create(nc, "S3") is None
    assert (await _create(nc, "S4"))["err_code"] == 10027  # type: ignore[index]
    assert await _create(nc, "R2", num_replicas=2) == {
        "code": 400,
        "err_code": 10120,
        "description": "no JetStream default or applicable tiered limit present",
    }
    # R3 has a tier; a single server refuses it for its replicas, as the reference does.
    assert (await _create(nc, "R3", num_replicas=3))["err_code"] == 10074  # type: ignore[index]
    consumer = {"stream_name": "S1", "config": {"durable_name": "c1", "ack_policy": "explicit"}}
    created = await _api(nc, "$JS.API.CONSUMER.CREATE.S1.c1", consumer)
    assert "error" not in created, created
    consumer["config"]["durable_name"] = "c2"  # type: ignore[index]
    refused = await _api(nc, "$JS.API.CONSUMER.CREATE.S1.c2", consumer)
    assert refused["error"] == {
        "code": 400,
        "err_code": 10026,
        "description": "maximum consumers limit reached",
    }
    await nc.request("s1", b"hello", timeout=2)
    info = await _api(nc, "$JS.API.INFO")
    assert info["limits"]["max_streams"] == 0 and info["streams"] == 3
    one, three = info["tiers"]["R1"], info["tiers"]["R3"]
    assert {k: one[k] for k in ("reserved_memory", "reserved_storage", "streams", "consumers")} == {
        "reserved_memory": 100_000,
        "reserved_storage": 1000,
        "streams": 3,
        "consumers": 1,
    }
    assert one["storage"] == info["storage"] > 0
    assert one["limits"]["max_storage"] == 2000 and one["limits"]["max_consumers"] == 1
    assert three["streams"] == 0 and three["limits"]["max_storage"] == 20_000_000
    # The tier's storage bounds what its streams store: S3 has no max_bytes of its own.
    acks = [json.loads((await nc.request("s3", b"x" * 500, timeout=2)).data) for _ in range(6)]
    refused_acks = [a["error"] for a in acks if "error" in a]
    assert refused_acks and refused_acks[0] == {
        "code": 400,
        "err_code": 10002,
        "description": "resource limits exceeded for account",
    }
