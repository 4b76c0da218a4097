"""When the codec learns a stream's prefix (`learn_intake_tail`): from the sublist's walk
of the first subject Python routed, for the stream's intake here or, on a server where
the stream's replica is not leading, for the leader's route. A bucket's keys after the
first then come out of the codec as runs to that sink."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from ingest.parser import fast, nats
from ingest.server.sublist import Sublist
from ingest.server.subscription import learn_intake_tail
from tests.parser.test_native_acks import connected

pytestmark = pytest.mark.skipif(fast.native is None, reason="the compiled extension is not built")

BUCKET = "$KV.b.>"
KEY = b"$KV.b.k1"


def replica(leading: bool) -> SimpleNamespace:
    """A stream's intake subscription; only the leader's is announced to the peers."""
    return SimpleNamespace(intake=object(), announced=leading)


def walked(*subs: tuple[str, str | None, object]) -> Sublist[Any]:
    """A sublist holding `subs`, with the first key routed once (its walk cached)."""
    sublist: Sublist[Any] = Sublist()
    for subject, queue, sub in subs:
        sublist.insert(subject, queue, sub)
    sublist.match(KEY)
    return sublist


def runs_for(routes: object, subject: bytes) -> list[object]:
    """The sink of each run the codec makes of two PUBs on `subject`, or the ops."""
    _, compiled = connected(routes)
    ops = compiled.receive(b"PUB %b 1\r\nx\r\nPUB %b 1\r\ny\r\n" % (subject, subject))  # type: ignore[attr-defined]
    return [getattr(op, "sink", type(op)) for op in ops]


def test_the_leaders_intake_takes_every_key_after_the_first() -> None:
    sub = replica(leading=True)
    sublist = walked((BUCKET, None, sub))
    learn_intake_tail(sublist.routes, sublist, KEY, lambda prefix: True)
    assert b"$KV.b" in sublist.routes
    assert runs_for(sublist.routes, b"$KV.b.k2") == [sub.intake]
    assert runs_for(sublist.routes, b"$KV.b.*") == [nats.Pub, nats.Pub]
    assert runs_for(sublist.routes, b"$KV.b.k2.x") == [nats.Pub, nats.Pub]


def test_a_follower_forwards_every_key_to_the_leaders_route() -> None:
    sink = object()
    sublist = walked((BUCKET, None, replica(leading=False)))
    asked: list[bytes] = []

    def forward(prefix: bytes) -> object:
        asked.append(prefix)
        return sink

    learn_intake_tail(sublist.routes, sublist, KEY, lambda prefix: False, forward)
    assert asked == [b"$KV.b"]
    assert runs_for(sublist.routes, b"$KV.b.k2") == [sink]


@pytest.mark.parametrize(
    "others",
    [
        [("$KV.b.*", None, object())],  # a client's subscription shares every key
        [("$KV.b.k9", None, object())],  # a literal key: the prefix decides no longer
        [("$KV.b.>", "q", object())],  # a queue group
    ],
)
def test_a_shared_prefix_is_not_learnt(others: list[tuple[str, str | None, object]]) -> None:
    sublist = walked((BUCKET, None, replica(leading=True)), *others)
    learn_intake_tail(sublist.routes, sublist, KEY, lambda prefix: True, lambda prefix: object())
    assert b"$KV.b" not in sublist.routes


def test_a_peer_that_wants_the_keys_keeps_them_from_the_leaders_table() -> None:
    """On the leader, a peer's interest under the prefix (a client subscribed on another
    server) means the keys must go through Python's forwarding; on a follower, no route
    taking them all leaves them to Python as well."""
    sublist = walked((BUCKET, None, replica(leading=True)))
    learn_intake_tail(sublist.routes, sublist, KEY, lambda prefix: False, lambda prefix: object())
    assert b"$KV.b" not in sublist.routes
    follower = walked((BUCKET, None, replica(leading=False)))
    learn_intake_tail(follower.routes, follower, KEY, lambda prefix: False, lambda prefix: None)
    assert b"$KV.b" not in follower.routes
