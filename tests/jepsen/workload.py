"""Writers under faults, then a read of every replica: the history the checker judges.

Writers. K tasks, each on its own connection given every node's URL (nats-py
reconnects to another node when one dies or stops answering pings), publish
unique values ``w{k}-{i}`` with ``js.publish`` and a timeout, at a paced rate
so that three servers and the client share two cores without starving Raft's
timers. A PubAck is ACKED with its sequence; an error reply from the server or
"no responders" is FAILED (nobody stored it); anything else, a timeout or a
broken connection, is UNKNOWN (nats-py may even flush a buffered publish after
reconnecting).

Per-node reads. After the nemesis has healed everything and the writers have
stopped, we wait until every node's own ``/jsz`` reports the same stream state
and the leader sees each replica current. Then each node's own copy is read, by
one of two paths (``read_nodes`` picks), because the two servers place consumers
differently:

- The reference (``read_node``): a consumer *hosted on that node*. An ephemeral
  R1 consumer is placed on one of the stream's peers and reads that peer's
  local store (its ``cluster.leader`` in the create response names it), so we
  create one, keep it if it landed on the node we want and delete and retry
  otherwise. Stepping the stream leader onto each node in turn would read the
  same stores but pay an election per node and one request per message.
- jetlake (``read_store``): every consumer of a replicated stream runs on the
  stream's leader, so no consumer can read a follower's copy. Instead every
  node is shut down cleanly (SIGTERM: each closes and syncs its stores) and the
  test opens each node's stream store from its store directory with jetlake's
  own ``FileStore`` (``<store>/jetstream/$G/streams/JEPSEN/``), reads every
  message in sequence order and closes it. These are the files the node serves
  from and restarts from (the lake's inspection reads them too), so this is that
  node's copy with nothing of the others mixed in.

Either way, each node's read is cross-checked against the message count that
node reported in ``/jsz`` at convergence.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import APIError, NoStreamResponseError

from log.segments.filestore import FileStore
from tests.jepsen.checker import Attempt, NodeRead, Outcome
from tests.jepsen.cluster import ACCOUNT, LOGIN, NodeSet
from tests.support.http import get_json

STREAM = "JEPSEN"
SUBJECTS = ["jepsen.>"]
PUBLISH_TIMEOUT = 2.0
BACKOFF = 0.1  # after a failed or unknown publish: no hot loop while the cluster elects
SETUP_TIMEOUT = 30.0
CONVERGE_TIMEOUT = 60.0
PLACEMENT_ATTEMPTS = 30
FETCH_BATCH = 1000
POLL = 0.2


class JepsenError(AssertionError):
    """The run could not reach the point where the checker can judge it."""


async def _quiet(_exc: Exception) -> None:
    """Disconnects are the point of the exercise; the history records what they cost."""


@asynccontextmanager
async def client(urls: Sequence[str], name: str) -> AsyncIterator[NATS]:
    """A client that fails over between nodes and notices a paused one within ~2 s."""
    nc = await nats.connect(
        servers=list(urls),
        name=name,
        connect_timeout=1,
        reconnect_time_wait=0.1,
        max_reconnect_attempts=-1,
        ping_interval=1,
        max_outstanding_pings=2,
        error_cb=_quiet,
        **LOGIN,
    )
    try:
        yield nc
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 5)


async def create_stream(js: JetStreamContext, replicas: int) -> None:
    """Retry until the meta group has a leader and the stream exists (same config: idempotent)."""
    config = StreamConfig(
        name=STREAM,
        subjects=SUBJECTS,
        num_replicas=replicas,
        storage=StorageType.FILE,
        allow_direct=True,
    )
    deadline = time.monotonic() + SETUP_TIMEOUT
    while True:
        try:
            await js.add_stream(config)
            return
        except (APIError, NoStreamResponseError, NatsTimeoutError, TimeoutError) as exc:
            if time.monotonic() > deadline:
                raise JepsenError(f"stream {STREAM} not created in {SETUP_TIMEOUT}s") from exc
            await asyncio.sleep(POLL)


async def stream_leader(js: JetStreamContext) -> str | None:
    """The stream's leader as the node we reach reports it, or None mid-election."""
    try:
        info = await js.stream_info(STREAM)
    except Exception:
        return None
    return info.cluster.leader if info.cluster else None


@dataclass
class Writers:
    """K paced writer tasks sharing one history list (appends only, one event loop)."""

    urls: Sequence[str]
    count: int
    rate: float  # publishes per second per writer
    history: list[Attempt]

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.gather(*(self._write(k, stop) for k in range(self.count)))

    async def _write(self, k: int, stop: asyncio.Event) -> None:
        interval = 1.0 / self.rate
        async with client(self.urls, f"jepsen-writer-{k}") as nc:
            js = nc.jetstream(timeout=PUBLISH_TIMEOUT)
            i = 0
            while not stop.is_set():
                value = f"w{k}-{i}"
                i += 1
                attempt = await _publish(js, f"jepsen.w{k}", value)
                self.history.append(attempt)
                pause = interval if attempt.outcome is Outcome.ACKED else BACKOFF
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), pause)


async def _publish(js: JetStreamContext, subject: str, value: str) -> Attempt:
    try:
        ack = await js.publish(subject, value.encode())
    except (APIError, NoStreamResponseError):
        return Attempt(value, Outcome.FAILED)
    except Exception:
        return Attempt(value, Outcome.UNKNOWN)
    return Attempt(value, Outcome.ACKED, ack.seq)


