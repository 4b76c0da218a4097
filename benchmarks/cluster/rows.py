"""Cluster rows: an R3 file stream on three processes of each server.

Three servers on loopback, routed to each other, JetStream on, one R3 stream.
Each row starts its own three, so a server that fails one (jetlake while its
clustering grows) still shows its figures in the others:
``cluster-pub-async``: ``publish_async`` msgs/s with ``--window`` acks in flight;
``cluster-pub-sync``: sync publish p50/p99 over ``--sync-count``;
``cluster-pull``: a durable (R3) pull consumer fetching and acking ``--count``
messages; ``cluster-failover``: SIGKILL the stream's leader, then time until a
publish through a surviving node is acknowledged again. The publish and pull
loops are those of the single-server rows, so the figures compare with
``js-pub-async``, ``js-pub-sync`` and ``js-pull`` as well as across the columns.

``natscli_measure`` runs a `nats bench` workload (benchmarks/natscli.py, the Go
client) against such a cluster instead: nats-py is slower than either server, so
only a Go client shows whether the replication path keeps up. The workload makes
its own stream or bucket with ``replicas`` = the cluster's size, once a probe
stream shows the meta group can place one.

The rows run as ``Profile.OFFLINE`` (the harness starts no server and hands
over a fresh store dir) because they start their own three. They are the
binaries beside this interpreter, like the harness's defaults; ``--ref-cmd`` and
``--jetlake-cmd`` do not reach these rows.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from time import perf_counter

from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import StorageType, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, NoStreamResponseError

from benchmarks.client import connect, latency_metrics
from benchmarks.consumers import drain_acking
from benchmarks.jetstream import STREAM, SUBJECT, WARMUP_PUBLISHES, check_stored, publish_all
from benchmarks.model import Incomplete, Measure, Params
from benchmarks.natscli import Replicated
from benchmarks.servers import _stop, _wait_ready

NODES = 3
PROBE = "BENCH_PROBE"  # a stream that shows the meta group can place replicas
START_SECONDS = 60.0  # five Python servers starting at once on two loaded cores took over 20 s
STREAM_SECONDS = 30.0  # the meta group elects a leader before any stream can be created
FAILOVER_LIMIT = 60.0
RETRY = 0.01
# Refusals of a cluster still forming: retried, not a result. "JetStream system
# temporarily unavailable" (no meta leader yet); "no suitable peers for placement"
# (the meta leader has not heard from enough servers yet).
FORMING = (10008, 10005)
_BIN = Path(sys.executable).parent
COMMANDS = {"ref": [str(_BIN / "nats-server")], "jetlake": [str(_BIN / "jetlake"), "serve"]}


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    url: str
    proc: subprocess.Popen[bytes]
    mqtt_port: int = 0  # with an `mqtt {}` block in the cluster's ``config``
    args: tuple[str, ...] = ()  # the command line, for a row that restarts the node


Phase = Callable[[JetStreamContext, list[Node], Params], Awaitable[dict[str, float]]]


def measure(phase: Phase, side: str) -> Measure:
    """The harness's measure of one row on one side: three fresh servers, a stream, ``phase``."""
    return partial(_measure, phase=phase, command=COMMANDS[side])


def natscli_measure(workload: Replicated, side: str, nodes: int = NODES) -> Measure:
    """The harness's measure of a `nats bench` row: ``nodes`` fresh servers, R``nodes``."""
    return partial(_measure_natscli, workload=workload, command=COMMANDS[side], size=nodes)


async def _measure(_url: str, p: Params, *, phase: Phase, command: list[str]) -> dict[str, float]:
    assert p.store is not None, "the harness sets the store of every run"
    async with _cluster(command, p.store, NODES) as nodes:
        nc = await connect(nodes[0].url, "bench-cluster")
        try:
            await _create_stream(nc.jetstream(timeout=2.0), STREAM, SUBJECT, NODES)
            js = nc.jetstream(timeout=p.timeout, publish_async_max_pending=p.window)
            return await phase(js, nodes, p)
        finally:
            await nc.close()


async def _measure_natscli(
    _url: str, p: Params, *, workload: Replicated, command: list[str], size: int
) -> dict[str, float]:
    """The stream is made through the first server; the measured CLI runs on its leader's."""
    assert p.store is not None, "the harness sets the store of every run"
    async with _cluster(command, p.store, size) as nodes:
        await placeable(nodes[0].url, size)
        return await workload(nodes[0].url, p, replicas=size, lead=partial(leader_url, nodes))


async def leader_url(nodes: list[Node], stream: str) -> str:
    """The URL of the server that leads ``stream``, where the measured CLI runs on both
    kinds. The reference picks a new stream's first leader at random and jetlake by a
    hash of the stream's and the servers' names, so a CLI on a fixed server would sit on
    a follower in some runs of one kind and not of the other; a client on a follower
    adds a route hop each way to every publish and ack."""
    deadline = perf_counter() + STREAM_SECONDS
    nc = await connect(nodes[0].url, "bench-leader-probe")
    try:
        js = nc.jetstream(timeout=2.0)
        while True:
            info = await js.stream_info(stream)
            leader = info.cluster.leader if info.cluster is not None else None
            for node in nodes:
                if node.name == leader:
                    return node.url
            if perf_counter() > deadline:
                raise Incomplete(f"stream {stream}: no leader in {STREAM_SECONDS:.0f} s")
            await asyncio.sleep(RETRY)
    finally:
        await nc.close()


