"""Spare followers (`Config.spare_batch`): new entries go at once only to the followers a
commit needs, the others get them in batches or at their next heartbeat's answer, and a
follower that stops answering hands its place to one that does."""

from __future__ import annotations

from consensus.types import ConfChange, ConfOp, MessageType
from tests.consensus.scripts.net import Net

T = MessageType
BATCH = 4


def appends_with_entries(net: Net, start: int) -> dict[str, list[int]]:
    """For each follower, the entry counts of the APPENDs sent to it since `start`."""
    sent: dict[str, list[int]] = {}
    for msg in net.sent[start:]:
        if msg.type == T.APPEND and msg.entries:
            sent.setdefault(msg.dst, []).append(len(msg.entries))
    return sent


def committed_at_once(net: Net, leader: str, payload: bytes) -> int:
    """Propose and deliver until quiet, no tick: the leader's commit afterwards."""
    index = net.propose(leader, payload)
    net.stabilize()
    assert net.nodes[leader].status()["commit"] >= index, f"{payload!r} did not commit"
    return index


def test_one_follower_gets_each_entry_the_other_a_batch_at_a_time() -> None:
    net = Net("abc", lazy_commit=True, spare_batch=BATCH)
    net.elect("a")
    net.heartbeat()
    start = len(net.sent)
    for n in range(3 * BATCH):
        committed_at_once(net, "a", b"m%d" % n)
    sent = appends_with_entries(net, start)
    assert sorted(sent.values(), key=len) == [[BATCH] * 3, [1] * (3 * BATCH)], sent
    net.heartbeat()
    assert net.items("b") == net.items("c") == net.items("a")
    assert len(net.items("a")) == 3 * BATCH


def test_a_spare_follower_gets_what_it_lacks_at_its_next_heartbeat_answer() -> None:
    net = Net("abc", lazy_commit=True, spare_batch=BATCH)
    net.elect("a")
    net.heartbeat()
    for n in range(BATCH - 1):
        committed_at_once(net, "a", b"m%d" % n)
    peers = net.status_peers("a")
    last = net.nodes["a"].status()["last_index"]
    assert sorted(peers.values()) == [last - (BATCH - 1), last], peers  # one waits
    net.heartbeat()
    assert set(net.status_peers("a").values()) == {last}


def test_when_the_eager_follower_goes_quiet_the_spare_one_takes_its_place() -> None:
    net = Net("abc", lazy_commit=True, spare_batch=BATCH)
    net.elect("a")
    net.heartbeat()
    committed_at_once(net, "a", b"first")
    eager = next(m.dst for m in reversed(net.sent) if m.type == T.APPEND and m.entries)
    spare = ({"b", "c"} - {eager}).pop()
    net.isolate(eager)
    net.cut.discard(frozenset(("a", spare)))  # only the eager follower is cut off

    index = net.propose("a", b"stalled")
    net.stabilize()
    assert net.nodes["a"].status()["commit"] < index  # its only copy went to the silent one
    net.heartbeat()  # the spare one's answer brings it the entry: a quorum holds it
    assert net.nodes["a"].status()["commit"] >= index

    start = len(net.sent)
    for n in range(BATCH):  # from here each commits without waiting for a tick
        committed_at_once(net, "a", b"after%d" % n)
    to_spare = appends_with_entries(net, start)
    assert to_spare.get(spare) == [1] * BATCH, to_spare


def test_five_voters_wait_for_two_followers_and_batch_the_other_two() -> None:
    net = Net("abcde", lazy_commit=True, spare_batch=BATCH)
    net.elect("a")
    net.heartbeat()
    start = len(net.sent)
    for n in range(BATCH):
        committed_at_once(net, "a", b"m%d" % n)
    sent = appends_with_entries(net, start)
    assert sorted(sent.values(), key=len) == [[BATCH], [BATCH], [1] * BATCH, [1] * BATCH], sent


def test_without_spare_batch_every_follower_gets_each_entry() -> None:
    net = Net("abc", lazy_commit=True)
    net.elect("a")
    net.heartbeat()
    start = len(net.sent)
    for n in range(BATCH):
        committed_at_once(net, "a", b"m%d" % n)
    assert appends_with_entries(net, start) == {"b": [1] * BATCH, "c": [1] * BATCH}


def test_a_learner_gets_each_entry_at_once() -> None:
    """Promotion waits for a learner to hold the commit: a batch would put it off."""
    net = Net("abc", lazy_commit=True, spare_batch=BATCH)
    net.elect("a")
    net.add("d", voters="abc")
    net.change("a", ConfChange(ConfOp.ADD_LEARNER, "d"))
    net.heartbeat()
    assert net.nodes["a"].conf.learners == frozenset("d")
    start = len(net.sent)
    for n in range(BATCH):
        committed_at_once(net, "a", b"m%d" % n)
    sent = appends_with_entries(net, start)
    assert sent["d"] == [1] * BATCH, sent
    assert sorted((sent[p] for p in "bc"), key=len) == [[BATCH], [1] * BATCH], sent
