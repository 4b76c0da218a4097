"""The monitoring HTTP server in-process: a real Server, real nats-py clients, real sockets.

Values are checked against what the clients did, so a counter that drifts from
the traffic shows up here; field names are compared with the reference in
test_monitor_diff.py.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NATS

from ingest.server import httpd
from ingest.server.gofmt import go_duration, uptime
from ingest.server.monitor import Monitor
from ingest.server.options import parse_serve_args
from ingest.server.server import Server
from tests.support.poll import poll_async

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")


class Stack:
    """A started server and monitor plus the clients a test opened."""

    def __init__(self, server: Server, monitor: Monitor) -> None:
        self.server = server
        self.monitor = monitor
        self.clients: list[NATS] = []

    async def connect(self, **options: Any) -> NATS:
        nc = await nats.connect(
            f"nats://127.0.0.1:{self.server.port}", allow_reconnect=False, **options
        )
        self.clients.append(nc)
        return nc

    async def request(self, raw: bytes) -> tuple[int, dict[str, str], bytes]:
        """Send raw bytes, read until the server closes; parse the HTTP response."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.monitor.port)
        writer.write(raw)
        writer.write_eof()  # also ends a truncated head, which must not wait for the timeout
        data = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        return status, headers, body

    async def get(self, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        return await self.request(f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())

    async def json(self, path: str) -> dict[str, Any]:
        status, headers, body = await self.get(path)
        assert status == 200, body
        assert headers["content-type"] == "application/json"
        assert int(headers["content-length"]) == len(body)
        return dict(json.loads(body))


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    opts = parse_serve_args(["-a", "127.0.0.1", "-p", "-1", "-m", "-1"])
    server = Server(opts)
    monitor = Monitor(server, opts.http_host, opts.http_port or 0)
    await server.start()
    await monitor.start()
    st = Stack(server, monitor)
    yield st
    for nc in st.clients:
        if not nc.is_closed:
            await nc.close()
    server.jetstream = None
    await server.shutdown()
    await monitor.stop()


async def traffic(st: Stack) -> tuple[NATS, NATS]:
    """alice subscribes (one plain, one queue); bob publishes 5 messages of 5 bytes."""
    alice = await st.connect(name="alice")
    bob = await st.connect()
    got = asyncio.Queue[Any]()
    await alice.subscribe("foo.*", cb=got.put)
    await alice.subscribe("bar", queue="q")
    # nats-py's flush can overtake a SUB it has not written yet: wait for the server's view.
    await poll_async(
        lambda: sum(len(c.subs) for c in st.server.clients.values()) == 2,
        "both subscriptions on the server",
        5,
        interval=0.01,
    )
    for _ in range(5):
        await bob.publish("foo.x", b"hello")
    await bob.flush()
    for _ in range(5):
        await asyncio.wait_for(got.get(), 5)
    return alice, bob


async def test_start_logs_reference_line(caplog: pytest.LogCaptureFixture) -> None:
    opts = parse_serve_args(["-a", "127.0.0.1", "-p", "-1", "-m", "-1"])
    server = Server(opts)
    monitor = Monitor(server, None, 0)
    with caplog.at_level("INFO", logger="jetlake"):
        await monitor.start()
    await monitor.stop()
    assert monitor.port > 0
    assert f"Starting http monitor on 127.0.0.1:{monitor.port}" in caplog.text


async def test_varz_counts_traffic(stack: Stack) -> None:
    await traffic(stack)
    v = await stack.json("/varz")
    assert (v["in_msgs"], v["in_bytes"], v["out_msgs"], v["out_bytes"]) == (5, 25, 5, 25)
    assert (v["connections"], v["total_connections"]) == (2, 2)
    assert v["subscriptions"] == stack.server.sublist.count >= 2
    assert v["server_id"] == stack.server.server_id
    assert (v["host"], v["port"]) == ("127.0.0.1", stack.server.port)
    assert (v["http_host"], v["http_port"]) == ("127.0.0.1", stack.monitor.port)
    assert v["ping_interval"] == 120 * 10**9 and v["write_deadline"] == 10 * 10**9
    assert v["max_payload"] == 1024 * 1024 and v["auth_timeout"] == 2
    assert RFC3339.match(v["start"]) and RFC3339.match(v["now"])
    assert re.fullmatch(r"\d+s", v["uptime"])
    assert v["mem"] > 0 and v["cores"] >= 1 and isinstance(v["cpu"], (int, float))
    assert v["jetstream"] == {} and v["routes"] == v["remotes"] == v["leafnodes"] == 0
    assert v["http_req_stats"]["/varz"] == 1


async def test_connz_connections_and_subscriptions(stack: Stack) -> None:
    await traffic(stack)
    c = await stack.json("/connz")
    assert (c["num_connections"], c["total"], c["offset"], c["limit"]) == (2, 2, 0, 1024)
    a, b = c["connections"]
    assert a["cid"] < b["cid"] and a["name"] == "alice" and "name" not in b
    assert (a["kind"], a["type"], a["ip"], a["lang"]) == ("Client", "nats", "127.0.0.1", "python3")
    assert (a["subscriptions"], a["out_msgs"], a["out_bytes"], a["in_msgs"]) == (2, 5, 25, 0)
    assert (b["subscriptions"], b["in_msgs"], b["in_bytes"]) == (0, 5, 25)
    assert RFC3339.match(a["start"]) and a["rtt"].endswith("s") and a["pending_bytes"] == 0
    assert "subscriptions_list" not in a

    subs = (await stack.json("/connz?subs=1"))["connections"][0]["subscriptions_list"]
    assert sorted(subs) == ["bar", "foo.*"]
    detail = (await stack.json("/connz?subs=detail"))["connections"][0]
    by_subject = {d["subject"]: d for d in detail["subscriptions_list_detail"]}
    assert by_subject["bar"]["qgroup"] == "q" and "qgroup" not in by_subject["foo.*"]
    assert by_subject["foo.*"]["msgs"] == 5 and by_subject["foo.*"]["cid"] == a["cid"]

    top = await stack.json("/connz?sort=msgs_from&limit=1")
    assert [x["cid"] for x in top["connections"]] == [b["cid"]]
    assert (top["num_connections"], top["total"], top["limit"]) == (1, 2, 1)
    assert (await stack.json("/connz?offset=1"))["connections"][0]["cid"] == b["cid"]
    only = await stack.json(f"/connz?cid={a['cid']}")
    assert [x["cid"] for x in only["connections"]] == [a["cid"]]


async def test_connz_closed_connections(stack: Stack) -> None:
    _, bob = await traffic(stack)
    cid = max(stack.server.clients)
    await bob.close()
    await poll_async(lambda: cid not in stack.server.clients, "bob's client gone", 5, interval=0.01)
    closed = await stack.json("/connz?state=closed")
    (rec,) = closed["connections"]
    assert rec["cid"] == cid and rec["reason"] == "Client Closed" and RFC3339.match(rec["stop"])
    assert (rec["in_msgs"], rec["in_bytes"]) == (5, 25)
    assert (await stack.json("/connz"))["num_connections"] == 1
    assert (await stack.json("/connz?state=any"))["num_connections"] == 2
    assert (await stack.json("/connz?state=closed&sort=stop"))["total"] == 1


async def test_authorized_user_only_when_asked() -> None:
    """As on the reference: ?auth=1 reveals the user name, plain /connz does not."""
    opts = parse_serve_args(["-a", "127.0.0.1", "-p", "-1", "--user", "u", "--pass", "p"])
    server = Server(opts)
    st = Stack(server, Monitor(server, "127.0.0.1", 0))
    await server.start()
    await st.monitor.start()
    try:
        nc = await nats.connect(f"nats://u:p@127.0.0.1:{server.port}", allow_reconnect=False)
        assert (await st.json("/varz"))["auth_required"] is True
        assert "authorized_user" not in (await st.json("/connz"))["connections"][0]
        assert (await st.json("/connz?auth=1"))["connections"][0]["authorized_user"] == "u"
        await nc.close()
    finally:
        await server.shutdown()
        await st.monitor.stop()


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("sort=bogus", "invalid sorting option: bogus"),
        ("sort=stop", "sort by stop only valid on closed connections"),
        ("state=bogus", "Error decoding state for bogus"),
        ("limit=abc", "Error decoding int for 'limit'"),
        ("subs=maybe", "Error decoding boolean for 'subs'"),
    ],
)
async def test_connz_bad_queries(stack: Stack, query: str, message: str) -> None:
    status, _, body = await stack.get(f"/connz?{query}")
    assert status == 400 and body.decode().startswith(message)