async def _stream_detail(http_url: str) -> dict[str, Any] | None:
    try:
        jsz = await get_json(http_url + "/jsz?streams=true")
    except OSError:
        return None
    for account in jsz.get("account_details") or []:
        for stream in account.get("stream_detail") or []:
            if stream.get("name") == STREAM:
                return dict(stream)
    return None


async def converge(nodes: NodeSet) -> dict[str, dict[str, Any]]:
    """Wait until every node holds the same state and the leader calls each replica current.

    Returns each node's own ``state`` (messages, first_seq, last_seq…) by name.
    """
    deadline = time.monotonic() + CONVERGE_TIMEOUT
    while True:
        details = [await _stream_detail(s.http_url) for s in nodes.servers]
        if all(details):
            states = {n: d["state"] for n, d in zip(nodes.names, details, strict=True) if d}
            if _converged(list(states.values()), [d for d in details if d]):
                return states
        if time.monotonic() > deadline:
            raise JepsenError(f"replicas did not converge in {CONVERGE_TIMEOUT}s: {details}")
        await asyncio.sleep(POLL)


def _converged(states: list[dict[str, Any]], details: list[dict[str, Any]]) -> bool:
    """One state everywhere, one leader everyone names, and it calls every replica current.

    Only the leader's own detail carries ``leader_since`` (and lists the others as replicas).
    """
    same = {(s["messages"], s["first_seq"], s["last_seq"]) for s in states}
    named = {d["cluster"].get("leader") for d in details}
    leading = [d for d in details if d["cluster"].get("leader_since")]
    if len(same) != 1 or len(named) != 1 or len(leading) != 1:
        return False
    replicas = leading[0]["cluster"].get("replicas") or []
    return len(replicas) == len(details) - 1 and all(r.get("current") for r in replicas)


async def read_nodes(nodes: NodeSet) -> list[NodeRead]:
    """Every node's copy, by the path its kind allows (see the module docstring).

    For jetlake this stops the servers: nothing may run against them afterwards.
    """
    if nodes.kind == "jetlake":
        await asyncio.to_thread(nodes.shut_down)
        pairs = zip(nodes.names, nodes.stores, strict=True)
        return [await asyncio.to_thread(read_store, name, store) for name, store in pairs]
    return [await read_node(nodes, name) for name in nodes.names]


def stream_folder(store: Path) -> Path:
    """Where a jetlake node started with ``-sd store`` keeps the stream's segment files."""
    return store / "jetstream" / ACCOUNT / "streams" / STREAM


def read_store(node: str, store: Path) -> NodeRead:
    """Every live message in ``node``'s stream files, in sequence order (the node is stopped)."""
    folder = stream_folder(store)
    if not folder.is_dir():
        raise JepsenError(f"{node} has no store for {STREAM} at {folder}")
    files = FileStore(folder, name=STREAM)
    try:
        if files.corrupt:
            raise JepsenError(f"{node}: corrupt segments in {folder}: {files.corrupt}")
        state = files.state()
        messages: list[tuple[int, str]] = []
        seq = state.first_seq
        while run := files.load_run(seq, state.last_seq, FETCH_BATCH):
            messages += [(m.seq, m.data.decode()) for m in run]
            seq = run[-1].seq + 1
        return NodeRead(node, tuple(messages))
    finally:
        files.close()


async def read_node(nodes: NodeSet, node: str) -> NodeRead:
    """Every message of ``node``'s copy, through a consumer hosted on ``node``."""
    url = nodes.urls[nodes.index(node)]
    async with client([url], f"jepsen-reader-{node}") as nc:
        js = nc.jetstream(timeout=5)
        name = await _consumer_on(js, node)
        try:
            return NodeRead(node, await _read_all(js, name))
        finally:
            with contextlib.suppress(Exception):
                await js.delete_consumer(STREAM, name)


async def _consumer_on(js: JetStreamContext, node: str) -> str:
    config = ConsumerConfig(
        ack_policy=AckPolicy.NONE,
        deliver_policy=DeliverPolicy.ALL,
        mem_storage=True,
        num_replicas=1,
        inactive_threshold=30.0,
    )
    placed: list[str] = []
    for _ in range(PLACEMENT_ATTEMPTS):
        try:
            info = await js.add_consumer(STREAM, config)
        except NatsTimeoutError:  # the reference's API can stall for seconds after faults
            placed.append("(timed out)")
            continue
        host = info.cluster.leader if info.cluster else None
        if host == node:
            return str(info.name)
        placed.append(str(host))
        await js.delete_consumer(STREAM, str(info.name))
    raise JepsenError(f"no consumer of {STREAM} placed on {node}, only on {sorted(set(placed))}")


async def _read_all(js: JetStreamContext, consumer: str) -> tuple[tuple[int, str], ...]:
    sub = await js.pull_subscribe_bind(consumer, STREAM)
    messages: list[tuple[int, str]] = []
    try:
        while True:
            try:
                batch = await sub.fetch(FETCH_BATCH, timeout=2)
            except (NatsTimeoutError, TimeoutError):
                return tuple(messages)  # nothing more on this node
            for msg in batch:
                messages.append((msg.metadata.sequence.stream, msg.data.decode()))
            if batch and batch[-1].metadata.num_pending == 0:
                return tuple(messages)
    finally:
        await sub.unsubscribe()
