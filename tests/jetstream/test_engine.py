"""The JetStream engine behind a fake Messaging port: API documents, recovery, timers.

Routing is a list scan with the real wildcard matcher; a request's answer is
whatever got published to its reply subject. No server, no sockets.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from ingest.parser.headers import encode_headers, parse_headers
from ingest.parser.subjects import subject_matches
from ingest.server.jetstream import JetStream
from ingest.server.settings import JetStreamConfig
from log.consumers.wire import Deliveries
from tests.support.poll import poll_async

Callback = Callable[[str, str | None, bytes | None, bytes], None]
RawCallback = Callable[[bytes, bytes, bytes | None, bytes], None]


def engine_config(store_dir: str) -> JetStreamConfig:
    """The server's JetStream settings for an engine in `store_dir`, fsync on every write."""
    return JetStreamConfig(enabled=True, store_dir=store_dir, sync_interval_ns=None)


class FakeMessaging:
    def __init__(self) -> None:
        self.subs: dict[int, tuple[str, Callback]] = {}
        self.inbox: dict[str, list[tuple[bytes | None, bytes]]] = {}
        self._next = 0

    def subscribe(
        self,
        subject: str,
        callback: Callback,
        *,
        queue: str | None = None,
        intake: object = None,
    ) -> object:
        self._next += 1
        self.subs[self._next] = (subject, callback)
        return self._next

    def subscribe_raw(self, subject: str, callback: RawCallback, *, acks: object = None) -> object:
        def decoded(subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
            callback(subject.encode(), (reply or "").encode(), hdr, data)

        return self.subscribe(subject, decoded)

    def unsubscribe(self, token: object) -> None:
        assert isinstance(token, int)
        del self.subs[token]

    def share(self, token: object, shared: bool) -> None:
        """One engine, no peers: nothing to announce."""

    def deliver(self, run: Deliveries) -> None:
        for _, reply, hdr, data in run.wire():
            self.publish(run.subject, reply.decode(), hdr, data)

    def has_interest(self, subject: str) -> bool:
        return any(subject_matches(pattern, subject) for pattern, _ in self.subs.values())

    def watch_interest(self, callback: Callable[[], None]) -> None:
        """The engine tests drive no push consumers: interest changes need no callback."""

    def replies(self, answers: list[tuple[bytes, bytes]]) -> None:
        for inbox, data in answers:
            self.publish(inbox.decode(), None, None, data)

    def publish(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        targets = [cb for pattern, cb in self.subs.values() if subject_matches(pattern, subject)]
        if not targets:
            self.inbox.setdefault(subject, []).append((hdr, data))
        for cb in targets:
            cb(subject, reply, hdr, data)

    async def request(
        self, subject: str, body: Any = b"", headers: dict[str, str] | None = None
    ) -> tuple[bytes | None, bytes]:
        """Publish with a fresh reply subject and wait (bounded) for the first answer."""
        reply = f"_INBOX.{self._next}.{len(self.inbox)}"
        self.inbox[reply] = []
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        hdr = encode_headers(headers) if headers else None
        if not any(subject_matches(p, subject) for p, _ in self.subs.values()):
            return b"NATS/1.0 503\r\n\r\n", b""
        self.publish(subject, reply, hdr, data)
        await poll_async(lambda: self.inbox[reply], f"an answer on {reply}", 5, interval=0)
        return self.inbox[reply][0]

    async def api(self, subject: str, body: Any = b"", **headers: str) -> dict[str, Any]:
        _, data = await self.request(subject, body, headers or None)
        return json.loads(data)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[tuple[JetStream, FakeMessaging]]:
    messaging = FakeMessaging()
    js = JetStream(engine_config(str(tmp_path)), messaging, server_id="NID", server_name="NID")
    await js.start()
    yield js, messaging
    await js.stop()


async def restart(js: JetStream, tmp_path: Path) -> tuple[JetStream, FakeMessaging]:
    await js.stop()
    messaging = FakeMessaging()
    again = JetStream(engine_config(str(tmp_path)), messaging, server_id="NID", server_name="NID")
    await again.start()
    return again, messaging


async def test_streams_recover_config_messages_and_dedup_at_start(tmp_path: Path) -> None:
    js = JetStream(engine_config(str(tmp_path)), FakeMessaging(), server_id="N", server_name="N")
    await js.start()
    m = js.messaging
    assert isinstance(m, FakeMessaging)
    created = await m.api("$JS.API.STREAM.CREATE.orders", {"name": "orders", "max_msgs": 10})
    await m.api("orders", b"one", **{"Nats-Msg-Id": "a"})
    await m.api("orders", b"two")
    await m.api("$JS.API.STREAM.CREATE.mem", {"name": "mem", "storage": "memory"})
    js, m = await restart(js, tmp_path)
    info = await m.api("$JS.API.STREAM.INFO.orders")
    assert info["config"] == created["config"]
    assert info["created"] == created["created"]
    assert (info["state"]["messages"], info["state"]["last_seq"]) == (2, 2)
    assert await m.api("orders", b"one", **{"Nats-Msg-Id": "a"}) == {
        "stream": "orders",
        "seq": 1,
        "duplicate": True,
    }
    names = await m.api("$JS.API.STREAM.NAMES")
    assert names["streams"] == ["orders"]  # memory streams do not survive a restart
    await js.stop()


async def test_missing_things_answer_like_the_reference(
    node: tuple[JetStream, FakeMessaging],
) -> None:
    _, m = node
    not_found = {"code": 404, "err_code": 10059, "description": "stream not found"}
    for subject in (
        "$JS.API.STREAM.INFO.x",
        "$JS.API.STREAM.DELETE.x",
        "$JS.API.STREAM.PURGE.x",
        "$JS.API.STREAM.MSG.GET.x",
        "$JS.API.CONSUMER.INFO.x.c",
        "$JS.API.CONSUMER.NAMES.x",
    ):
        assert (await m.api(subject))["error"] == not_found, subject
    await m.api("$JS.API.STREAM.CREATE.x", {"name": "x"})
    consumer = await m.api("$JS.API.CONSUMER.INFO.x.c")
    assert consumer["error"]["err_code"] == 10014
    assert (await m.api("$JS.API.CONSUMER.NAMES.x"))["consumers"] == []
    hdr, _ = await m.request("$JS.API.DIRECT.GET.x", {"seq": 1})
    assert hdr == b"NATS/1.0 503\r\n\r\n"  # no allow_direct: nobody listens


async def test_direct_get_answers_with_messages_and_statuses(
    node: tuple[JetStream, FakeMessaging],
) -> None:
    _, m = node
    await m.api(
        "$JS.API.STREAM.CREATE.kv", {"name": "kv", "subjects": ["kv.>"], "allow_direct": True}
    )
    await m.api("kv.a", b"1", X="y")
    await m.api("kv.b", b"2")
    hdr, data = await m.request("$JS.API.DIRECT.GET.kv.kv.a")
    assert hdr is not None
    status, _, headers = parse_headers(hdr)
    assert (status, data, headers["X"], headers["Nats-Sequence"]) == (None, b"1", ["y"], ["1"])
    assert headers["Nats-Stream"] == ["kv"] and headers["Nats-Subject"] == ["kv.a"]
    for body, expected in (
        ({"seq": 9}, b"NATS/1.0 404 Message Not Found\r\n\r\n"),
        (b"", b"NATS/1.0 408 Empty Request\r\n\r\n"),
        (b"{bad", b"NATS/1.0 408 Malformed Request\r\n\r\n"),
        ({"seq": 1, "last_by_subj": "kv.a"}, b"NATS/1.0 408 Bad Request\r\n\r\n"),
    ):
        assert (await m.request("$JS.API.DIRECT.GET.kv", body))[0] == expected
    _, data = await m.request("$JS.API.DIRECT.GET.kv", {"next_by_subj": "kv.b", "seq": 1})
    assert data == b"2"


async def test_max_age_expires_on_a_timer(node: tuple[JetStream, FakeMessaging]) -> None:
    js, m = node
    await m.api("$JS.API.STREAM.CREATE.t", {"name": "t", "max_age": 100_000_000})
    await m.api("t", b"x")
    await poll_async(
        lambda: not js.streams["t"].store.state().msgs, "t emptied by max_age", 5, interval=0.01
    )


async def test_update_resubscribes_and_jsz_counts(node: tuple[JetStream, FakeMessaging]) -> None:
    js, m = node
    await m.api("$JS.API.STREAM.CREATE.u", {"name": "u", "subjects": ["a"]})
    updated = await m.api("$JS.API.STREAM.UPDATE.u", {"name": "u", "subjects": ["b"]})
    assert updated["config"]["subjects"] == ["b"]
    assert (await m.request("a", b"x"))[0] == b"NATS/1.0 503\r\n\r\n"
    assert (await m.api("b", b"x"))["seq"] == 1
    jsz = js.info()
    assert (jsz["streams"], jsz["messages"], jsz["config"]["sync_always"]) == (1, 1, True)
