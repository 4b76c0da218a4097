"""Scripted runs of the simulator: situations that broke real Raft implementations.

The random scenarios reach these only by luck; here each is driven on purpose,
with every invariant still checked after every tick, and the outcome asserted.
"""

from __future__ import annotations

import random

import pytest

from consensus.sim.cluster import Cluster, Faults, Scenario, Workload
from consensus.sim.invariants import Violation, WindowLoss
from consensus.sim.network import NetworkConfig
from consensus.sim.node import SimNode
from consensus.sim.runner import check_durability
from consensus.types import ConfChange, ConfOp, NotCaughtUpError, RaftError

QUIET = NetworkConfig(drop=0, duplicate=0, max_delay=1)
BOUND = 300  # ticks for anything that should take a few election timeouts


def quiet_cluster(nodes: int = 3, seed: int = 1, **options: object) -> Cluster:
    """A cluster with no random faults or load: the test is the only actor."""
    scenario = Scenario("scripted", nodes=nodes, net=QUIET, faults=Faults(), **options)  # type: ignore[arg-type]
    cluster = Cluster(scenario, seed)
    cluster.calm = True
    cluster.run_until(lambda: cluster.leader() is not None, BOUND, "a first leader")
    return cluster


def leader(cluster: Cluster) -> SimNode:
    node = cluster.leader()
    assert node is not None and node.core is not None
    return node


def commit(cluster: Cluster, count: int) -> list[bytes]:
    """Propose `count` values on whoever leads and wait until each is acknowledged."""
    values = []
    for _ in range(count):
        value = cluster.propose(leader(cluster))
        assert value is not None
        values.append(value)
    cluster.run_until(lambda: all(v in cluster.checker.acked for v in values), BOUND, "acks")
    return values


def change(cluster: Cluster, op: ConfOp, node: str) -> None:
    """Propose a membership change (retrying while the leader says not yet) until it commits."""

    def done() -> bool:
        conf = leader(cluster).core.conf  # type: ignore[union-attr]
        if op is ConfOp.ADD_LEARNER:
            return node in conf.learners
        if op is ConfOp.PROMOTE:
            return node in conf.voters
        return node not in conf.voters | conf.learners

    def attempt() -> bool:
        if not done():
            lead = leader(cluster)
            try:
                lead.core.propose_conf_change(ConfChange(op, node))  # type: ignore[union-attr]
                lead.handle_ready()
            except (NotCaughtUpError, RaftError):
                pass
        return done()

    cluster.run_until(attempt, BOUND, f"{op.name} {node}")


def test_membership_change_while_a_voter_is_partitioned_away() -> None:
    cluster = quiet_cluster(nodes=3)
    first = commit(cluster, 5)
    lead = leader(cluster)
    cut = next(n for n in cluster.bootstrap if n != lead.id)
    names = set(cluster.nodes)
    cluster.net.partition({cut}, names | {"n3"})
    cluster.nodes["n3"] = joiner = cluster._make_node("n3")
    joiner.start(cluster.bootstrap)
    change(cluster, ConfOp.ADD_LEARNER, "n3")
    change(cluster, ConfOp.PROMOTE, "n3")
    change(cluster, ConfOp.REMOVE, cut)
    during = commit(cluster, 5)
    cluster.net.heal()
    after = commit(cluster, 5)
    cluster.run_until(lambda: joiner.sm.index >= leader(cluster).core.commit, BOUND, "catch up")  # type: ignore[union-attr]
    assert set(first + during + after) <= joiner.sm.values
    assert leader(cluster).core.conf.voters == (names - {cut}) | {"n3"}  # type: ignore[union-attr]
    # The removed voter never led after its removal (it could not win a vote).
    assert all(n != cut for t, n in cluster.checker.leaders.items() if t > 1)


