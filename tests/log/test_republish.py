"""The republish message a stream sends, byte for byte as the reference builds it."""

from __future__ import annotations

from log.config import RePublish
from log.republish import Republisher

TS = 1_700_000_000_123_456_000  # 2023-11-14T22:13:20.123456Z


def test_headers_appended_after_the_messages_own() -> None:
    rule = Republisher.of(RePublish("o.*", "copy.$1"))
    assert rule is not None
    out = rule.message(
        stream="S",
        subject="o.a",
        seq=7,
        ts=TS,
        last_seq=3,
        hdr=b"NATS/1.0\r\nA: 1\r\n\r\n",
        data=b"x",
    )
    assert out == (
        "copy.a",
        b"NATS/1.0\r\nA: 1\r\nNats-Stream: S\r\nNats-Subject: o.a\r\nNats-Sequence: 7\r\n"
        b"Nats-Time-Stamp: 2023-11-14T22:13:20.123456Z\r\nNats-Last-Sequence: 3\r\n\r\n",
        b"x",
    )


def test_headers_only_drops_the_payload_and_states_its_size() -> None:
    rule = Republisher.of(RePublish(">", "all.>", headers_only=True))
    assert rule is not None
    out = rule.message(stream="S", subject="k", seq=1, ts=TS, last_seq=0, hdr=None, data=b"abc")
    assert out is not None
    subject, block, data = out
    assert (subject, data) == ("all.k", b"")
    assert block.startswith(b"NATS/1.0\r\nNats-Stream: S\r\n")
    assert block.endswith(b"Nats-Last-Sequence: 0\r\nNats-Msg-Size: 3\r\n\r\n")


def test_uncovered_subjects_and_empty_destinations_send_nothing() -> None:
    rule = Republisher.of(RePublish("o.*", "copy.$1"))
    assert rule is not None
    missed = rule.message(stream="S", subject="p.a", seq=1, ts=TS, last_seq=0, hdr=None, data=b"")
    assert missed is None
    assert Republisher.of(RePublish(">", "")) is None
    assert Republisher.of(None) is None