async def test_subsz(stack: Stack) -> None:
    await traffic(stack)
    s = await stack.json("/subsz")
    assert s["num_subscriptions"] == stack.server.sublist.count
    assert s["num_cache"] == stack.server.sublist.cache_size() >= 1
    assert (s["total"], s["offset"], s["limit"]) == (0, 0, 1024)
    assert "subscriptions_list" not in s
    listed = (await stack.json("/subsz?subs=1"))["subscriptions_list"]
    pairs = sorted((x["subject"], x.get("qgroup")) for x in listed)
    assert pairs == [("bar", "q"), ("foo.*", None)]
    assert all(x["account"] == "$G" and x["sid"] for x in listed)
    assert (await stack.json("/subscriptionsz"))["num_subscriptions"] == s["num_subscriptions"]


async def test_healthz_and_jsz_without_jetstream(stack: Stack) -> None:
    status, headers, body = await stack.get("/healthz")
    assert (status, body) == (200, b'{"status":"ok"}')
    assert headers["content-type"] == "application/json"
    assert (await stack.json("/healthz?js-enabled-only=true")) == {"status": "ok"}
    j = await stack.json("/jsz")
    assert j["disabled"] is True and j["config"] == {"max_memory": 0, "max_storage": 0}
    assert (j["streams"], j["messages"], j["server_id"]) == (0, 0, stack.server.server_id)


