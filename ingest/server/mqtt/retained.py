"""Retained messages: one per topic, kept in `$MQTT_rmsgs` and mirrored in memory.

The stream (one message per subject, `$MQTT.rmsgs.<subject>`, with the
reference's `Nmqtt-RTopic`/`Nmqtt-RFlags` headers) is the truth and survives
restarts; the in-memory map answers each new subscription without a request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ingest.parser.headers import encode_headers, header_value
from ingest.parser.subjects import subject_matches

if TYPE_CHECKING:
    from ingest.server.mqtt.jsa import JSAccess
    from log.segments.api import MsgStore

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

    def load(self, store: MsgStore) -> None:
        """Read back what a previous run retained (the stream keeps one per subject)."""
        for subject in store.subjects(PREFIX + ">"):
            msg = store.load_last(subject)
            if msg is None or not msg.data:
                continue
            topic = header_value(msg.hdr, b"Nmqtt-RTopic")
            flags = header_value(msg.hdr, b"Nmqtt-RFlags") or b"0"
            if topic is not None:
                qos = (int(flags) >> 1) & 3 if flags.isdigit() else 0
                self.msgs[subject[len(PREFIX) :]] = RetainedMsg(topic, msg.data, qos)

    async def put(self, subject: str, topic: bytes, payload: bytes, qos: int) -> None:
        """Retain (or with an empty payload, forget) the message of a topic."""
        if not payload:
            if self.msgs.pop(subject, None) is not None:
                await self.jsa.request(
                    f"$JS.API.STREAM.PURGE.{STREAM}", {"filter": PREFIX + subject}
                )
            return
        self.msgs[subject] = RetainedMsg(topic, payload, qos)
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
