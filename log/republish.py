"""Republish: what a stream re-sends on core NATS once a message is stored.

Lightweight clients follow a stream without a consumer by subscribing to the
republish subject; the headers tell them where the message sits in the stream
(and `Nats-Last-Sequence`, the subject's previous message, lets them detect a
gap). The header block is the reference's, byte for byte, appended after the
message's own headers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ingest.parser.mapping import Transform, compile_transform
from ingest.parser.subjects import is_valid_literal_subject
from log.config import RePublish
from log.timefmt import rfc3339


@dataclass(frozen=True, slots=True)
class Republisher:
    """A stream's compiled republish rule."""

    transform: Transform
    headers_only: bool

    @classmethod
    def of(cls, config: RePublish | None) -> Republisher | None:
        """None when the stream republishes nothing (no rule, or an empty destination)."""
        if config is None:
            return None
        transform = compile_transform(config.src, config.dest)
        return cls(transform, config.headers_only) if transform is not None else None

    def message(
        self,
        *,
        stream: str,
        subject: str,
        seq: int,
        ts: int,
        last_seq: int,
        hdr: bytes | None,
        data: bytes,
    ) -> tuple[str, bytes, bytes] | None:
        """(subject, header block, payload) to send, or None when the subject is not covered
        or maps to something that cannot be published (the reference skips it too)."""
        target = self.transform.match(subject)
        if not target or not is_valid_literal_subject(target):
            return None
        lines = (
            f"Nats-Stream: {stream}\r\nNats-Subject: {subject}\r\nNats-Sequence: {seq}\r\n"
            f"Nats-Time-Stamp: {rfc3339(ts)}\r\nNats-Last-Sequence: {last_seq}\r\n"
        )
        if self.headers_only:
            lines += f"Nats-Msg-Size: {len(data)}\r\n"
        added = lines.encode("utf-8", "surrogateescape") + b"\r\n"
        block = hdr[:-2] + added if hdr else b"NATS/1.0\r\n" + added
        return target, block, b"" if self.headers_only else data