def test_leader_transfer_under_load_loses_nothing() -> None:
    cluster = quiet_cluster(nodes=3)
    old = leader(cluster)
    target = next(n for n in sorted(cluster.nodes) if n != old.id)
    refused = 0
    for tick in range(200):
        lead = cluster.leader()
        if lead is not None and lead.core is not None:
            if tick == 50:
                lead.core.transfer_leadership(target)
                lead.handle_ready()
            if cluster.propose(lead) is None:
                refused += 1  # NotLeaderError: a transferring leader takes no proposals
        cluster.step()
    assert refused >= 1  # the proposal right after the transfer began
    assert leader(cluster).id == target
    assert cluster.checker.leaders.get(max(cluster.checker.leaders)) == target
    cluster.settle(BOUND)
    check_durability(cluster)
    assert len(cluster.checker.acked) > 100


def test_snapshot_install_to_a_lagging_follower() -> None:
    cluster = quiet_cluster(nodes=3, work=Workload(snapshot_every=10))
    lead = leader(cluster)
    lagging = cluster.nodes[next(n for n in sorted(cluster.nodes) if n != lead.id)]
    cluster.kill(lagging)
    values = commit(cluster, 60)  # the leader compacts past everything the laggard has
    cluster.restart(lagging)
    cluster.run_until(lambda: lagging.sm.index >= leader(cluster).core.commit, BOUND, "catch up")  # type: ignore[union-attr]
    assert lagging.installed >= 1
    assert set(values) <= lagging.sm.values
    assert lagging.sm.digest == leader(cluster).sm.digest


class _LoseAllUnsynced(random.Random):
    """A power loss that keeps nothing the OS had not synced."""

    def randint(self, a: int, b: int) -> int:
        return a


def _ack_on_leader_and_keeper(cluster: Cluster) -> tuple[SimNode, str, str, bytes]:
    """Everything so far synced; then one value that only the leader and `keeper` hold,
    unsynced (`other` is cut off from the leader). Returns leader, keeper, other, value."""
    commit(cluster, 3)
    for node in cluster.nodes.values():
        node.disk.sync()
    lead = leader(cluster)
    keeper, other = (n for n in sorted(cluster.nodes) if n != lead.id)
    cluster.net.cut(lead.id, other)  # `other` does not hear of the next entry
    [value] = commit(cluster, 1)
    cluster.rng = _LoseAllUnsynced()
    return lead, keeper, other, value


def test_window_mode_a_leader_power_loss_loses_nothing_acknowledged() -> None:
    """The sync window's hole, closed: the leader acknowledges an entry that it and one
    follower hold unsynced, then loses power (one node: a minority) and comes back
    without it, with nothing in its log to say so. It is held, so it cannot elect
    the third node, which never got the entry: no leader until the follower that
    has it is back, and then the entry survives everywhere."""
    cluster = quiet_cluster(nodes=3, sync_window=1000)
    lead, keeper, other, value = _ack_on_leader_and_keeper(cluster)
    cluster.power_off(lead, torn=False)
    cluster.net.heal()
    cluster.net.partition({keeper}, set(cluster.nodes))
    cluster.restart(lead)
    assert lead.core is not None and lead.core.held_back and lead.floor == 0
    for _ in range(BOUND):
        cluster.step()
        assert cluster.leader() is None, "a leader elected with the held node's vote"
    cluster.net.heal()
    cluster.run_until(lambda: value in cluster.nodes[other].sm.values, BOUND, "the entry")
    cluster.settle(BOUND)
    check_durability(cluster)
    assert not lead.core.held_back and not lead.disk.power_held  # a newer term let it go
    assert not cluster.checker.lost_by_majority


def test_window_mode_a_majority_power_loss_still_elects_a_leader() -> None:
    """Two of three lose power at once with everything synced: both are held, and the
    held path elects one of them (nobody unheld could be elected by a majority)."""
    cluster = quiet_cluster(nodes=3, sync_window=1000)
    values = commit(cluster, 3)
    for node in cluster.nodes.values():
        node.disk.sync()
    lead = leader(cluster)
    keeper, _ = (n for n in sorted(cluster.nodes) if n != lead.id)
    cluster.power_off(lead, torn=False)
    cluster.power_off(cluster.nodes[keeper], torn=False)
    cluster.restart(lead)
    cluster.restart(cluster.nodes[keeper])
    assert all(cluster.nodes[n].core.held_back for n in (lead.id, keeper))  # type: ignore[union-attr]
    cluster.settle(BOUND)
    check_durability(cluster)
    assert set(values) <= leader(cluster).sm.values
    assert cluster.events["majority held back at once"] == 1
    assert not any(n.disk.power_held for n in cluster.nodes.values())


