"""Acknowledged publishes to an R3 stream survive kills, pauses and partitions.

Three servers of one kind, each in its own network namespace; K writers publish
unique values while the nemesis runs a seeded schedule (kill -9 of a node and
of the leader, SIGSTOP/SIGCONT, a partition of a node and of the leader, and
for jetlake a power loss that drops unsynced writes); then the cluster must
converge as clients see it through every node, every node's copy is read by
direct gets through it (outside.py) and again from the node itself (jetlake's
from its files after a clean shutdown: workload.py), and all of it is checked
(see checker.py): zero lost, unexpected, duplicated or misplaced values, and
identical replicas. The CI run applies each fault kind once (about 50 s, 60 s
for jetlake); the soak run (``pytest -m soak tests/jepsen``) applies
``JEPSEN_FAULTS`` faults (default 40, about 6 minutes) with seed ``JEPSEN_SEED``
(default: random, printed).
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Sequence

import pytest

from tests.jepsen.checker import Attempt, NodeRead, Verdict, check
from tests.jepsen.cluster import NodeSet
from tests.jepsen.conftest import NODES
from tests.jepsen.faults import (
    ALL_KINDS,
    PORTABLE_KINDS,
    Fault,
    FaultKind,
    Nemesis,
    duration,
    schedule,
)
from tests.jepsen.outside import converge_outside, last_acked, read_outside
from tests.jepsen.workload import (
    Writers,
    client,
    converge,
    create_stream,
    read_nodes,
    stream_leader,
)

CI_SEED = 11
WRITERS = 4
RATE = 50.0  # publishes per second per writer
WARM_UP = 2.0  # seconds of writes before the first fault


def fault_kinds(nodes: NodeSet) -> tuple[FaultKind, ...]:
    return ALL_KINDS if nodes.power else PORTABLE_KINDS


async def run(nodes: NodeSet, faults: Sequence[Fault], seed: int) -> tuple[Verdict, str]:
    """Writers under the nemesis, recovery, convergence, a read of every node; the verdict."""
    async with client(nodes.urls, "jepsen-control") as control:
        await create_stream(control.jetstream(timeout=2), NODES)
        nemesis = Nemesis(nodes, lambda: stream_leader(control.jetstream(timeout=1)), seed)
        history: list[Attempt] = []
        stop = asyncio.Event()
        writing = asyncio.create_task(Writers(nodes.urls, WRITERS, RATE, history).run(stop))
        try:
            await asyncio.sleep(WARM_UP)
            await nemesis.run(faults)
        finally:
            await nemesis.recover()
            stop.set()
            await writing
        nemesis.note("writers stopped")
        took = await converge_outside(nodes, last_acked([a.seq for a in history]))
        nemesis.note(f"converged as every node's clients see it in {took:.1f}s")
        states = await converge(nodes)
        nemesis.note(f"converged in every node's /jsz: {states[nodes.names[0]]}")
        outside = await read_outside(nodes)
        nemesis.note("every node read by direct gets through it")
        reads: list[NodeRead] = await read_nodes(nodes)
        nemesis.note("every node's own copy read")
    for read in reads:
        held = states[read.node]["messages"]
        assert len(read.messages) == held, f"{read.node} read {len(read.messages)} of {held}"
    verdict = check(history, [*outside, *reads])
    logs = "\n".join(str(s.log_path) for s in nodes.servers)
    report = f"seed {seed}\n{verdict.summary()}\ntimeline:\n" + "\n".join(nemesis.timeline)
    return verdict, f"{report}\nserver logs:\n{logs}"


@pytest.mark.timeout(120)
async def test_acked_publishes_survive_every_fault(nodes: NodeSet) -> None:
    faults = schedule(CI_SEED, fault_kinds(nodes), nodes=NODES)
    assert duration(faults) < 60, "the CI schedule must leave room for setup and reads"
    verdict, report = await run(nodes, faults, CI_SEED)
    print(report)
    assert verdict.acked > 0, report
    assert verdict.valid, report


@pytest.mark.soak
@pytest.mark.timeout(1800)
async def test_soak(nodes: NodeSet) -> None:
    seed = int(os.environ.get("JEPSEN_SEED") or random.randrange(1 << 32))
    count = int(os.environ.get("JEPSEN_FAULTS", "40"))
    faults = schedule(seed, fault_kinds(nodes), nodes=NODES, count=count)
    verdict, report = await run(nodes, faults, seed)
    print(report)
    assert verdict.acked > 0, report
    assert verdict.valid, report
