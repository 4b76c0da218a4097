"""Retained messages: one per topic, kept in `$MQTT_rmsgs` and mirrored in memory.

The stream (one message per subject, `$MQTT.rmsgs.<subject>`, with the
reference's `Nmqtt-RTopic`/`Nmqtt-RFlags` headers) is the truth and survives
restarts; the in-memory map answers each new subscription without a request.
Every server of a cluster keeps its map current by listening on the stream's
subjects (announced cluster-wide), so a message retained through one server is
there for a subscriber on any other. Clearing a topic stores an empty message,
which the listeners see too (and `load` skips).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ingest.parser.headers import encode_headers, header_value
from ingest.parser.subjects import subject_matches

if TYPE_CHECKING:
    from ingest.server.mqtt.jsa import JSAccess

STREAM = "$MQTT_rmsgs"
PREFIX = "$MQTT.rmsgs."


@dataclass(frozen=True, slots=True)
class RetainedMsg:
    topic: bytes
    payload: bytes
    qos: int


class RetainedStore:
    def __init__(self, jsa: JSAccess, origin: str) -> None:
        self.jsa = jsa
        self.origin = origin
        self.msgs: dict[str, RetainedMsg] = {}
        self._token: object | None = None

    async def load(self) -> None:
        """Listen for what any server retains from now on, then read what is retained."""
        server = self.jsa.server
        self._token = server.subscribe_raw(PREFIX + ">", self._on_stored, account=self.jsa.account)
        server.announce(self._token)
        for subject in await self.jsa.subjects(STREAM, PREFIX + ">"):
            found = await self.jsa.last_msg(STREAM, subject)
            if found is not None:
                self._remember(subject[len(PREFIX) :], found.hdr, found.data)

    def close(self) -> None:
        if self._token is not None:
            self.jsa.server.unsubscribe(self._token)
            self._token = None

    def _on_stored(self, subject: bytes, reply: bytes, hdr: bytes | None, data: bytes) -> None:
        self._remember(subject.decode()[len(PREFIX) :], hdr, data)

    def _remember(self, subject: str, hdr: bytes | None, data: bytes) -> None:
        topic = header_value(hdr, b"Nmqtt-RTopic") if hdr else None
        if not data or topic is None:
            self.msgs.pop(subject, None)
            return
        flags = header_value(hdr, b"Nmqtt-RFlags") or b"0"
        qos = (int(flags) >> 1) & 3 if flags.isdigit() else 0
        self.msgs[subject] = RetainedMsg(topic, data, qos)

    async def put(self, subject: str, topic: bytes, payload: bytes, qos: int) -> None:
        """Retain (or with an empty payload, forget) the message of a topic."""
        if payload:
            self.msgs[subject] = RetainedMsg(topic, payload, qos)
        elif self.msgs.pop(subject, None) is None:
            return
        hdr = encode_headers(
            {
                "Nmqtt-RTopic": topic.decode(),
                "Nmqtt-RFlags": str((qos << 1) | 1),
                "Nmqtt-ROrigin": self.origin,
            }
        )
        await self.jsa.request(PREFIX + subject, payload, hdr)

    def matching(self, filter_subject: str, *, reserved: bool) -> list[RetainedMsg]:
        """Retained messages a new subscription gets (leading wildcards skip `$` topics)."""
        return [
            msg
            for subject, msg in self.msgs.items()
            if subject_matches(filter_subject, subject) and not (reserved and subject[:1] == "$")
        ]
