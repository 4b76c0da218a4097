"""MQTT's way into JetStream: requests over the server's own routing, as an internal client.

Sessions, retained messages and QoS ≥ 1 traffic live in ordinary streams and
durable consumers, created and fed through the same `$JS.API.…` subjects and
stream subjects any NATS client uses (the reference works the same way). So
they are stored, replicated and compacted into the lake like every other
stream, and show up in `nats stream ls`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ingest.server.server import Server


class JetStreamError(Exception):
    """A JetStream request for MQTT state failed or timed out; names the subject."""


class JSAccess:
    def __init__(self, server: Server, node: str, timeout: float) -> None:
        self.server = server
        self.timeout = timeout
        self._prefix = f"$MQTT.JSA.{node}."
        self._next = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._token: object | None = server.subscribe(self._prefix + "*", self._on_reply)

    def close(self) -> None:
        if self._token is None:
            return
        self.server.unsubscribe(self._token)
        self._token = None
        for fut in self._waiting.values():
            fut.cancel()
        self._waiting.clear()

    def _on_reply(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        fut = self._waiting.pop(subject, None)
        if fut is not None and not fut.done():
            try:
                fut.set_result(json.loads(data) if data else {})
            except ValueError:
                fut.set_exception(JetStreamError(f"{subject}: reply is not JSON"))

    def send(self, subject: str, data: bytes, hdr: bytes | None = None) -> asyncio.Future[Any]:
        """Publish with a reply inbox; the future gets the decoded answer."""
        reply = self._prefix + str(next(self._next))
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[reply] = fut
        self.server.publish(subject, reply, hdr, data)
        return fut

    async def request(self, subject: str, doc: Any = None, hdr: bytes | None = None) -> Any:
        """One request/reply; an API error document raises, naming the subject."""
        data = b"" if doc is None else doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        fut = self.send(subject, data, hdr)
        try:
            answer = await asyncio.wait_for(fut, self.timeout)
        except TimeoutError:
            raise JetStreamError(f"{subject}: no answer within {self.timeout}s") from None
        error = answer.get("error") if isinstance(answer, dict) else None
        if error:
            raise JetStreamError(f"{subject}: {error.get('description', error)}")
        return answer

    def publish(self, subject: str, data: bytes, hdr: bytes | None = None) -> None:
        """Fire and forget (acks of deliveries, NAKs)."""
        self.server.publish(subject, None, hdr, data)
