"""CPU per message of each server of an R3 cluster, and where it goes by stage.

On two shared cores a throughput figure moves with whatever else runs; the CPU
the three servers spend per message moves far less, so this is how a change to
the replication path is judged (docs/cluster-performance.md). Three servers of
one kind, as `jetlake bench --only cluster` starts them (benchmarks/cluster/rows.py),
an R3 stream made by nats-py, then one natscli workload with the client on the
stream's leader (``--on follower``: on another server, which routes every publish
and PubAck to and from the leader). Printed as JSON: the rate natscli saw, user+sys CPU per message
of the leader and of each follower from /proc, and of each jetlake server's main
(event loop) thread alone.

With ``--profile DIR`` each server also runs under py-spy (raw stacks into DIR),
and a jetlake server's loop thread is shown by stage, scaled to its /proc figure:
a sample goes to the stage of its innermost frame that names one.

    python -m benchmarks.cluster.cpu async --count 100000 [--side ref] [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from benchmarks.client import connect
from benchmarks.cluster.rows import (
    COMMANDS,
    Node,
    _cluster,
    _create_stream,
    leader_url,
    placeable,
)
from benchmarks.natscli import KV_STREAM, STATS, STREAM, SUBJECT, _cli
from benchmarks.scale import cpu_seconds

SPY_RATE = 250  # samples a second: enough for a stage of 2 %, little enough not to skew
# natscli's arguments after `nats bench` for each workload, and whether the stream is
# filled first (fetch drains what `js pub async` stored).
WORKLOADS = {
    "async": (["js", "pub", "async", SUBJECT], False),
    "sync": (["js", "pub", "sync", SUBJECT], False),
    "fetch": (["js", "fetch"], True),
    "kv": (["kv", "put", "--replicas=3"], False),
}
# (stage, markers): a sample's stage is that of its innermost frame containing a marker;
# the event loop's own stage is a sample whose innermost frame is the loop's run.
STAGES = (
    ("route write", ("Route.flush", "Route._write")),
    ("client write", ("Client.flush", "Client._write")),
    ("Raft log append (WAL write)", ("LogStore.append", "encode_frames")),
    ("Raft APPEND framing, route queue", ("RaftRoutes.send", "GroupTransport.send")),
    ("route read, Raft decode, step", ("RaftRoutes._on_frame", "Route.data_received")),
    ("Raft core: propose, Ready, advance", ("RaftCore", "RaftNode._feed")),
    ("apply: decode, append to the segment", ("RaftGroup._apply_entries", "Applier")),
    ("PubAck", ("deliver_tails", "Server.replies", "RunAnswers", "Stream._answered")),
    ("commit: proposals settled", ("RaftNode._settle",)),
    ("proposal: stream rules, entry encoded", ("Stream.publish", "RaftGroup.propose")),
    ("client PUB: read, parse, hand over", ("Client.data_received", "Client._second_half")),
    ("consumer: deliveries, acks", ("consumer_runner", "log/consumers", "jetstream/consumers")),
    ("Raft loop, other", ("RaftNode._run",)),
)
LOOP = ("Runner.run", "run (uvloop")


def _cpu(pid: int) -> tuple[float, float]:
    """CPU seconds (user+sys) of the process, and of its main thread alone."""

    process = Path(f"/proc/{pid}/stat").read_text()
    return cpu_seconds(process), cpu_seconds(Path(f"/proc/{pid}/task/{pid}/stat").read_text())


def stage_of(frames: list[str]) -> str | None:
    """The stage of one sample of the loop thread; None for a sample of another thread."""
    if not frames[0].startswith("<module>"):  # a thread's stack starts in threading
        return None
    if frames[-1].startswith(LOOP):
        return "event loop: epoll, socket reads"
    for frame in reversed(frames):
        for name, markers in STAGES:
            if any(marker in frame for marker in markers):
                return name
    return "other"


def stages(raw: Path, us_per_msg: float) -> dict[str, float]:
    """µs per message by stage of a py-spy raw profile, scaled to the loop thread's CPU."""
    counts: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        name = stage_of(stack.split(";"))
        if name is not None:
            counts[name] += int(n)
    total = sum(counts.values()) or 1
    return {name: round(us_per_msg * n / total, 2) for name, n in counts.most_common()}


