"""The cluster as its clients see it: convergence and every node's copy, through each node.

After the faults, a user's check is not a server's own report of itself: it
is a client connected to one server asking for the stream's state and reading
messages there. So each node is judged through a client connected to it alone:

- converged: every node answers stream info naming one leader and the other
  members current, with the last acknowledged sequence stored, and a direct
  get of that sequence through the node returns it;
- its copy: every sequence up to the stream's last, read by direct gets
  through that node, many in flight (the path KV reads and ``nats stream get``
  take). Direct gets are served by whichever replica the request lands on, so
  a node that answers stale or not at all shows here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import NotFoundError

from tests.jepsen.checker import NodeRead
from tests.jepsen.cluster import NodeSet
from tests.jepsen.workload import STREAM, JepsenError, client

OUTSIDE_CONVERGE_TIMEOUT = 30.0
IN_FLIGHT = 64
GET_TIMEOUT = 2.0
GET_TRIES = 5
POLL = 0.2


async def converge_outside(nodes: NodeSet, last_acked: int) -> float:
    """Seconds until every node, asked alone, shows the converged stream (JepsenError
    naming what each node said at the deadline)."""
    started = time.monotonic()
    deadline = started + OUTSIDE_CONVERGE_TIMEOUT
    while True:
        seen = await asyncio.gather(*(_view(url, last_acked) for url in nodes.urls))
        leaders = {leader for leader, ok in seen if ok}
        if all(ok for _, ok in seen) and len(leaders) == 1:
            return time.monotonic() - started
        if time.monotonic() > deadline:
            said = dict(zip(nodes.names, seen, strict=True))
            raise JepsenError(
                f"not converged {OUTSIDE_CONVERGE_TIMEOUT}s after recovery, seen through "
                f"each node as (leader, converged): {said}"
            )
        await asyncio.sleep(POLL)


async def _view(url: str, last_acked: int) -> tuple[str | None, bool]:
    """(the leader this node names, whether it shows everything converged)."""
    try:
        async with client([url], "jepsen-observer") as nc:
            js = nc.jetstream(timeout=GET_TIMEOUT)
            info = await js.stream_info(STREAM)
            cluster = info.cluster
            if cluster is None or not cluster.leader:
                return None, False
            replicas = cluster.replicas or []
            current = len(replicas) == info.config.num_replicas - 1 and all(
                r.current for r in replicas
            )
            if not current or (info.state.last_seq or 0) < last_acked:
                return cluster.leader, False
            if last_acked:
                msg = await js.get_msg(STREAM, last_acked, direct=True)
                if msg.seq != last_acked:
                    return cluster.leader, False
            return cluster.leader, True
    except Exception:  # no answer yet: still converging
        return None, False


async def read_outside(nodes: NodeSet) -> list[NodeRead]:
    """Each node's copy as direct gets through that node alone return it."""
    return [await _read_through(nodes, name) for name in nodes.names]


async def _read_through(nodes: NodeSet, node: str) -> NodeRead:
    url = nodes.urls[nodes.index(node)]
    async with client([url], f"jepsen-direct-{node}") as nc:
        js = nc.jetstream(timeout=GET_TIMEOUT)
        info = await js.stream_info(STREAM)
        last = info.state.last_seq or 0
        messages: list[tuple[int, str]] = []
        for start in range(1, last + 1, IN_FLIGHT):
            seqs = range(start, min(start + IN_FLIGHT, last + 1))
            got = await asyncio.gather(*(_get(js, node, seq) for seq in seqs))
            messages += [m for m in got if m is not None]
        return NodeRead(f"{node} (direct get)", tuple(messages))


async def _get(js: object, node: str, seq: int) -> tuple[int, str] | None:
    """The message at `seq` through this node; None where the stream holds none."""
    for _ in range(GET_TRIES):
        try:
            msg = await js.get_msg(STREAM, seq, direct=True)  # type: ignore[attr-defined]
        except NotFoundError:
            return None
        except (NatsTimeoutError, TimeoutError):
            continue
        return int(msg.seq), bytes(msg.data).decode()
    raise JepsenError(f"direct get of {STREAM} seq {seq} through {node}: {GET_TRIES} timeouts")


def last_acked(seqs: Sequence[int | None]) -> int:
    return max((s for s in seqs if s is not None), default=0)
