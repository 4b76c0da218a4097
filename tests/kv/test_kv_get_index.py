"""A KV get is one index lookup and one batch read, however big the bucket.

Timing a get on a large bucket against a small one is noisy on a shared
machine; counting what the store does is not. Both get paths nats-py uses
(direct get by subject, and STREAM.MSG.GET last_by_subj when the bucket is not
direct) must read exactly one record batch and never scan or list subjects.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ingest.parser.headers import parse_headers
from ingest.server.jetstream import JetStream
from log.streams.stream import Stream
from tests.jetstream.test_engine import FakeMessaging, engine_config

KEYS = 20_000
HISTORY = 5
_WATCHED = ("_fetch", "_scan", "seqs_for", "subjects", "load_next")


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[tuple[JetStream, FakeMessaging]]:
    messaging = FakeMessaging()
    js = JetStream(engine_config(str(tmp_path)), messaging, server_id="N", server_name="N")
    await js.start()
    yield js, messaging
    await js.stop()


async def bucket(js: JetStream, m: FakeMessaging, name: str, keys: int) -> Stream:
    """A bucket configured as nats-py creates one, filled with `keys` x HISTORY revisions."""
    await m.api(
        f"$JS.API.STREAM.CREATE.KV_{name}",
        {
            "name": f"KV_{name}",
            "subjects": [f"$KV.{name}.>"],
            "max_msgs_per_subject": HISTORY,
            "discard": "new",
            "allow_rollup_hdrs": True,
            "deny_delete": True,
            "allow_direct": True,
            "allow_msg_ttl": True,
        },
    )
    stream = js.stream(f"KV_{name}")
    for revision in range(HISTORY):
        for key in range(keys):
            stream.publish(f"$KV.{name}.k{key}", None, b"%d" % revision, {}, None)
    await stream.flush()
    assert stream.store.state().msgs == keys * HISTORY
    return stream


def count_store_calls(stream: Stream, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count the store's batch reads and every call that walks more than one subject's list."""
    calls: Counter[str] = Counter()
    store: Any = stream.store
    for name in _WATCHED:
        original = getattr(store, name)

        def counted(*args: Any, _name: str = name, _original: Any = original, **kw: Any) -> Any:
            calls[_name] += 1
            return _original(*args, **kw)

        monkeypatch.setattr(store, name, counted)
    return calls


async def get_both_ways(m: FakeMessaging, name: str, key: str) -> list[bytes]:
    subject = f"$KV.{name}.{key}"
    hdr, data = await m.request(f"$JS.API.DIRECT.GET.KV_{name}.{subject}")
    assert hdr is not None and parse_headers(hdr)[2]["Nats-Subject"] == [subject]
    msg = await m.api(f"$JS.API.STREAM.MSG.GET.KV_{name}", {"last_by_subj": subject})
    assert msg["message"]["subject"] == subject
    return [data, msg["message"]["data"].encode()]


async def test_get_reads_one_batch_on_a_100k_message_bucket(
    node: tuple[JetStream, FakeMessaging], monkeypatch: pytest.MonkeyPatch
) -> None:
    js, m = node
    small = await bucket(js, m, "small", 10)
    large = await bucket(js, m, "large", KEYS)
    assert large.store.state().msgs == 100_000
    per_bucket = {}
    for stream, name, key in (
        (small, "small", "k3"),
        (large, "large", "k3"),
        (large, "large", f"k{KEYS - 1}"),
    ):
        calls = count_store_calls(stream, monkeypatch)
        data = await get_both_ways(m, name, key)
        assert data[0] == b"4"  # the newest revision
        per_bucket[(name, key)] = dict(calls)
        monkeypatch.undo()
    # One batch read per get (two gets), nothing that scans: the same on either size.
    assert set(map(str, per_bucket.values())) == {str({"_fetch": 2})}, per_bucket
