"""Fast batch publish's pure rules (`log.batches.fast`): the reply subject, and the flow
of one stream's batches driven by hand (no server, time as an argument)."""

from __future__ import annotations

import json

import pytest

from log.batches import fast
from log.batches.fast import FastBatches, FastRef, parse
from log.segments.api import NewMsg
from log.streams.entries import Publish

S = 1_000_000_000


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("_INBOX.x.b1.10.ok.1.0.$FI", FastRef("b1", 1, 10, True, 0)),
        ("a.b.c.id.7.fail.12.1.$FI", FastRef("id", 12, 7, False, 1)),
        ("p.id.0.ok.3.2.$FI", FastRef("id", 3, 10, True, 2)),  # flow 0: the default
        ("p.id.-4.ok.3.3.$FI", FastRef("id", 3, 10, True, 3)),
        ("p.id.99999.ok.3.4.$FI", FastRef("id", 3, 65_535, True, 4)),
        ("p.id.5.ok.1.2.$FI", FastRef("id", 1, 5, True, 2)),  # a batch of one
    ],
)
def test_reply_subjects_read_from_the_right(reply: str, expected: FastRef) -> None:
    assert parse(reply) == expected


@pytest.mark.parametrize(
    "reply",
    [
        "a.$FI",
        "id.10.ok.1.0.$FI",  # no prefix
        "p.id.10.ok.1.5.$FI",  # unknown op
        "p.id.10.ok.2.0.$FI",  # start after 1
        "p.id.10.ok.1.1.$FI",  # append at 1
        "p.id.10.ok.1.3.$FI",  # end of nothing
        "p.id.10.ok.0.2.$FI",
        "p.id.10.maybe.1.0.$FI",
        "p.id.10.ok.x.0.$FI",
    ],
)
def test_malformed_replies_are_fast_but_invalid(reply: str) -> None:
    got = parse(reply)
    assert got is not None and not got.valid


@pytest.mark.parametrize("reply", [None, "", "$FI", "_INBOX.abc", "p.id.10.ok.1.0.$FIX"])
def test_other_replies_are_not_fast(reply: str | None) -> None:
    assert parse(reply) is None


class Outbox(list[dict[str, object]]):
    def __call__(self, body: bytes) -> None:
        self.append(json.loads(body))


def _run(batches: FastBatches, out: Outbox, reply: str, now: int, stream_seq: int) -> None:
    """One message taken, proposed and stored at `stream_seq`."""
    ref = parse(reply)
    assert ref is not None
    taken = batches.begin(ref, now, out, above_level=False)
    if taken is not None:
        batches.proposed(taken)
        batches.stored(ref, stream_seq, out)


def test_a_silent_batch_is_forgotten_and_a_new_one_starts_alone() -> None:
    batches, out = FastBatches("F"), Outbox()
    _run(batches, out, "p.a.4.ok.1.0.$FI", 0, 1)
    _run(batches, out, "p.b.4.ok.1.0.$FI", 0, 2)  # a second batch starts at a flow of 1
    assert out == [
        {"type": "ack", "seq": 0, "msgs": 4},
        {"type": "ack", "seq": 0, "msgs": 1},
        {"type": "ack", "seq": 1, "msgs": 2},  # stored: ramped up toward 500 / 2
    ]
    out.clear()
    _run(batches, out, "p.a.4.ok.2.1.$FI", fast.TIMEOUT_NS + 1, 3)
    assert out == [{"error": fast.unknown_id().to_json(), "stream": "F", "seq": 0}]
    out.clear()
    _run(batches, out, "p.c.4.ok.1.0.$FI", fast.TIMEOUT_NS + 1, 3)
    assert out[0] == {"type": "ack", "seq": 0, "msgs": 4} and len(batches) == 1