class FakeJetStream:
    """Stands in for ingest.server.jetstream.JetStream: the monitor only calls info()."""

    def info(self) -> dict[str, Any]:
        stats = {
            "memory": 0,
            "storage": 300,
            "reserved_memory": 0,
            "reserved_storage": 0,
            "accounts": 1,
            "ha_assets": 0,
            "api": {"level": 1, "total": 4, "errors": 0},
        }
        streams = [
            {"name": "ORDERS", "state": {"messages": 3, "bytes": 129, "consumer_count": 1}},
            {"name": 'we"ird', "state": {"messages": 1, "bytes": 171, "consumer_count": 0}},
        ]
        return {"config": {"max_memory": 1, "max_storage": 2}, "stats": stats, "streams": streams}

    async def stop(self) -> None:
        return None


async def test_jsz_varz_and_metrics_with_jetstream(stack: Stack) -> None:
    stack.server.jetstream = FakeJetStream()
    j = await stack.json("/jsz")
    assert (j["streams"], j["consumers"], j["messages"], j["bytes"]) == (2, 1, 4, 300)
    assert j["storage"] == 300 and j["config"]["max_storage"] == 2 and "disabled" not in j
    detail = (await stack.json("/jsz?streams=true"))["account_details"][0]["stream_detail"]
    assert [s["name"] for s in detail] == ["ORDERS", 'we"ird']
    assert set((await stack.json("/varz"))["jetstream"]) == {"config", "stats"}
    metrics = parse_prometheus((await stack.get("/metrics"))[2].decode())
    sid = stack.server.server_id
    assert metrics["jetlake_stream_messages", (("server_id", sid), ("stream", "ORDERS"))] == 3
    assert metrics["jetlake_stream_bytes", (("server_id", sid), ("stream", 'we"ird'))] == 171


