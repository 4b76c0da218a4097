"""The many-streams row: ``--streams`` R3 streams on three servers of each kind.

``cluster-scale`` starts three servers a side (benchmarks/cluster/rows.py) and creates
``--streams`` R3 file streams, ``WINDOW`` creates in flight (a provisioning script's
pace, not one at a time), one message in each. Then the cluster idles for
``IDLE_SECONDS`` and each server's CPU is read from ``/proc``: with no traffic,
what it spends is the upkeep of its Raft groups (heartbeats, timers), which is
what reference users with many streams complain of. Last, the third server is
stopped, every stream takes one more message through the other two (the streams
it led elect another leader first), and the server is started again on its store:
timed from exec until every stream's info lists it as a current replica (lag 0).

It is opt-in (``--only cluster-scale``, not part of ``--only cluster``): at 1,000
streams it takes minutes a side.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from pathlib import Path
from time import perf_counter

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import StorageType, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, NoStreamResponseError

from benchmarks.client import connect
from benchmarks.cluster import rows
from benchmarks.model import Incomplete, Metric, Params, Profile, Workload
from benchmarks.scale import MIB, tree_cpu, tree_rss
from benchmarks.servers import _stop, _wait_ready

NAME = "cluster-scale"
STREAMS = 1_000
WINDOW = 16  # stream creates (and publishes, info requests) in flight
IDLE_SECONDS = 10.0
SETTLE_SECONDS = 2.0  # after the last publish, before the idle window opens
DEADLINE = 600.0  # for each phase: a create, a publish, catching up
API_SECONDS = 5.0
POLL = 0.2
RETRIED = (NatsTimeoutError, NoStreamResponseError, NoRespondersError, TimeoutError)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(f"many R3 streams (--only {NAME})")
    group.add_argument("--streams", type=int, default=STREAMS, help="R3 streams on three servers")


def _name(i: int) -> str:
    return f"SCALE{i}"


def _subject(i: int) -> str:
    return f"scale.{i}"


async def _windowed(items: Iterable[int], job: Callable[[int], Awaitable[None]]) -> None:
    """``job(i)`` for every ``i`` of ``items``, ``WINDOW`` at a time."""
    queue = iter(items)

    async def worker() -> None:
        for i in queue:
            await job(i)

    await asyncio.gather(*(worker() for _ in range(WINDOW)))


async def _retry(what: str, call: Callable[[], Awaitable[object]]) -> None:
    """Retry while the cluster is forming or electing; any other refusal is the result."""
    deadline = perf_counter() + DEADLINE
    while True:
        try:
            await call()
            return
        except (*RETRIED, APIError) as exc:
            if isinstance(exc, APIError) and exc.err_code not in rows.FORMING:
                raise
            if perf_counter() > deadline:
                raise Incomplete(f"{what}: not done in {DEADLINE:g} s: {exc!r}") from exc
            await asyncio.sleep(POLL)


async def _create(js: JetStreamContext, i: int) -> None:
    config = StreamConfig(
        name=_name(i), subjects=[_subject(i)], storage=StorageType.FILE, num_replicas=3
    )
    await _retry(f"stream {_name(i)}", partial(js.add_stream, config))


async def _publish(js: JetStreamContext, payload: bytes, tag: str, i: int) -> None:
    """One message to stream ``i``; a retry after a lost PubAck is deduplicated, not stored."""
    headers = {"Nats-Msg-Id": f"{tag}-{i}"}
    await _retry(
        f"publish to {_subject(i)}", partial(js.publish, _subject(i), payload, headers=headers)
    )


async def _current(js: JetStreamContext, i: int, peer: str) -> bool:
    """Whether stream ``i``'s info (from its leader) has ``peer`` current with no lag."""
    try:
        info = await js.stream_info(_name(i))
    except (*RETRIED, APIError):
        return False
    state = info.cluster
    if state is None:
        return False
    if state.leader == peer:
        return True
    return any(r.name == peer and r.current and not r.lag for r in state.replicas or ())


