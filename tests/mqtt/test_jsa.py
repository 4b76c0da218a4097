"""JSAccess without a server: answers reach their callbacks, one timer fails what goes
unanswered past the timeout (and nothing else), closing cancels requests in flight."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ingest.server.mqtt.jsa import JetStreamError, JSAccess


class FakeServer:
    """Records routed messages; `answer` plays JetStream replying on a request's inbox."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes, bytes]] = []  # subject, reply, data
        self.callback: Any = None

    def subscribe_raw(self, subject: str, callback: Any, *, account: object) -> object:
        assert subject.endswith(".*")
        assert account is ACCOUNT, "replies come back in the requests' account"
        self.callback = callback
        return self

    def announce(self, token: object) -> None:
        """The reply inbox is made cluster-wide; nothing to do without a cluster."""

    def unsubscribe(self, token: object) -> None:
        self.callback = None

    def route(
        self,
        sender: None,
        subject: bytes,
        reply: bytes,
        hdr: bytes | None,
        data: bytes,
        size: int,
        *,
        account: object,
        internal: bool,
    ) -> bool:
        assert size == len(data) + (len(hdr) if hdr else 0)
        assert account is ACCOUNT, "requests go to the account's JetStream"
        assert internal, "the MQTT bridge's own requests are not client input"
        self.sent.append((subject, reply, data))
        return True

    def answer(self, index: int, data: bytes) -> None:
        self.callback(self.sent[index][1], b"", None, data)


ACCOUNT = object()


def make(timeout: float = 5.0) -> tuple[JSAccess, FakeServer]:
    server = FakeServer()
    return JSAccess(server, "node", timeout, ACCOUNT), server  # type: ignore[arg-type]


async def test_answers_go_to_their_callbacks_and_requests_decode_them() -> None:
    jsa, server = make()
    got: list[bytes] = []
    jsa.send(b"$MQTT.msgs.a", b"one", None, got.append, pytest.fail)
    jsa.send(b"$MQTT.msgs.b", b"two", b"NATS/1.0\r\n\r\n", got.append, pytest.fail)
    assert [s for s, _, _ in server.sent] == [b"$MQTT.msgs.a", b"$MQTT.msgs.b"]
    assert len({r for _, r, _ in server.sent}) == 2  # an inbox each
    server.answer(1, b"B")
    server.answer(0, b"A")
    server.answer(0, b"again")  # a second answer on a used inbox goes nowhere
    assert got == [b"B", b"A"]

    request = asyncio.ensure_future(jsa.request("$JS.API.INFO", {"x": 1}))
    await asyncio.sleep(0)  # let the request be sent
    assert server.sent[-1][2] == b'{"x": 1}'
    server.answer(-1, b'{"ok": true}')
    assert await request == {"ok": True}

    failing = asyncio.ensure_future(jsa.request("$JS.API.BAD"))
    await asyncio.sleep(0)
    server.answer(-1, b'{"error": {"code": 404, "description": "nope"}}')
    with pytest.raises(JetStreamError, match=r"\$JS.API.BAD: nope"):
        await failing


async def test_the_timer_fails_only_what_is_past_its_deadline() -> None:
    jsa, server = make(timeout=0.05)
    failures: list[JetStreamError | None] = []
    answered: list[bytes] = []
    jsa.send(b"first", b"", None, answered.append, failures.append)
    jsa.send(b"second", b"", None, answered.append, failures.append)
    server.answer(0, b"ok")  # the oldest is answered: the timer must skip to the next
    with pytest.raises(JetStreamError, match=r"third: no answer within 0\.05s"):
        await jsa.request("third")
    assert answered == [b"ok"]
    assert [str(e) for e in failures] == ["second: no answer within 0.05s"]
    server.answer(1, b"late")  # after its timeout: ignored
    assert answered == [b"ok"]


async def test_close_cancels_requests_and_tells_callbacks() -> None:
    jsa, server = make()
    failures: list[JetStreamError | None] = []
    jsa.send(b"x", b"", None, pytest.fail, failures.append)
    request = asyncio.ensure_future(jsa.request("y"))
    await asyncio.sleep(0)
    jsa.close()
    assert failures == [None] and server.callback is None
    with pytest.raises(asyncio.CancelledError):
        await request
