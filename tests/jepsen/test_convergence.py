"""After one fault to the stream's leader, the cluster converges as its clients see it.

A fast writer (a publish every 2 ms, acknowledged) runs while the leader is
killed with SIGKILL or cut off by a partition; the writer stops, the fault is
undone, and then every node, asked alone by a client, must show one leader,
the other members current with the last acknowledged message, and must
answer a direct get of it; then every node's copy is read through it and
checked. How long convergence took is printed beside the reference's.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.jepsen.checker import Attempt, check
from tests.jepsen.cluster import NodeSet
from tests.jepsen.outside import converge_outside, last_acked, read_outside
from tests.jepsen.workload import Writers, client, create_stream, stream_leader
from tests.support.poll import poll_async

RATE = 500.0  # one writer, a publish every 2 ms
WRITING = 3.0  # seconds of writes before the fault, and again while it holds
LEADER_DEADLINE = 20.0
POLL = 0.2

pytestmark = pytest.mark.timeout(150)


async def leader_index(nodes: NodeSet, js: object) -> int:
    leader = await poll_async(
        lambda: stream_leader(js),  # type: ignore[arg-type]
        "a stream leader elected",
        LEADER_DEADLINE,
        interval=POLL,
    )
    return nodes.index(leader)


async def scenario(nodes: NodeSet, fault: str) -> str:
    async with client(nodes.urls, "convergence-control") as control:
        js = control.jetstream(timeout=2)
        await create_stream(js, len(nodes.servers))
        history: list[Attempt] = []
        stop = asyncio.Event()
        writing = asyncio.create_task(Writers(nodes.urls, 1, RATE, history).run(stop))
        await asyncio.sleep(WRITING)
        target = await leader_index(nodes, js)
        server = nodes.servers[target]
        if fault == "kill":
            await asyncio.to_thread(server.kill)
        else:
            await asyncio.to_thread(nodes.lab.isolate, target)
        await asyncio.sleep(WRITING)
        stop.set()
        await writing
        if fault == "kill":  # restarted once the writer stopped: it must catch up alone
            await asyncio.to_thread(server.start, port=server.port)
        else:
            await asyncio.to_thread(nodes.lab.heal)
        took = await converge_outside(nodes, last_acked([a.seq for a in history]))
        verdict = check(history, await read_outside(nodes))
    report = (
        f"{nodes.kind}: {fault} of leader {nodes.names[target]}, converged through every node "
        f"{took:.1f}s after recovery\n{verdict.summary()}"
    )
    print(report)
    assert verdict.acked > 0, report
    assert verdict.valid, report
    return report


async def test_converges_after_the_leader_is_killed_and_restarted(nodes: NodeSet) -> None:
    await scenario(nodes, "kill")


async def test_converges_after_the_leader_is_partitioned_and_healed(nodes: NodeSet) -> None:
    await scenario(nodes, "partition")
