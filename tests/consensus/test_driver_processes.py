"""Three node processes; the leader is SIGKILLed mid-stream: every acked entry survives."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from consensus.node_client import Client, NodeProcess, NodeProcessError, start_group
from tests.support.poll import poll_async

IDS = ("p1", "p2", "p3")
TICK = "0.02"
TOTAL = 3000
WINDOW = 200
KILL_AFTER = 500  # acks before the kill: the rest are in flight or not yet sent


async def find_leader(clients: dict[str, Client]) -> str:
    found: list[str] = []
    statuses: list[dict[str, object]] = []

    async def probe() -> bool:
        statuses[:] = [await c.status() for c in clients.values()]
        leaders = [str(s["id"]) for s in statuses if s["role"] == "LEADER"]
        found[:] = leaders
        return len(leaders) == 1

    await poll_async(probe, lambda: f"a single leader among {statuses}", 15)
    return found[0]


async def journal(client: Client) -> list[str]:
    """The node's journal once it applied everything committed when asked."""
    await asyncio.wait_for(client.send("r"), 10)  # waits for a leader if none is known yet
    listed = await client.send("l")
    return listed.split() if listed else []


@pytest.mark.parametrize("sync", ["10000000", "always"], ids=["window", "always"])
async def test_every_acked_entry_survives_kill_9_of_the_leader(tmp_path: Path, sync: str) -> None:
    nodes = await start_group(tmp_path, IDS, ["--sync", sync, "--tick", TICK])
    procs = {n.id: n for n in nodes}
    clients = {n.id: await Client.connect(n.client_port) for n in nodes}
    try:
        leader = await find_leader(clients)
        acked: list[str] = []
        refused = 0
        slots = asyncio.Semaphore(WINDOW)

        async def one(payload: str) -> None:
            nonlocal refused
            try:
                await clients[leader].send("p", payload)
                acked.append(payload)
            except NodeProcessError:  # killed before its commit: unknown, may or may not survive
                refused += 1
            finally:
                slots.release()

        tasks = []
        for i in range(TOTAL):
            await slots.acquire()
            tasks.append(asyncio.ensure_future(one(f"{i:08x}")))
            if len(acked) >= KILL_AFTER and procs[leader].proc.returncode is None:  # type: ignore[union-attr]
                await procs[leader].kill()
                break
        await asyncio.gather(*tasks)
        assert len(acked) >= KILL_AFTER and refused > 0  # the kill landed mid-stream
        survivors = {n: c for n, c in clients.items() if n != leader}
        await find_leader(survivors)
        for name, client in survivors.items():
            held = await journal(client)
            assert len(held) == len(set(held)), f"{name} applied an entry twice"
            missing = set(acked) - set(held)
            assert not missing, f"{name} lost {len(missing)} acked entries"
        await clients.pop(leader).close()
        restarted = procs[leader]
        await restarted.start(IDS)
        restarted.connect({n.id: ("127.0.0.1", n.raft_port) for n in nodes})
        clients[leader] = await Client.connect(restarted.client_port)
        reference = await journal(next(iter(survivors.values())))
        caught_up: list[str] = []

        async def poll() -> None:
            caught_up[:] = (await clients[leader].send("l")).split()

        async def converged() -> bool:
            await poll()
            return len(caught_up) >= len(reference)

        await poll_async(converged, "the restarted node caught up", 10)
        assert caught_up[: len(reference)] == reference
    finally:
        for client in clients.values():
            await client.close()
        for node in nodes:
            with contextlib.suppress(ProcessLookupError):
                await node.stop()


async def test_a_node_process_names_its_failure_to_start(tmp_path: Path) -> None:
    node = NodeProcess("x", tmp_path / "x", ["--tick", "not-a-number"])
    with pytest.raises(NodeProcessError, match=r"(?s)did not start.*--tick"):
        await node.start(["x"])


async def test_a_group_of_one_process_answers_and_refuses_bad_requests(tmp_path: Path) -> None:
    [node] = await start_group(tmp_path, ("solo",), ["--tick", TICK])
    client = await Client.connect(node.client_port)
    try:
        assert await find_leader({"solo": client}) == "solo"
        await client.send("p", b"hi".hex())
        assert await journal(client) == [b"hi".hex()]
        with pytest.raises(NodeProcessError, match="ValueError"):
            await client.send("p", "zz")
        with pytest.raises(NodeProcessError, match="unknown verb"):
            await client.send("q")
        assert (await client.status())["applied"] == 2  # the leader's no-op, then "hi"
    finally:
        await client.close()
        await node.stop()
