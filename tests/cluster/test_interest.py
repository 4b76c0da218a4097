"""The pure interest bookkeeping: which RS+/RS- lines go out, where a message is routed."""

from __future__ import annotations

from collections import Counter

from ingest.parser.routes import RouteCodec, RSub, RUnsub
from ingest.server.cluster.interest import LocalInterest, RemoteInterestMap


def lines(data: bytes | None) -> list[object]:
    return RouteCodec().receive(data) if data else []


def test_plain_interest_is_announced_once_and_withdrawn_with_the_last_subscriber() -> None:
    local = LocalInterest()
    assert lines(local.added("foo", None)) == [RSub("$G", "foo", None, 0)]
    assert local.added("foo", None) is None
    assert local.removed("foo", None) is None
    assert lines(local.removed("foo", None)) == [RUnsub("$G", "foo", None)]
    assert local.removed("foo", None) is None  # more removals than adds change nothing
    assert local.snapshot() == b""


def test_queue_weight_follows_the_member_count() -> None:
    local = LocalInterest()
    assert lines(local.added("work", "q")) == [RSub("$G", "work", "q", 1)]
    assert lines(local.added("work", "q")) == [RSub("$G", "work", "q", 2)]
    assert lines(local.removed("work", "q")) == [RSub("$G", "work", "q", 1)]
    local.added("foo", None)
    assert lines(local.snapshot()) == [RSub("$G", "work", "q", 1), RSub("$G", "foo", None, 0)]
    assert lines(local.removed("work", "q")) == [RUnsub("$G", "work", "q")]


def targets(remote: RemoteInterestMap[str], subject: bytes) -> dict[str, list[bytes]]:
    decision = remote.forwarding(subject)
    return {} if decision is None else decision.targets()


def test_plain_interest_reaches_every_peer_once() -> None:
    remote: RemoteInterestMap[str] = RemoteInterestMap()
    remote.add("A", "foo.*", None, 0)
    remote.add("A", "foo.bar", None, 0)
    remote.add("B", ">", None, 0)
    assert targets(remote, b"foo.bar") == {"A": [], "B": []}
    assert targets(remote, b"baz") == {"B": []}
    remote.drop("B")
    assert remote.forwarding(b"baz") is None
    remote.remove("A", "foo.*", None)
    assert targets(remote, b"foo.x") == {}
    assert remote.count("A") == 1 and remote.subjects("A") == ["foo.bar"]


def test_a_queue_group_goes_to_one_peer_by_weight() -> None:
    remote: RemoteInterestMap[str] = RemoteInterestMap()
    remote.add("A", "work", "q", 1)
    remote.add("B", "work", "q", 3)
    remote.add("B", "work", "other", 1)
    picks: Counter[str] = Counter()
    for _ in range(2000):
        groups = [(peer, q) for peer, qs in targets(remote, b"work").items() for q in qs]
        assert sorted(q for _, q in groups) == [b"other", b"q"]  # each group exactly once
        picks.update(peer for peer, q in groups if q == b"q")
    assert 0.65 < picks["B"] / 2000 < 0.85  # weight 3 against 1


def test_local_members_draw_alongside_the_peers() -> None:
    """Two members here, a weight of two on a peer: half the messages stay here."""
    remote: RemoteInterestMap[str] = RemoteInterestMap()
    remote.add("A", "work", "q", 2)
    remote.add("A", "work", "plain", 0)
    remote.remove("A", "work", "plain")
    here = 0
    for _ in range(2000):
        decision = remote.forwarding(b"work")
        assert decision is not None
        taken = decision.takes("q", 2)
        assert decision.takes("q", 2) is False  # a group is decided once per message
        assert decision.takes("unknown", 1) is False
        assert decision.targets() == ({"A": [b"q"]} if taken else {})
        here += not taken
    assert 0.4 < here / 2000 < 0.6