def test_window_mode_a_majority_power_loss_loses_only_the_window() -> None:
    """The same hole with the follower that had the entry losing power too: a majority
    lost it at once, which the promise allows. The group elects a leader anyway and
    the checker reports the loss as the window's (a WindowLoss, not a Violation)."""
    cluster = quiet_cluster(nodes=3, sync_window=1000)
    lead, keeper, _, value = _ack_on_leader_and_keeper(cluster)
    cluster.power_off(lead, torn=False)
    cluster.power_off(cluster.nodes[keeper], torn=False)
    cluster.net.heal()
    cluster.restart(lead)
    cluster.restart(cluster.nodes[keeper])
    with pytest.raises(WindowLoss, match="leader completeness"):
        cluster.run_until(lambda: False, BOUND, "the loss to show")
    assert cluster.leader() is not None
    ack = cluster.checker.acked[value]
    assert (ack.index, ack.term) in cluster.checker.lost_by_majority


def test_window_mode_a_minority_loss_the_checker_refuses_to_excuse() -> None:
    """The checker's side of the promise: an entry only a minority of power losses took
    is never excused as the window's, even if a run loses it."""
    cluster = quiet_cluster(nodes=3, sync_window=1000)
    lead, _, _, value = _ack_on_leader_and_keeper(cluster)
    cluster.power_off(lead, torn=False)
    ack = cluster.checker.acked[value]
    assert (ack.index, ack.term) in lead.disk.lost
    assert not cluster.checker.lost_by_majority
    with pytest.raises(Violation):
        cluster.checker.fail("durability", [(ack.index, ack.term)])


def test_always_mode_the_same_power_loss_loses_nothing() -> None:
    """The same schedule with an fsync per Ready: the entry survives on the leader."""
    cluster = quiet_cluster(nodes=3)
    commit(cluster, 3)
    lead = leader(cluster)
    keeper, other = (n for n in sorted(cluster.nodes) if n != lead.id)
    cluster.net.cut(lead.id, other)
    [value] = commit(cluster, 1)
    cluster.rng = _LoseAllUnsynced()
    cluster.power_off(lead, torn=False)
    cluster.net.heal()
    cluster.net.partition({keeper}, set(cluster.nodes))
    cluster.restart(lead)
    cluster.run_until(lambda: value in cluster.nodes[other].sm.values, BOUND, "the entry")
    cluster.settle(BOUND)
    check_durability(cluster)


def test_a_follower_whose_disk_lost_acknowledged_entries_is_refilled() -> None:
    """A bit flip cuts a follower's log below what the leader saw it acknowledge; the
    leader's record of the follower (its match) is then too high, and the leader must
    notice the follower's rejections and send the missing entries again."""
    cluster = quiet_cluster(nodes=3)
    values = commit(cluster, 20)
    lead = leader(cluster)
    follower = cluster.nodes[next(n for n in sorted(cluster.nodes) if n != lead.id)]
    rng = random.Random(4)
    while (index := follower.disk.flip(rng)) is None or index > 10:
        pass  # a hard-state copy, or an entry too near the end to make the point
    cluster.kill(follower)
    cluster.restart(follower)
    assert follower.floor >= 20  # recovery cut the log, so it may not vote until refilled
    more = commit(cluster, 5)
    cluster.run_until(lambda: follower.sm.index >= leader(cluster).core.commit, BOUND, "refill")  # type: ignore[union-attr]
    assert set(values + more) <= follower.sm.values
    assert follower.floor == 0