async def _until_current(js: JetStreamContext, count: int, peer: str) -> None:
    behind = set(range(count))
    deadline = perf_counter() + DEADLINE
    while behind:
        if perf_counter() > deadline:
            raise Incomplete(f"{peer} not current on {len(behind)} streams after {DEADLINE:g} s")
        done: list[int] = []

        async def check(i: int, done: list[int] = done) -> None:
            if await _current(js, i, peer):
                done.append(i)

        await _windowed(sorted(behind), check)
        behind.difference_update(done)
        if behind:
            await asyncio.sleep(POLL)


def _mean_max(values: Iterable[float]) -> tuple[float, float]:
    seen = list(values)
    return sum(seen) / len(seen), max(seen)


async def _measure(_url: str, p: Params, *, command: list[str], streams: int) -> dict[str, float]:
    assert p.store is not None, "the harness sets the store of every run"
    async with rows._cluster(command, p.store, rows.NODES) as nodes:
        await rows.placeable(nodes[0].url, rows.NODES)
        nc = await connect(nodes[0].url, "bench-cluster-scale")
        try:
            return await _phases(nc, nodes, p, streams)
        finally:
            await nc.close()


async def _phases(nc: Client, nodes: list[rows.Node], p: Params, streams: int) -> dict[str, float]:
    js = nc.jetstream(timeout=API_SECONDS)
    start = perf_counter()
    await _windowed(range(streams), partial(_create, js))
    create_s = perf_counter() - start
    await _windowed(range(streams), partial(_publish, js, p.payload, "first"))
    pids = [n.proc.pid for n in nodes]
    rss_mean, rss_max = _mean_max(tree_rss(pid) / MIB for pid in pids)
    await asyncio.sleep(SETTLE_SECONDS)
    before = [tree_cpu(pid) for pid in pids]
    await asyncio.sleep(IDLE_SECONDS)
    used = [tree_cpu(pid) - b for pid, b in zip(pids, before, strict=True)]
    cpu_mean, cpu_max = _mean_max(100 * u / IDLE_SECONDS for u in used)
    catch_up_s = await _restart_one(js, nodes[-1], p, streams)
    return {
        "create_s": create_s,
        "rss_mib": rss_mean,
        "rss_max_mib": rss_max,
        "idle_cpu_pct": cpu_mean,
        "idle_cpu_max_pct": cpu_max,
        "catch_up_s": catch_up_s,
    }


async def _restart_one(js: JetStreamContext, node: rows.Node, p: Params, streams: int) -> float:
    """Stop ``node``, write to every stream without it, start it again: seconds to current."""
    _stop(node.proc)
    await _windowed(range(streams), partial(_publish, js, p.payload, "without"))
    log = Path(node.args[node.args.index("-sd") + 1]).with_suffix(".restart.log")
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            node.args, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        start = perf_counter()
        await _wait_ready(proc, log, rows.START_SECONDS)
        await _until_current(js, streams, node.name)
        return perf_counter() - start
    finally:
        _stop(proc)


def workloads(streams: int) -> list[Workload]:
    def metric(key: str, label: str, unit: str) -> Metric:
        return Metric(key, label, unit, higher_is_better=False)

    return [
        Workload(
            NAME,
            Profile.OFFLINE,
            partial(_measure, command=rows.COMMANDS["jetlake"], streams=streams),
            (
                metric("create_s", f"create {streams:,} R3 streams", "s"),
                metric("rss_mib", "RSS per server, mean", "MiB"),
                metric("rss_max_mib", "RSS per server, max", "MiB"),
                metric("idle_cpu_pct", "idle CPU per server, mean", "% core"),
                metric("idle_cpu_max_pct", "idle CPU per server, max", "% core"),
                metric("catch_up_s", "restarted server current on all", "s"),
            ),
            f"{streams:,} R3 file streams on 3 servers: create, RSS, idle CPU, restart catch-up",
            ref_measure=partial(_measure, command=rows.COMMANDS["ref"], streams=streams),
            timeout=3600.0,
        )
    ]


def choose(names: list[str], args: argparse.Namespace) -> tuple[list[str], list[Workload]]:
    """Take ``cluster-scale`` out of ``--only`` names: an opt-in row, never in a group."""
    if NAME not in names:
        return names, []
    return [n for n in names if n != NAME], workloads(args.streams)