def _bench(url: str, args: list[str], count: int) -> list[str]:
    return [_cli(), "--no-context", "-s", url, "bench", *args, f"--msgs={count}", "--no-progress"]


@asynccontextmanager
async def staged(
    side: str, workload: str, count: int, root: Path, on: str = "leader"
) -> AsyncIterator[tuple[list[Node], Node, list[str]]]:
    """Three servers of ``side`` with what the workload needs made (and filled, for a
    fetch): the servers, the stream's leader, and the natscli command to measure, run on
    the leader's server (``on`` follower: another's). natscli makes a KV bucket itself, so
    a put of one makes it first and the measured run reuses it, as the rows do."""
    args, fill = WORKLOADS[workload]
    async with _cluster(COMMANDS[side], root, 3) as nodes:
        await placeable(nodes[0].url, 3)
        if workload == "kv":
            made = subprocess.run(_bench(nodes[0].url, args, 1), capture_output=True)
            if made.returncode != 0:
                raise RuntimeError(f"natscli could not make the KV bucket: {made.stderr!r}")
            lead_url = await leader_url(nodes, KV_STREAM)
        else:
            nc = await connect(nodes[0].url, "cluster-cpu")
            try:
                await _create_stream(nc.jetstream(timeout=2.0), STREAM, SUBJECT, 3)
            finally:
                await nc.close()
            lead_url = await leader_url(nodes, STREAM)
        lead = next(n for n in nodes if n.url == lead_url)
        client = lead if on == "leader" else next(n for n in nodes if n is not lead)
        if fill:
            fill_args = _bench(client.url, ["js", "pub", "async", SUBJECT], count)
            subprocess.run(fill_args, check=True, capture_output=True)
        yield nodes, lead, _bench(client.url, args, count)


async def measure(
    side: str, workload: str, count: int, profile: Path | None, on: str = "leader"
) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as root:
        async with staged(side, workload, count, Path(root), on) as (nodes, lead, args):
            return _run(side, nodes, lead, args, count, profile)


def _run(
    side: str, nodes: list[Node], lead: Node, args: list[str], count: int, profile: Path | None
) -> dict[str, object]:
    spies: list[tuple[Node, Path, subprocess.Popen[bytes]]] = []
    for node in nodes if profile is not None else []:
        assert profile is not None
        role = "leader" if node is lead else "follower"
        out = profile / f"{side}-{role}-{node.name}.txt"
        spy = [str(Path(sys.executable).parent / "py-spy"), "record", "-r", str(SPY_RATE)]
        spy += ["-f", "raw", "-o", str(out), "-p", str(node.proc.pid)]
        quiet = subprocess.DEVNULL
        spies.append((node, out, subprocess.Popen(spy, stdout=quiet, stderr=quiet)))
    before = {n.name: _cpu(n.proc.pid) for n in nodes}
    done = subprocess.run(args, capture_output=True)
    after = {n.name: _cpu(n.proc.pid) for n in nodes}
    for _, _, spy in spies:
        spy.send_signal(signal.SIGINT)
        spy.wait()
    found = STATS.search(done.stdout + done.stderr)
    per = {n: [(after[n][i] - before[n][i]) / count * 1e6 for i in (0, 1)] for n in after}
    result: dict[str, object] = {
        "side": side,
        "rate": found.group(1).decode() if found else None,
        "leader_us": round(per[lead.name][0], 1),
        "followers_us": [round(v[0], 1) for n, v in per.items() if n != lead.name],
        "total_us": round(sum(v[0] for v in per.values()), 1),
    }
    if side == "jetlake":
        result["loop_thread_us"] = {n: round(v[1], 1) for n, v in per.items()}
    for node, out, _ in spies:
        if side == "jetlake" and out.exists():
            result[f"stages {node.name}"] = stages(out, per[node.name][1])
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--side", choices=sorted(COMMANDS), default="jetlake")
    parser.add_argument("--profile", type=Path, help="py-spy each server into this folder")
    parser.add_argument(
        "--on", choices=("leader", "follower"), default="leader", help="the client's server"
    )
    opts = parser.parse_args(argv)
    if opts.profile is not None:
        opts.profile.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(measure(opts.side, opts.workload, opts.count, opts.profile, opts.on))
    result["load"] = round(os.getloadavg()[0], 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