def test_weight_update_keeps_one_entry() -> None:
    remote: RemoteInterestMap[str] = RemoteInterestMap()
    remote.add("A", "work", "q", 1)
    remote.add("A", "work", "q", 5)
    assert remote.count("A") == 1
    remote.remove("A", "work", "q")
    assert remote.forwarding(b"work") is None


def test_a_twins_interest_passes_to_the_route_that_replaced_it() -> None:
    remote: RemoteInterestMap[str] = RemoteInterestMap()
    told: list[tuple[str, str, str | None, int]] = []
    remote.add("old", "inbox.1", None, 1)
    remote.add("old", "work", "q", 3)
    remote.add("new", "work", "q", 3)  # announced on the new route already
    remote.watch = lambda *change: told.append(change)
    moved = remote.transfer("old", "new")
    assert moved == {("$G", "inbox.1", None), ("$G", "work", "q")}
    assert targets(remote, b"inbox.1") == {"new": []}
    assert remote.count("old") == 0 and remote.count("new") == 2
    assert told == [("$G", "work", "q", -3)]  # only the twin's second copy of the group


def test_a_sole_peer_under_a_prefix_is_named_only_when_it_alone_takes_every_subject() -> None:
    """What the compiled table may learn for the server's replies to a peer's inbox: one
    peer with plain interest in every `prefix.<token>`, as the trie's last walk showed."""
    remote: RemoteInterestMap[str] = RemoteInterestMap()
    remote.add("B", "_INBOX.x.*", None, 0)
    assert remote.sole_peer_under(b"_INBOX.x") is None  # no walk yet
    assert targets(remote, b"_INBOX.x.1") == {"B": []}
    assert remote.sole_peer_under(b"_INBOX.x") == "B"
    assert remote.sole_peer_under(b"_INBOX.x", "OTHER") is None
    remote.add("B", "_INBOX.>", None, 0)  # the same peer twice over
    targets(remote, b"_INBOX.x.1")
    assert remote.sole_peer_under(b"_INBOX.x") == "B"
    remote.add("C", "_INBOX.x.*", None, 0)
    targets(remote, b"_INBOX.x.1")
    assert remote.sole_peer_under(b"_INBOX.x") is None  # two peers
    remote.drop("C")
    remote.add("C", "_INBOX.x.*", "q", 1)
    targets(remote, b"_INBOX.x.1")
    assert remote.sole_peer_under(b"_INBOX.x") is None  # a queue group
    remote.drop("C")
    remote.add("C", "_INBOX.x.7", None, 0)
    targets(remote, b"_INBOX.x.1")
    assert remote.sole_peer_under(b"_INBOX.x") is None  # a literal child splits the prefix


def test_a_sole_peer_of_a_subject_has_plain_interest_alone() -> None:
    """Where a follower's client's runs of PUBs may go in one write: the leader's route."""
    remote: RemoteInterestMap[str] = RemoteInterestMap()
    assert remote.sole_peer(b"orders.new") is None
    remote.add("B", "orders.*", None, 0)
    assert remote.sole_peer(b"orders.new") == "B"
    remote.add("B", "orders.new", None, 0)
    assert remote.sole_peer(b"orders.new") == "B"
    remote.add("C", ">", None, 0)
    assert remote.sole_peer(b"orders.new") is None
    remote.drop("C")
    remote.add("C", "orders.new", "workers", 1)
    assert remote.sole_peer(b"orders.new") is None


def test_a_sole_peer_below_a_prefix_takes_every_deeper_subject() -> None:
    """Where a client's acks to a consumer on a peer may go in one write."""
    remote: RemoteInterestMap[str] = RemoteInterestMap()
    remote.add("B", "$JS.ACK.S.C.>", None, 0)
    assert targets(remote, b"$JS.ACK.S.C.1.2.3.4.5") == {"B": []}
    assert remote.sole_peer_below(b"$JS.ACK.S.C") == "B"
    remote.add("C", "$JS.ACK.S.C.>", None, 0)
    targets(remote, b"$JS.ACK.S.C.1.2.3.4.5")
    assert remote.sole_peer_below(b"$JS.ACK.S.C") is None
