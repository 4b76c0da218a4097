"""Three node processes with real logs; the leader loses power right after acknowledging
entries nobody has fsynced yet (JETLAKE_SYNC_RECORD and JETLAKE_BOOT_ID_FILE stand in
for the plug: see consensus.power_loss). Every acknowledged entry survives.

The schedule is the sync window's worst case: the leader and one follower acknowledged
the entries between them (the third node was not running), then the leader's power goes
and the follower is killed (kill -9: it keeps what it wrote). The leader comes back with
a clean, shorter log and the third node with an empty one: they are a majority, and
the leader's vote would elect a log without the entries. Held after its reboot, it
gives none until the follower is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

from consensus.log_store import HOLD
from consensus.node_client import Client, NodeProcess
from consensus.power_loss import BOOT_ID_ENV, SYNC_RECORD_ENV, power_cut
from tests.consensus.test_driver_processes import find_leader, journal
from tests.support.poll import poll_async

IDS = ("p1", "p2", "p3")
# A window far longer than the test: nothing acknowledged is fsynced before the cut
# (only what an election forces: a term and a vote, and whatever was written then).
ARGS = ["--sync", str(60 * 10**9), "--tick", "0.02"]
ACKED = 200
HELD_SECONDS = 1.0  # several election timeouts (0.2-0.4 s at this tick)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wal_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.wal"))


async def test_acknowledged_entries_survive_a_power_loss_of_the_leader(tmp_path: Path) -> None:
    env = {
        n: {BOOT_ID_ENV: str(tmp_path / f"{n}.boot"), SYNC_RECORD_ENV: str(tmp_path / f"{n}.sync")}
        for n in IDS
    }
    for n in IDS:
        (tmp_path / f"{n}.boot").write_text("boot-1\n")
    procs = {n: NodeProcess(n, tmp_path / n, ARGS, env[n]) for n in IDS}
    addresses = {"p3": ("127.0.0.1", free_port())}  # p3 is not running yet
    for n in ("p1", "p2"):
        await procs[n].start(IDS)
        addresses[n] = ("127.0.0.1", procs[n].raft_port)
    for n in ("p1", "p2"):
        procs[n].connect(addresses)
    clients = {n: await Client.connect(procs[n].client_port) for n in ("p1", "p2")}
    try:
        lead = await find_leader(clients)
        follower = "p2" if lead == "p1" else "p1"
        payloads = [f"{i:08x}" for i in range(ACKED)]
        await asyncio.gather(*(clients[lead].send("p", p) for p in payloads))

        await procs[lead].kill()
        await procs[follower].kill()
        before = wal_bytes(procs[lead].dir)
        assert power_cut(tmp_path / f"{lead}.sync", tmp_path / f"{lead}.boot") == [procs[lead].dir]
        assert wal_bytes(procs[lead].dir) < before  # the cut took acknowledged entries
        for client in clients.values():
            await client.close()

        await procs["p3"].start(IDS, raft_port=addresses["p3"][1])
        await procs[lead].start(IDS)
        for n in ("p3", lead):
            procs[n].connect(addresses)
        clients = {n: await Client.connect(procs[n].client_port) for n in ("p3", lead)}
        assert (await clients[lead].status())["held"] is True
        loop = asyncio.get_running_loop()
        end = loop.time() + HELD_SECONDS
        while loop.time() < end:  # a majority is up, but not one that may elect
            roles = [(await c.status())["role"] for c in clients.values()]
            assert "LEADER" not in roles, "elected with the vote of a node that lost power"
            await asyncio.sleep(0.05)

        await procs[follower].start(IDS)
        procs[follower].connect(addresses)
        clients[follower] = await Client.connect(procs[follower].client_port)
        assert (await clients[follower].status())["held"] is False  # kill -9: nothing lost
        await find_leader(clients)
        for name, client in clients.items():
            held = await journal(client)
            missing = set(payloads) - set(held)
            assert not missing, f"{name} lost {len(missing)} acknowledged entries"
            assert len(held) == len(set(held)), f"{name} applied an entry twice"

        async def released() -> bool:
            """It holds an entry of the new leader's term, and told its log store."""
            held = (await clients[lead].status())["held"]
            return held is False and not (procs[lead].dir / HOLD).exists()

        await poll_async(released, "the rebooted node released", 10)
    finally:
        for client in clients.values():
            await client.close()
        for proc in procs.values():
            with contextlib.suppress(ProcessLookupError):
                await proc.stop()
