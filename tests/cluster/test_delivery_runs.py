"""A consumer's run to a peer's inbox, framed by the compiled extension and by Python alike,
and read back by the route codec as the deliveries the client is shown."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.parser import fast
from ingest.parser.routes import RMsg, RouteCodec
from ingest.server.cluster import delivery_runs
from ingest.server.cluster.delivery_runs import frame_for_peer, is_delivery, split_shown
from log.consumers.wire import Deliveries

PREFIX = b"$JS.ACK.ORDERS.pull."
MSG = st.tuples(
    st.sampled_from([b"orders.a", b"orders.b.c", b"x"]),
    st.one_of(st.none(), st.sampled_from([b"NATS/1.0\r\nK: v\r\n\r\n", b"NATS/1.0 100\r\n\r\n"])),
    st.binary(max_size=40),
    *[st.integers(0, 2**40)] * 5,
)


def python_frames(run: Deliveries) -> tuple[bytes, int]:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(delivery_runs.fast, "native", None)
        return frame_for_peer(b"$G", b"_INBOX.abc.7", run)


@pytest.mark.skipif(fast.native is None, reason="the compiled extension is not installed")
@given(st.lists(MSG, min_size=1, max_size=8))
def test_the_compiled_frames_are_pythons(msgs: list[Any]) -> None:
    run = Deliveries("_INBOX.abc.7", PREFIX, msgs)
    assert frame_for_peer(b"$G", b"_INBOX.abc.7", run) == python_frames(run)


@given(st.lists(MSG, min_size=1, max_size=8))
def test_the_peer_reads_each_delivery_as_the_client_is_shown_it(msgs: list[Any]) -> None:
    run = Deliveries("_INBOX.abc.7", PREFIX, msgs)
    frames, size = frame_for_peer(b"$G", b"_INBOX.abc.7", run)
    ops = RouteCodec().receive(frames)
    assert all(type(op) is RMsg and is_delivery(op) for op in ops)
    shown = []
    for op in ops:
        assert op.hdr is not None
        subject, own = split_shown(op.hdr)
        shown.append((subject, op.reply, own, op.payload))
    assert shown == [(s, r, h, d) for s, r, h, d in run.wire()]
    assert size == sum(len(d) + len(h or b"") for _, h, d, *_ in msgs)
