"""Monitoring JSON shapes, jetlake against the reference nats-server.

The same client scenario runs against a reference process and an in-process
jetlake Server + Monitor; every key jetlake emits must exist in the
reference's answer with the same JSON type, and per-connection and
per-subscription objects must have exactly the reference's keys. Values are
checked in test_monitor_unit.py; this file only guards the names tools parse.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats
import pytest

from ingest.server.monitor import Monitor
from ingest.server.options import parse_serve_args
from ingest.server.server import Server
from tests.support.http import http_get
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess, start_server

PATHS = (
    "/varz",
    "/connz?subs=detail",
    "/connz?subs=1",
    "/connz?state=closed",
    "/subsz?subs=1",
    "/healthz",
    "/healthz?js-enabled-only=true",
    "/jsz",
    "/routez",
    "/leafz",
    "/gatewayz",
)


async def fetch(port: int, path: str) -> Any:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    # HTTP/1.0: the reference would otherwise answer large bodies chunked.
    writer.write(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"200", head
    return json.loads(body)


async def scenario(client_port: int, http_port: int) -> dict[str, Any]:
    """alice: a plain and a queue subscription; bob publishes 5 messages then leaves."""
    url = f"nats://127.0.0.1:{client_port}"
    alice = await nats.connect(url, name="alice", allow_reconnect=False)
    bob = await nats.connect(url, name="bob", allow_reconnect=False)
    try:
        got = asyncio.Queue[Any]()
        await alice.subscribe("foo.*", cb=got.put)
        await alice.subscribe("bar", queue="q")
        await until(http_port, "/connz", lambda c: client(c, "alice")["subscriptions"] == 2)
        for _ in range(5):
            await bob.publish("foo.x", b"hello")
        await bob.flush()
        for _ in range(5):
            await asyncio.wait_for(got.get(), 5)
        await bob.close()
        await until(http_port, "/connz?state=closed", lambda c: bool(c["connections"]))
        return {path: await fetch(http_port, path) for path in PATHS}
    finally:
        await alice.close()


async def until(http_port: int, path: str, done: Callable[[Any], bool]) -> None:
    """Poll the server's own view: nats-py's flush can overtake a SUB it has not sent yet."""

    async def shown() -> bool:
        return done(await fetch(http_port, path))

    await poll_async(shown, f"the change in {path}", 5, interval=0.01)


def kind(value: Any) -> str:
    return (
        "number"
        if isinstance(value, (int, float)) and not isinstance(value, bool)
        else (type(value).__name__)
    )


def assert_subset(ours: dict[str, Any], ref: dict[str, Any], where: str) -> None:
    extra = sorted(set(ours) - set(ref))
    assert not extra, f"{where}: keys the reference does not have: {extra}"
    for key, value in ours.items():
        assert kind(value) == kind(ref[key]), f"{where}.{key}: {kind(value)} vs {kind(ref[key])}"


def client(answer: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in answer["connections"] if c.get("name") == name)


@contextlib.asynccontextmanager
async def side_by_side(tmp_path: Path) -> AsyncIterator[tuple[ServerProcess, Server, Monitor]]:
    """A reference process and an in-process jetlake Server with its Monitor."""
    ref = start_server("nats-server", "-m", "-1", tmp_path=tmp_path, name="ref")
    opts = parse_serve_args(["-a", "127.0.0.1", "-p", "-1", "-m", "-1"])
    server = Server(opts)
    monitor = Monitor(server, opts.http_host, opts.http_port or 0)
    await server.start()
    await monitor.start()
    try:
        yield ref, server, monitor
    finally:
        await server.shutdown()
        await monitor.stop()
        await ref.stop_async()


@pytest.fixture
async def answers(tmp_path: Path) -> AsyncIterator[tuple[dict[str, Any], dict[str, Any]]]:
    async with side_by_side(tmp_path) as (ref, server, monitor):
        assert ref.http_port is not None
        try:
            theirs = await scenario(ref.port, ref.http_port)
        except Exception as exc:
            raise AssertionError(f"reference scenario failed; its log:\n{ref.log()}") from exc
        ours = await scenario(server.port, monitor.port)
        yield ours, theirs


async def test_top_level_keys_are_the_reference_s(answers: Any) -> None:
    ours, theirs = answers
    for path in PATHS:
        assert_subset(ours[path], theirs[path], path)
    assert ours["/healthz"] == theirs["/healthz"] == {"status": "ok"}
    assert set(ours["/jsz"]) - {"now", "server_id"} == set(theirs["/jsz"]) - {"now", "server_id"}
    for path in ("/routez", "/leafz", "/gatewayz"):
        assert set(ours[path]) == set(theirs[path]), path


async def test_varz_has_the_fields_we_claim(answers: Any) -> None:
    ours, theirs = answers
    claimed = {
        "server_id",
        "server_name",
        "version",
        "proto",
        "go",
        "host",
        "port",
        "max_connections",
        "ping_interval",
        "ping_max",
        "http_host",
        "http_port",
        "auth_timeout",
        "max_control_line",
        "max_payload",
        "max_pending",
        "tls_timeout",
        "write_deadline",
        "start",
        "now",
        "uptime",
        "mem",
        "cores",
        "cpu",
        "connections",
        "total_connections",
        "routes",
        "remotes",
        "leafnodes",
        "in_msgs",
        "out_msgs",
        "in_bytes",
        "out_bytes",
        "in_client_msgs",
        "out_client_msgs",
        "in_client_bytes",
        "out_client_bytes",
        "slow_consumers",
        "slow_consumer_stats",
        "stale_connections",
        "stale_connection_stats",
        "stalled_clients",
        "subscriptions",
        "config_load_time",
        "config_digest",
        "jetstream",
        "http_req_stats",
    }
    assert claimed <= set(ours["/varz"]) and claimed <= set(theirs["/varz"])
    counts = ("in_msgs", "in_bytes", "out_msgs", "out_bytes", "connections")
    # bob's five publishes and alice's five deliveries, bob gone by now: a closed
    # client's traffic stays counted; neither server started from a config file
    clients = ("in_client_msgs", "in_client_bytes", "out_client_msgs", "out_client_bytes")
    troubles = ("slow_consumer_stats", "stale_connection_stats", "stalled_clients")
    for key in (*counts, *clients, *troubles, "config_digest"):
        assert ours["/varz"][key] == theirs["/varz"][key], key
    assert [ours["/varz"][key] for key in clients] == [5, 25, 5, 25]


async def test_connection_objects_match_exactly(answers: Any) -> None:
    ours, theirs = answers
    for path in ("/connz?subs=detail", "/connz?subs=1"):
        mine, ref = client(ours[path], "alice"), client(theirs[path], "alice")
        assert set(mine) == set(ref), path
        assert_subset(mine, ref, path)
    mine = client(ours["/connz?subs=detail"], "alice")["subscriptions_list_detail"]
    ref = client(theirs["/connz?subs=detail"], "alice")["subscriptions_list_detail"]
    assert sorted(map(sorted, mine)) == sorted(map(sorted, ref))
    closed = "/connz?state=closed"
    mine, ref = client(ours[closed], "bob"), client(theirs[closed], "bob")
    assert set(mine) == set(ref)
    for key in ("in_msgs", "in_bytes", "out_msgs", "subscriptions", "reason"):
        assert mine[key] == ref[key], key


async def test_subscription_objects_match_exactly(answers: Any) -> None:
    ours, theirs = answers

    def entries(answer: dict[str, Any]) -> list[list[str]]:
        subs = answer["/subsz?subs=1"]["subscriptions_list"]
        return sorted(sorted(s) for s in subs if s["subject"] in ("foo.*", "bar"))

    assert entries(ours) == entries(theirs)


async def test_raftz_ipqueuesz_and_stacksz_on_one_server(tmp_path: Path) -> None:
    """Without a cluster /raftz is the reference's 404; /ipqueuesz lists no internal
    queues once idle (the reference lists its system send queue while its own system
    messages are in flight); /stacksz dumps every thread (the reference's goroutines,
    jetlake's threads and tasks) as plain text."""
    async with side_by_side(tmp_path) as (ref, _, monitor):
        for base, marker in (
            (ref.http_url, b"goroutine"),
            (f"http://127.0.0.1:{monitor.port}", b"MainThread"),
        ):
            raftz = await http_get(base + "/raftz")
            assert (raftz.status, raftz.body) == (404, b"No Raft nodes registered"), base

            async def no_queues(base: str = base) -> bool:
                queues = await http_get(base + "/ipqueuesz")
                assert queues.status == 200, base
                return queues.json() == {}

            await poll_async(no_queues, f"{base}/ipqueuesz listing no queue", 10)
            stacks = await http_get(base + "/stacksz")
            assert stacks.status == 200 and marker in stacks.body, base