def parse_prometheus(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A strict little parser of text format 0.0.4: every sample follows its HELP and TYPE."""
    sample = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
    label = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')
    typed: dict[str, str] = {}
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge") and name not in typed
            typed[name] = kind
            continue
        m = sample.match(line)
        assert m, line
        name, labels, value = m.groups()
        assert name in typed, f"{name} has no TYPE"
        pairs = label.findall(labels or "")
        assert "".join(f'{k}="{v}",' for k, v in pairs).rstrip(",") == (labels or "")
        unescaped = tuple((k, v.replace('\\"', '"').replace("\\\\", "\\")) for k, v in pairs)
        out[name, unescaped] = float(value)
    return out


async def test_metrics_match_varz(stack: Stack) -> None:
    await traffic(stack)
    status, headers, body = await stack.get("/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    metrics = parse_prometheus(body.decode())
    varz = await stack.json("/varz")
    values = {name: v for (name, _), v in metrics.items()}
    for key in (
        "in_msgs",
        "out_msgs",
        "in_bytes",
        "out_bytes",
        "connections",
        "total_connections",
        "subscriptions",
        "in_client_msgs",
        "out_client_msgs",
        "in_client_bytes",
        "out_client_bytes",
        "slow_consumers",
        "stale_connections",
        "stalled_clients",
    ):
        assert values[f"jetlake_varz_{key}"] == varz[key], key
    assert varz["in_client_msgs"] > 0  # the traffic above
    assert values["jetlake_varz_mem"] > 0 and values["jetlake_varz_uptime_seconds"] >= 0
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", body.decode(), re.M))
    assert types["jetlake_varz_in_msgs"] == "counter"
    assert types["jetlake_varz_connections"] == "gauge"


async def test_http_methods_and_paths(stack: Stack) -> None:
    assert (await stack.get("/nope"))[0] == 404
    status, headers, _ = await stack.get("/varz", "POST")
    assert status == 405 and headers["allow"] == "GET, HEAD"
    status, headers, body = await stack.get("/varz", "HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 100
    assert headers["connection"] == "close"
    assert (await stack.get("/"))[0] == 200
    status, _, body = await stack.request(b"GET /healthz HTTP/1.0\n\n")  # bare LF is tolerated
    assert (status, body) == (200, b'{"status":"ok"}')


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"garbage\r\n\r\n", 400),
        (b"GET /varz\r\n\r\n", 400),
        (b"GET /varz HTTP/9.9\r\n\r\n", 400),
        (b"get /varz HTTP/1.1\r\n\r\n", 400),
        (b"GET varz HTTP/1.1\r\n\r\n", 400),
        (b"GET /varz HTTP/1.1\r\nno colon here\r\n\r\n", 400),
        (b"GET /\xff HTTP/1.1\r\n\r\n", 400),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
        (b"GET /varz HTTP/1.1\r\nHost: x", 400),  # EOF inside the head
        (b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n", 431),
        (b"GET /varz HTTP/1.1\r\n" + b"X-A: b\r\n" * 200 + b"\r\n", 431),
    ],
)
async def test_malformed_requests_do_not_disturb_a_good_one(
    stack: Stack, raw: bytes, status: int
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", stack.monitor.port)
    writer.write(b"GET /varz HTTP/1.1\r\n")  # a good request, still incomplete
    await writer.drain()
    bad = asyncio.create_task(stack.request(raw))
    got = (await bad)[0]
    assert got == status
    writer.write(b"Host: x\r\n\r\n")
    response = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert response.startswith(b"HTTP/1.1 200 OK\r\n")
    assert json.loads(response.partition(b"\r\n\r\n")[2])["server_id"]


async def test_random_bytes_never_break_the_server(stack: Stack) -> None:
    """Whatever arrives is answered with a status line or a closed socket; nothing leaks."""
    rng = random.Random(2)
    alphabet = b"GET /varz HTTP/1.1\r\n:?=&% \x00\xff"
    for _ in range(150):
        raw = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 80)))
        reader, writer = await asyncio.open_connection("127.0.0.1", stack.monitor.port)
        writer.write(raw)
        writer.write_eof()
        data = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        assert data == b"" or re.match(rb"HTTP/1\.1 (200|400|404|405|431) ", data), (raw, data)
    await poll_async(
        lambda: not stack.monitor._tasks, "the monitor's connections closed", 5, interval=0.01
    )
    assert (await stack.get("/healthz"))[0] == 200


async def test_silent_client_is_dropped(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpd, "READ_TIMEOUT", 0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", stack.monitor.port)
    writer.write(b"GET /varz HTTP/1.1\r\n")
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    assert (await stack.get("/healthz"))[0] == 200


async def test_stop_closes_open_connections(stack: Stack) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", stack.monitor.port)
    writer.write(b"GET /varz HTTP/1.1\r\n")
    await writer.drain()
    await poll_async(
        lambda: bool(stack.monitor._tasks), "the monitor serving the request", 5, interval=0.01
    )
    await asyncio.wait_for(stack.monitor.stop(), 5)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (999, "999ns"),
        (713_000, "713µs"),
        (1_500_000, "1.5ms"),
        (2 * 10**9, "2s"),
        (120 * 10**9, "2m0s"),
        (3723 * 10**9 + 5 * 10**8, "1h2m3.5s"),
    ],
)
def test_go_duration(ns: int, text: str) -> None:
    assert go_duration(ns) == text


@pytest.mark.parametrize(
    ("secs", "text"),
    [
        (0, "0s"),
        (62, "1m2s"),
        (3600, "1h0m0s"),
        (90061, "1d1h1m1s"),
        (365 * 86400 + 5, "1y0d0h0m5s"),
    ],
)
def test_uptime(secs: int, text: str) -> None:
    assert uptime(secs) == text