def test_the_flow_ramps_toward_the_batchs_share_and_never_above_its_ask() -> None:
    batches, out = FastBatches("F"), Outbox()
    _run(batches, out, "p.a.8.ok.1.0.$FI", 0, 1)
    out.clear()
    for seq in range(1, 16):
        _run(batches, out, f"p.b.8.ok.{seq}.{int(seq > 1)}.$FI", S, seq + 1)
    assert [m["msgs"] for m in out] == [1, 2, 4, 8, 8]  # doubled, capped at the ask of 8
    assert [m["seq"] for m in out] == [0, 1, 3, 7, 15]


def test_a_ping_in_gap_fail_mode_ends_the_batch_once_everything_is_stored() -> None:
    batches, out = FastBatches("F"), Outbox()
    first = parse("p.a.5.fail.1.0.$FI")
    assert first is not None
    taken = batches.begin(first, 0, out, above_level=False)
    assert taken is not None
    batches.proposed(taken)  # not stored yet
    ping = parse("p.a.5.fail.3.4.$FI")
    assert ping is not None and batches.begin(ping, 0, out, above_level=False) is None
    assert out == [
        {"type": "ack", "seq": 0, "msgs": 5},
        {"type": "gap", "last_seq": 2, "seq": 4},
        {"type": "ack", "seq": 0, "msgs": 5},  # the PubAck waits: the last flow ack again
    ]
    out.clear()
    batches.stored(first, 9, out)
    assert out == [{"stream": "F", "seq": 9, "batch": "a", "count": 1}] and len(batches) == 0


def test_too_many_batches_in_flight_are_refused() -> None:
    batches, out = FastBatches("F"), Outbox()
    for n in range(fast.MAX_INFLIGHT):
        _run(batches, out, f"p.b{n}.1.ok.1.0.$FI", 0, n + 1)
    out.clear()
    _run(batches, out, "p.one-more.1.ok.1.0.$FI", 0, 0)
    assert out == [{"error": fast.too_many_inflight().to_json(), "stream": "F", "seq": 0}]


def test_a_follower_carries_the_batches_and_leads_them_on() -> None:
    """The leader's entries say where each batch stands; the member that takes over sends
    each publisher a flow ack for its last stored message, and the batch goes on."""
    leader, out = FastBatches("F"), Outbox()
    entries = []
    for seq in range(1, 4):
        ref = parse(f"r.b.5.fail.{seq}.{0 if seq == 1 else 1}.$FI")
        assert ref is not None
        taken = leader.begin(ref, 0, out, above_level=False)
        assert taken is not None
        leader.proposed(taken)
        entries.append(Publish(NewMsg("s", None, b"", 0), 40 + seq, fast=leader.mark(ref)))
    done = parse("r.d.5.ok.1.2.$FI")  # a batch of one, committed: nothing to carry on
    assert done is not None
    entries.append(Publish(NewMsg("s", None, b"", 0), 44, fast=leader.mark(done)))
    follower, sent = FastBatches("F"), []
    follower.follow(entries, now=0)
    assert len(follower) == 1
    follower.lead(1, lambda subject, hdr, body: sent.append((subject, json.loads(body))))
    assert sent == [("r.b.5.fail.3.1.$FI", {"type": "ack", "seq": 3, "msgs": 5})]
    out.clear()
    for seq, stream_seq in ((4, 45), (5, 46)):
        ref = parse(f"r.b.5.fail.{seq}.{2 if seq == 5 else 1}.$FI")
        assert ref is not None
        taken = follower.begin(ref, 1, out, above_level=False)
        assert taken is not None
        follower.proposed(taken)
        follower.stored(ref, stream_seq, out)
    assert out == [{"stream": "F", "seq": 46, "batch": "b", "count": 5}]


def test_a_follower_forgets_silent_batches_before_leading() -> None:
    ref = parse("r.b.5.ok.1.0.$FI")
    assert ref is not None
    follower, sent = FastBatches("F"), []
    mark = FastBatches("F").mark(ref)
    follower.follow([Publish(NewMsg("s", None, b"", 0), 1, fast=mark)], now=0)
    follower.lead(fast.TIMEOUT_NS + 1, lambda *args: sent.append(args))
    assert (len(follower), sent) == (0, [])
