"""The SQL service's doors against a replay, and the union read's exactness.

The measure starts a jetlake server of its own (the harness's stays idle): the lake
on, its SQL service on free ports (`lake { sql { listen, jdbc: off } }`, SQL over
NATS on this server), as `jetlake serve --lake` runs it. ``history`` messages are
published through it on 16 subjects and left until the compactor has them all in
Delta; then the count by subject is asked through each door, the service warm
(``WARM_QUERIES`` untimed queries first through each), median of ``QUERY_RUNS``:

- `jetlake sql` as a user types it: a new process each time, which finds the
  service from the store and asks it through its NATS door (imports included);
- a Spark Connect client session (`SparkSession.builder.remote`), opened once;
- SQL over NATS from nats-py (`sql.nats_door.client`): Arrow chunks, each acked;
- the same door on its DuckDB engine (`Jl-Sql-Engine: duckdb`, `sql.nats_door.duck_engine`).

Every answer must be the right one. Then the exactness probe: ``PROBES`` times,
publish a message, wait for its PubAck, and ask (SQL over NATS) for its seq:
the share of probes whose row was in the result, which must be 100 %, through
each engine of the NATS door. Each
query waits for a rebuild of the probed stream's view (its files changed since the
last), several tenths of a second on a loaded two-core machine, so ``PROBERS``
probes run side by side.

The reference reaches the count by replaying the stream with nats-py's ordered
consumer (`lake.history_replay`), which sets each door's figure against it.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING

import nats

from benchmarks.jetstream import publish_all
from benchmarks.lake import (
    HISTORY_QUERY,
    HISTORY_STREAM,
    HISTORY_SUBJECTS,
    LAKE_CATCH_UP_SECONDS,
    QUERY_RUNS,
    WARM_QUERIES,
    _check_counts,
    _table,
    _until,
)
from benchmarks.model import Incomplete, Params
from benchmarks.servers import STORE, server_process
from log.compactor.compact import lake_progress
from sql.nats_door.client import query as nats_query
from sql.service import Endpoints

if TYPE_CHECKING:
    from nats.aio.client import Client

PROBES = 1000
PROBERS = 16  # probes in flight
PROBE_STREAM = "PROBE"
SERVICE_SECONDS = 300.0  # the service's JVM and its first views, on a loaded machine
START_SECONDS = 30.0
# Each door against the one replay: key -> the unit's scale from seconds.
SQL_UNITS = {"cli_s": 1.0, "connect_s": 1.0, "nats_s": 1.0, "duck_s": 1.0}
DUCK = {"Jl-Sql-Engine": "duckdb"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def _sql_server(workdir: Path) -> AsyncIterator[tuple[str, Path, Endpoints]]:
    """A jetlake server with the lake and its SQL service on, once the service answers."""
    store = workdir / STORE
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "sql.conf"
    conf.write_text(
        f'jetstream {{ store_dir: "{store}" }}\n'
        f'lake {{ sql {{ listen: "127.0.0.1:{_free_port()}", jdbc: off }} }}\n'
    )
    jetlake = str(Path(sys.executable).parent / "jetlake")
    args = [jetlake, "serve", "-a", "127.0.0.1", "-p", "-1", "-c", str(conf)]
    env = {k: v for k, v in os.environ.items() if k != "JETLAKE_SQL"}
    async with server_process(args, workdir / "server.log", START_SECONDS, env) as (_, target):
        nc = await nats.connect(target.url)
        try:

            async def answering() -> bool:
                try:
                    await nats_query(nc, "SELECT 1", timeout=5.0)
                except (TimeoutError, nats.errors.Error):
                    return False
                return Endpoints.read(store) is not None

            await _until(answering, "the SQL service answering", SERVICE_SECONDS, 1.0)
        finally:
            await nc.close()
        found = Endpoints.read(store)
        assert found is not None
        yield target.url, store, found


async def doors(_url: str, p: Params) -> dict[str, float]:
    """Count by subject through `jetlake sql`, Spark Connect and SQL over NATS (see the
    module doc), then the exactness probe."""
    assert p.store is not None, "the harness sets the store of every run"
    async with _sql_server(p.store.parent / "sql") as (url, store, endpoints):
        nc = await nats.connect(url)
        try:
            js = nc.jetstream(timeout=30)
            await js.add_stream(name=HISTORY_STREAM, subjects=["hist.>"])
            await publish_all(js, p, p.history, HISTORY_SUBJECTS)
            table, app_id = _table(store, HISTORY_STREAM)

            async def compacted() -> bool:
                return await asyncio.to_thread(lake_progress, table, app_id) >= p.history

            await _until(compacted, f"{p.history} rows in Delta", LAKE_CATCH_UP_SECONDS, 1.0)
            out = {
                "cli_s": await asyncio.to_thread(_timed, lambda: _cli(store), p.history),
                "connect_s": await asyncio.to_thread(_connect, endpoints.connect, p.history),
                "nats_s": await _nats(nc, p.history),
                "duck_s": await _nats(nc, p.history, DUCK),
            }
            out["probe_pct"] = await _probes(nc, PROBE_STREAM)
            out["duck_probe_pct"] = await _probes(nc, f"{PROBE_STREAM}_DUCK", DUCK)
            return out
        finally:
            await nc.close()


def _timed(ask: Callable[[], Counter[str]], total: int) -> float:
    """The median of QUERY_RUNS timed answers after WARM_QUERIES untimed ones, each checked."""
    times = []
    for i in range(WARM_QUERIES + QUERY_RUNS):
        start = perf_counter()
        counts = ask()
        elapsed = perf_counter() - start
        _check_counts(counts, total)
        if i >= WARM_QUERIES:
            times.append(elapsed)
    return sorted(times)[len(times) // 2]


def _cli(store: Path) -> Counter[str]:
    jetlake = Path(sys.executable).parent / "jetlake"
    done = subprocess.run(
        [jetlake, "sql", "--store", store, "--format", "json", HISTORY_QUERY],
        capture_output=True,
        check=False,
    )
    said = done.stderr.decode(errors="replace")
    if done.returncode or "querying the SQL service" not in said:
        raise Incomplete(f"jetlake sql did not answer through the service: {said[-2000:]}")
    return Counter({r["subject"]: r["n"] for r in json.loads(done.stdout)})


def _connect(url: str, total: int) -> float:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    spark = ConnectSession.builder.remote(url).getOrCreate()
    try:

        def ask() -> Counter[str]:
            return Counter({r.subject: r.n for r in spark.sql(HISTORY_QUERY).collect()})

        return _timed(ask, total)
    finally:
        spark.stop()


async def _nats(nc: Client, total: int, headers: dict[str, str] | None = None) -> float:
    times = []
    for i in range(WARM_QUERIES + QUERY_RUNS):
        start = perf_counter()
        found = await nats_query(nc, HISTORY_QUERY, headers=headers)
        elapsed = perf_counter() - start
        subjects, counts = found.column("subject").to_pylist(), found.column("n").to_pylist()
        _check_counts(Counter(dict(zip(subjects, counts, strict=True))), total)
        if i >= WARM_QUERIES:
            times.append(elapsed)
    return sorted(times)[len(times) // 2]


async def _probes(nc: Client, stream: str, headers: dict[str, str] | None = None) -> float:
    """Percent of PROBES acknowledged messages found by a query asked right after the ack,
    PROBERS at a time (the service shares one view rebuild among queries asked together)."""
    js = nc.jetstream(timeout=30)
    await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
    found = 0

    async def prober(k: int) -> None:
        nonlocal found
        for i in range(k, PROBES, PROBERS):
            ack = await js.publish(f"{stream.lower()}.{k}", b"%d" % i)
            sql = f"SELECT data FROM {stream} WHERE seq = {ack.seq}"
            rows = await nats_query(nc, sql, headers=headers)
            found += rows.num_rows == 1 and rows.column("data")[0].as_py() == b"%d" % i

    await asyncio.gather(*(prober(k) for k in range(PROBERS)))
    return 100.0 * found / PROBES


async def replay(url: str, p: Params) -> dict[str, float]:
    """The reference's way to the answer (`lake.history_replay`), set against each door."""
    from benchmarks.lake import history_replay

    seconds = (await history_replay(url, p))["seconds"]
    return {key: scale * seconds for key, scale in SQL_UNITS.items()}
