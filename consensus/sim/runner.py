"""One seeded simulation run, start to verdict, and the durability promise it checks.

The promise, per sync mode (what docs/durability.md states):
- kill -9 of any number of nodes loses nothing, in either mode;
- under `always`, power loss of any number of nodes (all at once included)
  loses nothing;
- under a window of W ticks, power losses of any minority of the voters lose
  nothing acknowledged, however many follow one another: a node that lost
  power is held (no ordinary vote) until its log holds an entry of a later
  term, as a node whose disk was damaged is until it is refilled;
- a majority held back at once (power losses under a window, or damaged
  disks, before the first of them caught up) may lose what they lost; the
  group still elects a leader. The checker allows exactly that: a broken
  property whose entries are all ones such a majority lost ends the run as a
  WindowLoss; anything else is a Violation.
"""

from __future__ import annotations

from dataclasses import dataclass

from consensus.sim.cluster import Cluster, Scenario
from consensus.sim.invariants import WindowLoss

SETTLE_TICKS = 500  # heal -> leader -> committed proposal -> all caught up (seen: < 100)


@dataclass(frozen=True, slots=True)
class Outcome:
    seed: int
    ticks: int
    acked: int
    reads: int
    terms: int
    settle_ticks: int
    events: dict[str, int]


def run(scenario: Scenario, seed: int) -> Outcome:
    """Run `scenario` from `seed`; raises Violation on any broken property.

    A WindowLoss (see the module's docstring) ends the run early, counted in its events.
    """
    cluster = Cluster(scenario, seed)
    settle = 0
    try:
        for _ in range(scenario.ticks):
            cluster.step()
        settle = cluster.settle(SETTLE_TICKS)
        check_durability(cluster)
    except WindowLoss:
        cluster.events["window loss (allowed)"] += 1
    c = cluster.checker
    events = dict(cluster.events)
    events["snapshot installed"] = sum(n.installed for n in cluster.nodes.values())
    return Outcome(seed, cluster.now, len(c.acked), c.reads_checked, len(c.leaders), settle, events)


def check_durability(cluster: Cluster) -> None:
    """Every acknowledged value is in every member's state after recovery."""
    leader = cluster.leader()
    assert leader is not None and leader.core is not None
    conf = leader.core.conf
    acked = cluster.checker.acked
    for name in sorted(conf.voters | conf.learners):
        lost = [v for v in acked if v not in cluster.nodes[name].sm.values]
        if lost:
            cluster.checker.fail(
                f"durability: {name} lacks acknowledged {sorted(lost)[:3]} "
                f"({len(lost)} in all) after recovery",
                [(acked[v].index, acked[v].term) for v in lost],
            )
