"""Subject delete markers (KV limit markers) on one stream, on the clock the test gives.

The end-to-end tests compare these with the reference in real time; here the
rules are pinned without waiting: which expiries leave a marker, what it
carries, and the TTL floor the reference applies to publishes.
"""

from __future__ import annotations

import pytest

from log import publish
from log.config import from_request
from log.streams.stream import Stream
from tests.log.test_stream import NS, live, make, pub, read_headers


def headers(stream: Stream, seq: int) -> dict[str, list[str]]:
    msg = stream.store.load(seq)
    assert msg is not None and msg.hdr is not None
    return dict(read_headers(msg.hdr))


@pytest.mark.parametrize(
    ("seconds", "text"), [(1, "1s"), (59, "59s"), (60, "1m0s"), (90, "1m30s"), (3600, "1h0m0s")]
)
def test_marker_ttl_is_written_as_a_go_duration(seconds: int, text: str) -> None:
    cfg = from_request({"name": "s", "subject_delete_marker_ttl": seconds * NS + NS // 2})
    assert read_headers(publish.marker_header(cfg)) == {
        "Nats-Marker-Reason": ["MaxAge"],
        "Nats-TTL": [text],
        "Nats-Rollup": ["sub"],
    }


def test_short_ttls_are_raised_to_the_marker_ttl_and_moved_last() -> None:
    cfg = from_request({"name": "s", "subject_delete_marker_ttl": 60 * NS})
    hdr = b"NATS/1.0\r\nNats-TTL: 1s\r\nA: b\r\n\r\n"
    assert publish.floor_ttl(cfg, 1, hdr) == (60, b"NATS/1.0\r\nA: b\r\nNats-TTL: 60\r\n\r\n")
    assert publish.floor_ttl(cfg, 61, hdr) == (61, hdr)
    assert publish.floor_ttl(cfg, publish.NEVER, hdr) == (publish.NEVER, hdr)
    single = from_request(
        {"name": "s", "subject_delete_marker_ttl": 60 * NS, "max_msgs_per_subject": 1}
    )
    assert publish.floor_ttl(single, 1, hdr) == (1, hdr)  # one message per subject: exempt


async def test_expiry_that_empties_a_subject_leaves_one_marker() -> None:
    s = make(subject_delete_marker_ttl=NS, max_msgs_per_subject=5)
    await pub(s, "s.a", Nats_TTL="1")
    await pub(s, "s.b", Nats_TTL="1")
    await pub(s, "s.b")  # keeps s.b alive: no marker for it
    deadline = s.next_expiry()
    assert deadline is not None
    assert await s.expire(deadline + NS // 10) == 1  # both TTLs, published microseconds apart
    await s.flush()
    assert live(s) == [3, 4]
    assert headers(s, 4)["Nats-Marker-Reason"] == ["MaxAge"]
    marker_deadline = s.next_expiry()
    assert marker_deadline is not None
    assert await s.expire(marker_deadline) == 0  # a marker expiring leaves none
    assert live(s) == [3]


async def test_max_age_markers_and_purge_markers() -> None:
    s = make(subject_delete_marker_ttl=NS, max_age=NS, allow_rollup_hdrs=True)
    await pub(s, "s.a")
    await pub(s, "s.a")
    await pub(s, "s.p", KV_Operation="PURGE", Nats_Rollup="sub")
    newest = s.store.load(3)
    assert newest is not None
    assert await s.expire(newest.ts + NS + 1) == 1  # s.a once, not per message; the PURGE none
    await s.flush()
    assert [m.subject for m in map(s.store.load, live(s)) if m] == ["s.a"]
