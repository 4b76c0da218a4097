"""The server-wide limits on open batches (`log.batches.limits`): every stream's batches
count toward them, a stream's own limit still holds below them, and a batch that ends for
any reason gives its place back. Small limits stand in for the reference's 1,000 and 50,000."""

from __future__ import annotations

import pytest

from log.batches import atomic, limits
from log.batches.fast import FastBatches, parse
from log.batches.limits import ServerBatches
from log.errors import ApiError
from tests.log.test_api_level2 import staged
from tests.log.test_fast_batch import Outbox


def test_the_reference_limits_are_the_defaults() -> None:
    server = limits.SERVER
    assert (server.atomic_limit, server.fast_limit) == (1000, 50_000)


def test_atomic_batches_of_every_stream_count_toward_the_server_limit() -> None:
    server = ServerBatches(atomic=3)
    a, b = atomic.Stager(server), atomic.Stager(server)
    a.stage(staged(1, batch_id="a1"), allowed=True, above_level=False, now=0)
    a.stage(staged(1, batch_id="a2"), allowed=True, above_level=False, now=0)
    b.stage(staged(1, batch_id="b1"), allowed=True, above_level=False, now=0)
    with pytest.raises(ApiError) as refused:
        b.stage(staged(1, batch_id="b2"), allowed=True, above_level=False, now=0)
    assert refused.value.to_json() == {
        "code": 429,
        "err_code": 10210,
        "description": "atomic publish too many inflight",
    }
    commit = a.stage(staged(2, "1", batch_id="a1"), allowed=True, above_level=False, now=0)
    assert commit is not None  # a committed batch gives its place back
    assert b.stage(staged(1, batch_id="b2"), allowed=True, above_level=False, now=0) is None
    a.clear()  # so does leadership lost
    assert b.stage(staged(1, batch_id="b3"), allowed=True, above_level=False, now=0) is None


def test_a_deleted_streams_batches_stop_counting() -> None:
    server = ServerBatches(atomic=1)
    gone = atomic.Stager(server)
    gone.stage(staged(1, batch_id="g"), allowed=True, above_level=False, now=0)
    del gone
    kept = atomic.Stager(server)
    assert kept.stage(staged(1, batch_id="k"), allowed=True, above_level=False, now=0) is None


def test_fast_batches_of_every_stream_count_toward_the_server_limit() -> None:
    server = ServerBatches(fast=2)
    f, g, out = FastBatches("F", server), FastBatches("G", server), Outbox()

    def start(batches: FastBatches, batch_id: str) -> object:
        ref = parse(f"r.{batch_id}.10.fail.1.0.$FI")
        assert ref is not None
        return batches.begin(ref, 0, out, above_level=False)

    assert start(f, "a") is not None and start(g, "b") is not None
    assert start(g, "c") is None
    assert out[-1] == {
        "error": {"code": 429, "err_code": 10211, "description": "batch publish too many inflight"},
        "stream": "G",
        "seq": 0,
    }
    f.clear()
    assert start(g, "c") is not None