async def placeable(url: str, replicas: int) -> None:
    """Return once the cluster can place an R``replicas`` stream: a probe one made and deleted.

    For workloads whose own set-up would fail rather than wait on a cluster still forming.
    """
    nc = await connect(url, "bench-cluster-probe")
    try:
        js = nc.jetstream(timeout=2.0)
        await _create_stream(js, PROBE, f"{PROBE}.x", replicas)
        await js.delete_stream(PROBE)
    finally:
        await nc.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def _cluster(
    command: list[str], root: Path, size: int, config: str = ""
) -> AsyncIterator[list[Node]]:
    """``size`` servers, each with routes to all the others; all stopped on the way out.

    ``config`` is a config file every server also reads, for what has no flag (`mqtt {}`).
    """
    routes = [f"nats://127.0.0.1:{_free_port()}" for _ in range(size)]
    conf = root / "shared.conf"
    if config:
        conf.write_text(config)
    procs: list[tuple[str, subprocess.Popen[bytes], Path, list[str]]] = []
    try:
        for i in range(size):
            name, log = f"N{i}", root / f"N{i}.log"
            args = [
                *command, "-a", "127.0.0.1", "-p", "-1", "-js", "-sd", str(root / name),
                "-n", name, "--cluster_name", "BENCH", "--cluster", routes[i],
                "--routes", ",".join(r for j, r in enumerate(routes) if j != i),
                *(["-c", str(conf)] if config else []),
            ]  # fmt: skip
            with log.open("wb") as sink:
                proc = subprocess.Popen(
                    args, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT
                )
            procs.append((name, proc, log, args))
        ready = await asyncio.gather(
            *(_wait_ready(p, log, START_SECONDS) for _, p, log, _ in procs)
        )
        yield [
            Node(name, url, proc, mqtt_port, tuple(args))
            for (name, proc, _, args), (url, mqtt_port) in zip(procs, ready, strict=True)
        ]
    finally:
        for _, proc, _, _ in procs:
            _stop(proc)


async def _create_stream(js: JetStreamContext, name: str, subject: str, replicas: int) -> None:
    """Retry while the cluster is forming; any other refusal is the row's result."""
    config = StreamConfig(
        name=name, subjects=[subject], storage=StorageType.FILE, num_replicas=replicas
    )
    deadline = perf_counter() + STREAM_SECONDS
    while True:
        try:
            await js.add_stream(config)
            return
        except (NatsTimeoutError, NoStreamResponseError, APIError) as exc:
            if isinstance(exc, APIError) and exc.err_code not in FORMING:
                raise
            if perf_counter() > deadline:
                raise Incomplete(f"no R{replicas} stream in {STREAM_SECONDS:g} s: {exc!r}") from exc
            await asyncio.sleep(0.1)


async def publish_async(js: JetStreamContext, _nodes: list[Node], p: Params) -> dict[str, float]:
    start = perf_counter()
    await publish_all(js, p, p.count)
    elapsed = perf_counter() - start
    await check_stored(js, p.count)
    return {"msgs_per_s": p.count / elapsed}


async def publish_sync(js: JetStreamContext, _nodes: list[Node], p: Params) -> dict[str, float]:
    payload = p.payload
    for _ in range(WARMUP_PUBLISHES):
        await js.publish(SUBJECT, payload)
    samples = []
    for _ in range(p.sync_count):
        start = perf_counter()
        await js.publish(SUBJECT, payload)
        samples.append(perf_counter() - start)
    return latency_metrics(samples)


async def pull_fetch_ack(js: JetStreamContext, _nodes: list[Node], p: Params) -> dict[str, float]:
    """``count`` stored messages through a durable pull consumer (R3, like its stream)."""
    await publish_all(js, p, p.count)
    return await drain_acking(js, p)


async def failover(js: JetStreamContext, nodes: list[Node], p: Params) -> dict[str, float]:
    """Milliseconds from SIGKILL of the stream leader to the next acknowledged publish.

    The publisher is connected to a surviving node, so the figure is the
    cluster's recovery, not a client's reconnect.
    """
    info = await js.stream_info(STREAM)
    leader = info.cluster.leader if info.cluster else None
    victim = next((n for n in nodes if n.name == leader), None)
    if victim is None:
        raise Incomplete(f"stream leader {leader!r} is none of {[n.name for n in nodes]}")
    survivor = next(n for n in nodes if n is not victim)
    nc = await connect(survivor.url, "bench-cluster-failover")
    try:
        probe = nc.jetstream(timeout=0.5)
        await probe.publish(SUBJECT, p.payload)
        victim.proc.kill()
        start = perf_counter()
        while True:
            try:
                await probe.publish(SUBJECT, p.payload)
                return {"failover_ms": (perf_counter() - start) * 1e3}
            except (NatsTimeoutError, NoStreamResponseError, APIError) as exc:
                if perf_counter() - start > FAILOVER_LIMIT:
                    raise Incomplete(
                        f"no publish acked {FAILOVER_LIMIT:g} s after the kill"
                    ) from exc
                await asyncio.sleep(RETRY)
    finally:
        await nc.close()
