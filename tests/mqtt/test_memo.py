"""The topic ↔ subject memo of the publish and delivery paths: same answers as the
conversion, errors raised every time, long names and overflow not kept."""

from __future__ import annotations

import pytest

from ingest.parser.mqtt_topics import TopicError, to_subject, to_topic
from ingest.server.mqtt import subscriptions
from ingest.server.mqtt.subscriptions import MEMO_LONGEST, subject_of, topic_of


def test_memo_answers_as_the_conversion_and_raises_every_time() -> None:
    for topic in (b"a/b", b"/lead", b"a.b/c", b"a/b"):
        assert subject_of(topic) == to_subject(topic)
        assert topic_of(to_subject(topic)) == to_topic(to_subject(topic))
    for _ in range(2):
        with pytest.raises(TopicError):
            subject_of(b"a b")


def test_memo_keeps_short_names_only_and_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []

    def convert(name: bytes) -> bytes:
        calls.append(name)
        return name.upper()

    monkeypatch.setattr(subscriptions, "MEMO_SIZE", 2)
    memo = subscriptions._memo(convert)
    long = b"x" * (MEMO_LONGEST + 1)
    for name in (b"a", b"a", long, long):
        assert memo(name) == name.upper()
    assert calls == [b"a", long, long]
    memo(b"b")
    memo(b"c")  # full: starts over
    memo(b"a")
    assert calls[-3:] == [b"b", b"c", b"a"]
