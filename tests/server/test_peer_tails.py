"""The compiled table's replies to a peer's inboxes: the server's own messages (PubAcks
to a client on another server) framed as RMSGs, a run of them handed to the route in
one call, with the bytes the Python path (`encode_rmsg`) sends; and a follower's
client's run of PUBs forwarded to the leader's route the same way."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import pytest

from ingest.parser import fast
from ingest.parser.routes import RMsg, RouteCodec, encode_rmsg
from ingest.server.cluster.route import Route as RouteLink

pytestmark = pytest.mark.skipif(fast.native is None, reason="the compiled extension is not built")


class Route:
    def __init__(self) -> None:
        self.runs: list[tuple[bytes, int, int]] = []

    def send_run(self, data: bytes, msgs: int, size: int) -> None:
        self.runs.append((data, msgs, size))


def rmsg(subject: bytes, payload: bytes, reply: bytes = b"") -> bytes:
    return encode_rmsg(b"$G", subject, reply, [], None, payload)


def table(*learnt: tuple[bytes, Route]) -> object:
    assert fast.native is not None
    routes = fast.native.Routes()
    for prefix, route in learnt:
        routes.learn_peer_tail(prefix, b"$G", route)
    return routes


def test_a_run_of_replies_goes_to_its_route_in_one_call_up_to_one_python_routes() -> None:
    a, b = Route(), Route()
    routes = table((b"_INBOX.a", a), (b"_INBOX.b", b), (b"_INBOX.c", a))
    answers = [
        (b"_INBOX.a.1", b"one"),
        (b"_INBOX.b.1", b"two"),
        (b"_INBOX.c.1", b"three"),
        (b"_INBOX.a.2", b"four"),
        (b"other.1", b"five"),  # unknown: Python routes it
        (b"_INBOX.a.3", b"six"),
    ]
    assert routes.deliver_tails(answers, 0) == (4, 15, 4, 15)
    expected = rmsg(b"_INBOX.a.1", b"one") + rmsg(b"_INBOX.c.1", b"three")
    assert a.runs == [(expected + rmsg(b"_INBOX.a.2", b"four"), 3, 12)]
    assert b.runs == [(rmsg(b"_INBOX.b.1", b"two"), 1, 3)]
    assert routes.deliver_tails(answers, 5) == (1, 3, 1, 3)
    assert a.runs[-1] == (rmsg(b"_INBOX.a.3", b"six"), 1, 3)
    assert RouteCodec().receive(a.runs[0][0])[1] == RMsg(
        "$G", b"_INBOX.c.1", b"", (), None, b"three"
    )


def test_what_came_from_a_peer_never_goes_to_another() -> None:
    a = Route()
    routes = table((b"_INBOX.a", a))
    assert routes.deliver_tails([(b"_INBOX.a.1", b"x")], 0, peers=False) == (0, 0, 0, 0)
    assert routes.deliver_tail(b"_INBOX.a.1", b"", None, b"x", False) is None
    assert a.runs == []


def test_one_reply_keeps_its_reply_subject_and_headers_go_to_python() -> None:
    a = Route()
    routes = table((b"_INBOX.a", a))
    assert routes.deliver_tail(b"_INBOX.a.1", b"r.1", None, b"x") == 1
    assert a.runs == [(rmsg(b"_INBOX.a.1", b"x", b"r.1"), 1, 1)]
    assert routes.deliver_tail(b"_INBOX.a.1", b"", b"NATS/1.0\r\n\r\n", b"x") is None
    for last in (b"*", b">", b""):  # the sublist's tail rule leaves these to a walk
        assert routes.deliver_tail(b"_INBOX.a." + last, b"", None, b"x") is None
    assert len(a.runs) == 1


def test_interest_changing_forgets_the_routes() -> None:
    a = Route()
    routes = table((b"_INBOX.a", a))
    assert b"_INBOX.a" in routes
    routes.clear(False)
    assert b"_INBOX.a" not in routes
    assert routes.deliver_tail(b"_INBOX.a.1", b"", None, b"x") is None


def test_a_clients_run_forwarded_to_the_leaders_route_is_the_rmsgs_python_sends() -> None:
    route = Route()
    server = SimpleNamespace(out_msgs=0, out_bytes=0)
    link = SimpleNamespace(send_run=route.send_run, cluster=SimpleNamespace(server=server))
    link.forward_acks = partial(RouteLink.forward_acks, link)
    RouteLink.forward_run(link, b"$G", b"orders", [b"", b"_INBOX.a.1"], [b"x", b""])  # type: ignore[arg-type]
    data = rmsg(b"orders", b"x") + rmsg(b"orders", b"", b"_INBOX.a.1")
    assert route.runs == [(data, 2, 1)]
    assert (server.out_msgs, server.out_bytes) == (2, 1)


def test_acks_a_peer_routed_go_to_their_consumers_sinks_in_runs() -> None:
    assert fast.native is not None
    routes = fast.native.Routes()
    calls: list[tuple[str, list[int]]] = []
    routes.learn_acks(b"$JS.ACK.S.A.", lambda seqs: calls.append(("A", seqs)))
    routes.learn_acks(b"$JS.ACK.S.B.", lambda seqs: calls.append(("B", seqs)))
    acks = [
        (b"$JS.ACK.S.A.1.10.1.0.5", b""),
        (b"$JS.ACK.S.A.1.11.2.0.4", b"+ACK"),
        (b"$JS.ACK.S.B.2.12.7.0.3", b""),
        (b"$JS.ACK.S.A.1.13.3.0.2", b""),
        (b"$JS.ACK.S.A.1.14.4.0.1", b"-NAK"),  # not a plain ack: Python's
        (b"$JS.ACK.S.A.1.15.5.0.0", b""),
    ]
    assert routes.take_acks(acks) == 4
    assert calls == [("A", [1, 10, 1, 1, 11, 2]), ("B", [2, 12, 7]), ("A", [1, 13, 3])]
    assert routes.take_acks([(b"$JS.ACK.S.C.1.1.1.0.0", b"")]) == 0  # not learnt


def test_a_clients_plain_acks_to_a_consumer_on_a_peer_are_one_route_write() -> None:
    """The codec gathers a read's plain acks under a prefix learnt for a peer into one
    `AckRun` carrying their RMSGs; an ack with a reply, a +NAK, or one after an
    operation for Python stays a `Pub` for Python to route."""
    assert fast.native is not None
    route = Route()
    routes = table()
    routes.learn_peer_acks(b"$JS.ACK.S.C.", b"$G", route)
    codec = fast.server_codec(max_control_line=4096, max_payload=1 << 20)
    codec.route_with(routes, False)
    acks = [b"$JS.ACK.S.C.1.%d.%d.0.0" % (n, n) for n in (1, 2, 3)]
    data = b"".join(b"PUB %b 0\r\n\r\n" % a for a in acks)
    data += b"PUB $JS.ACK.S.C.1.4.4.0.0 r 0\r\n\r\nPUB $JS.ACK.S.C.1.5.5.0.0 4\r\n+NAK\r\n"
    ops = codec.receive(data)
    run = ops[0]
    assert run.sink is route and run.seqs == [1, 1, 1, 1, 2, 2, 1, 3, 3]
    assert run.frames == b"".join(rmsg(a, b"") for a in acks)
    assert [type(op).__name__ for op in ops[1:]] == ["Pub", "Pub"]
