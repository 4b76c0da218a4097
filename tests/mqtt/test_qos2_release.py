"""A QoS 2 release without a server: the held message is forgotten only once it is stored,
so a PUBREL whose store failed releases it again, under the same Nats-Msg-Id."""

from __future__ import annotations

from typing import Any

import pytest

from ingest.parser import mqtt
from ingest.server.mqtt.jsa import JetStreamError
from ingest.server.mqtt.session import QOS2_STREAM, Session

HELD_SEQ = 41


class FakeJSA:
    """Records API requests; a message held in `$MQTT_qos2in` gets `HELD_SEQ`."""

    def __init__(self) -> None:
        self.requests: list[str] = []

    async def request(self, subject: str, doc: Any = None, hdr: bytes | None = None) -> Any:
        self.requests.append(subject)
        return {"stream": QOS2_STREAM, "seq": HELD_SEQ}


class FakeManager:
    """Stores releases in `published`; the first `failures` stores time out."""

    origin = "origin"

    def __init__(self, failures: int) -> None:
        self.jsa = FakeJSA()
        self.failures = failures
        self.published: list[tuple[str, bytes, str]] = []

    async def publish(
        self, subject: str, packet: mqtt.Publish, *, allowed: bool, msg_id: str = ""
    ) -> None:
        self.published.append((subject, packet.payload, msg_id))
        if self.failures:
            self.failures -= 1
            raise JetStreamError(f"$MQTT.msgs.{subject}: no answer within 5.0s")


async def test_a_release_whose_store_failed_is_done_again_by_the_next_pubrel() -> None:
    manager = FakeManager(failures=1)
    session = Session(manager, "sender", "hash", clean=False)  # type: ignore[arg-type]
    await session.publish(mqtt.Publish(b"a/b", b"held", 2, False, False, 7), "a.b", allowed=True)
    purge = f"$JS.API.STREAM.PURGE.{QOS2_STREAM}"

    with pytest.raises(JetStreamError):
        await session.on_pubrel(7)
    assert purge not in manager.jsa.requests  # still held: nothing stored yet
    await session.on_pubrel(7)
    await session.on_pubrel(7)  # completed already: nothing more is stored
    released = ("a.b", b"held", f"{QOS2_STREAM}.{HELD_SEQ}")
    assert manager.published == [released, released]  # one message to JetStream's dedup
    assert manager.jsa.requests.count(purge) == 1
