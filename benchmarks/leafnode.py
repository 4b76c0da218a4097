"""The leafnode row: `nats bench pub` on a leaf, `nats bench sub` on its hub.

Each side starts its own hub and leaf (both of that side's kind, on loopback) and
reports the subscriber's rate: every message crosses the link, so the figure is what
the leaf forwards and the hub takes from a link and delivers. Before the CLI runs, a
probe subscription on the hub and probe publishes on the leaf show the link is up and
the hub's interest in the subject has reached the leaf, so no message is published
into a link that would drop it.

The `-s2` row is the same with `compression: s2_fast` on both ends of the link, so each
side writes S2 streams (the default, `s2_auto`, writes uncompressed S2 chunks on a
loopback link).

The rows run as ``Profile.OFFLINE`` (it starts its own two servers, the binaries
beside this interpreter, as the cluster rows do).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from time import perf_counter

from nats.aio.subscription import Subscription
from nats.errors import TimeoutError as NatsTimeoutError

from benchmarks.client import connect
from benchmarks.cluster.rows import COMMANDS, START_SECONDS, _free_port
from benchmarks.model import Incomplete, Measure, Params
from benchmarks.natscli import READY_SUB, SUBJECT, _args, _output, _process, _rate, _run, _wait_for
from benchmarks.servers import configured_servers

LINK_SECONDS = 20.0
PROBE_EVERY = 0.05


def measure(side: str, compression: str = "") -> Measure:
    """The harness's measure of the row on one side: a fresh hub and leaf of that kind,
    their link in the `compression` mode given (else the default)."""
    return partial(_measure, command=COMMANDS[side], compression=compression)


@asynccontextmanager
async def _hub_and_leaf(
    command: list[str], root: Path, compression: str
) -> AsyncIterator[tuple[str, str]]:
    """The hub's and the leaf's client URLs; both stopped on the way out."""
    port = _free_port()
    mode = f", compression: {compression}" if compression else ""
    configs = {
        "hub": f"leafnodes {{ listen: 127.0.0.1:{port}{mode} }}\n",
        "leaf": f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{port}"{mode} }} ] }}\n',
    }
    async with configured_servers(command, root, configs, START_SECONDS) as servers:
        (hub, _), (leaf, _) = servers
        yield hub, leaf


@asynccontextmanager
async def _link_carries(hub_url: str, leaf_url: str) -> AsyncIterator[Subscription]:
    """Publish on the leaf until the hub's probe subscriber to the bench subject hears one;
    the probe's subscription is the caller's to drop once the CLI's subscriber holds the
    hub's interest, so that interest never lapses on the way."""
    hub_nc = await connect(hub_url, "bench-leaf-probe-hub")
    leaf_nc = await connect(leaf_url, "bench-leaf-probe-leaf")
    try:
        sub = await hub_nc.subscribe(SUBJECT)
        await hub_nc.flush()
        deadline = perf_counter() + LINK_SECONDS
        while True:
            if perf_counter() > deadline:
                raise Incomplete(f"the leafnode link carried nothing within {LINK_SECONDS:.0f} s")
            await leaf_nc.publish(SUBJECT, b"probe")
            await leaf_nc.flush()
            try:
                await sub.next_msg(timeout=PROBE_EVERY)
                break
            except NatsTimeoutError:
                continue
        await leaf_nc.close()
        yield sub
    finally:
        await asyncio.gather(hub_nc.close(), leaf_nc.close())


async def _measure(
    _url: str, p: Params, *, command: list[str], compression: str
) -> dict[str, float]:
    assert p.store is not None, "the harness sets the store of every run"
    async with _hub_and_leaf(command, p.store, compression) as (hub, leaf):
        sub_args = _args(hub, p, "bench", "sub", SUBJECT, f"--msgs={p.count}")
        async with _link_carries(hub, leaf) as probe, _process(sub_args) as sub:
            seen = await _wait_for(sub, sub_args, READY_SUB)
            await probe.unsubscribe()
            await _run(_args(leaf, p, "bench", "pub", SUBJECT, f"--msgs={p.count}"))
            return {"msgs_per_s": _rate(seen + await _output(sub, sub_args), sub_args)}
