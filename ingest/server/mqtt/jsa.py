"""MQTT's way into JetStream: requests over the server's own routing, as an internal client.

Sessions, retained messages and QoS ≥ 1 traffic live in ordinary streams and
durable consumers, created and fed through the same `$JS.API.…` subjects and
stream subjects any NATS client uses (the reference works the same way). So
they are stored, replicated and compacted into the lake like every other
stream, and show up in `nats stream ls`.

Every QoS 1 publish is one request here, so a request costs no task and no
timer of its own: answers go to callbacks, and one timer, armed for the oldest
request still unanswered, fails whatever outlives the timeout (all requests get
the same timeout, so send order is deadline order).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from ingest.server.accounts.registry import Account
    from ingest.server.server import Server


class JetStreamError(Exception):
    """A JetStream request for MQTT state failed or timed out; names the subject."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code  # the API's err_code, 0 for a timeout


NO_MESSAGE = 10037  # err_code of a STREAM.MSG.GET that finds nothing


class StoredMsg(NamedTuple):
    hdr: bytes | None
    data: bytes
    seq: int


Answered = Callable[[bytes], None]
Failed = Callable[[JetStreamError | None], None]
"""Called with the timeout's error, or None when the access closed before an answer."""


class _Waiter:
    """A request in flight: plain slots, as one is made for every QoS 1 publish."""

    __slots__ = ("answered", "deadline", "failed", "subject")

    def __init__(self, subject: bytes, deadline: float, answered: Answered, failed: Failed) -> None:
        self.subject = subject
        self.deadline = deadline
        self.answered = answered
        self.failed = failed


class JSAccess:
    """Requests in one account: its JetStream answers them, on its subjects."""

    def __init__(self, server: Server, node: str, timeout: float, account: Account) -> None:
        self.server = server
        self.account = account
        self.timeout = timeout
        self._prefix = f"$MQTT.JSA.{node}.".encode()
        self._next = itertools.count(1)
        self._waiting: dict[bytes, _Waiter] = {}  # reply subject -> waiter, oldest first
        self._timer: asyncio.TimerHandle | None = None
        self._token: object | None = server.subscribe_raw(
            self._prefix.decode() + "*", self._on_reply, account=account
        )
        server.announce(self._token)  # on a cluster the answer may come from another server

    def close(self) -> None:
        if self._token is None:
            return
        self.server.unsubscribe(self._token)
        self._token = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting = self._waiting, {}
        for waiter in waiting.values():
            waiter.failed(None)

    def _on_reply(self, subject: bytes, reply: bytes, hdr: bytes | None, data: bytes) -> None:
        waiter = self._waiting.pop(subject, None)
        if waiter is not None:
            waiter.answered(data)

    def send(
        self, subject: bytes, data: bytes, hdr: bytes | None, answered: Answered, failed: Failed
    ) -> None:
        """Publish with a reply inbox: `answered` gets the raw answer, or `failed` the timeout."""
        reply = self._prefix + b"%d" % next(self._next)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        self._waiting[reply] = _Waiter(subject, deadline, answered, failed)
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._expire)
        size = len(data) + (len(hdr) if hdr else 0)
        account = self.account
        self.server.route(None, subject, reply, hdr, data, size, account=account, internal=True)

    def _expire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        expired: list[bytes] = []
        for reply, waiter in self._waiting.items():  # oldest first: up to the first not due
            if waiter.deadline > now:
                self._timer = loop.call_at(waiter.deadline, self._expire)
                break
            expired.append(reply)
        for reply in expired:  # a callback may send again or close: the dict changes here
            waiter = self._waiting.pop(reply, None)
            if waiter is None:
                continue
            subject = waiter.subject.decode("utf-8", "surrogateescape")
            waiter.failed(JetStreamError(f"{subject}: no answer within {self.timeout}s"))

    def answer(
        self, subject: bytes, data: bytes, hdr: bytes | None = None
    ) -> asyncio.Future[bytes]:
        """`send` for a coroutine: the future gets the raw answer (cancelled on close)."""
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        def answered(data: bytes) -> None:
            if not fut.done():
                fut.set_result(data)

        def failed(exc: JetStreamError | None) -> None:
            if fut.done():
                return
            if exc is None:
                fut.cancel()
            else:
                fut.set_exception(exc)

        self.send(subject, data, hdr, answered, failed)
        return fut

    async def request(self, subject: str, doc: Any = None, hdr: bytes | None = None) -> Any:
        """One request/reply; an API error document raises, naming the subject."""
        data = b"" if doc is None else doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        raw = await self.answer(subject.encode(), data, hdr)
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            raise JetStreamError(f"{subject}: reply is not JSON") from None
        error = answer.get("error") if isinstance(answer, dict) else None
        if error:
            description = error.get("description", error)
            raise JetStreamError(f"{subject}: {description}", int(error.get("err_code") or 0))
        return answer

    async def last_msg(self, stream: str, subject: str) -> StoredMsg | None:
        """A subject's last message, or None: read through the API, so on a cluster from
        the stream's leader whichever server asks."""
        try:
            answer = await self.request(
                f"$JS.API.STREAM.MSG.GET.{stream}", {"last_by_subj": subject}
            )
        except JetStreamError as exc:
            if exc.code == NO_MESSAGE:
                return None
            raise
        msg = answer.get("message") or {}
        hdrs = msg.get("hdrs")
        hdr = base64.b64decode(hdrs) if hdrs else None
        return StoredMsg(hdr, base64.b64decode(msg.get("data") or ""), int(msg.get("seq") or 0))

    async def subjects(self, stream: str, filter_subject: str) -> list[str]:
        """The subjects of a stream under `filter_subject` that hold messages."""
        info = await self.request(
            f"$JS.API.STREAM.INFO.{stream}", {"subjects_filter": filter_subject}
        )
        return sorted((info.get("state") or {}).get("subjects") or {})

    def publish(self, subject: bytes, data: bytes) -> None:
        """Fire and forget (acks of deliveries, NAKs)."""
        account = self.account
        self.server.route(None, subject, b"", None, data, len(data), account=account, internal=True)
