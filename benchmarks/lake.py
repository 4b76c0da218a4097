"""Lake workloads: freshness, history analytics against a replay, compaction.

Spark runs in this process, one session for the whole benchmark, started before
any timing: the figures are for a warm session, as a notebook or a long-lived
job has one. Spark calls block, so they run in a worker thread and the
harness's timeout still applies. On the jetlake side the server also runs its
own compactor (another JVM) beside the client: on a small machine the lake's
figures include that competition for cores, as they would in production.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from time import perf_counter, time_ns
from typing import TYPE_CHECKING

from nats.aio.msg import Msg

from benchmarks.client import Counter as Deliveries
from benchmarks.client import latency_metrics
from benchmarks.jetstream import js_context, publish_all
from benchmarks.model import Incomplete, Params
from benchmarks.seaweed import SeaweedS3, spark_shape
from benchmarks.servers import STORE, Target, server_process
from log.compactor.compact import Compactor, lake_progress
from log.compactor.direct import DIRECT_ROWS
from log.compactor.layout import META_FILE, STREAMS, StreamRef, default_lake_dir
from log.compactor.location import Lake, LakePath
from log.compactor.spark import build_session
from log.segments import FileStore, NewMsg
from log.timefmt import rfc3339
from sql.inspect import find_stream_dirs
from sql.inspect import query as inspect_query
from sql.session import refresh

if TYPE_CHECKING:
    from nats.js.client import JetStreamContext
    from pyspark.sql import SparkSession

FRESH_STREAM = "FRESH"
FRESH_SAMPLES = 100
FRESH_GAP = 0.25  # seconds between publishes: a steady trickle, each message timed alone
UNION_SAMPLES = 20
POLL = 0.05  # seconds between looks at the Delta log or the view
FIRST_ROW_SECONDS = 300.0  # the first row waits for the compactor's JVM and Spark's table
ROW_SECONDS = 60.0  # any later row must reach Delta well within this
S3_START_SECONDS = 30.0  # the jetlake server beside the S3 one (its compactor starts later)

HISTORY_STREAM = "HIST"
HISTORY_SUBJECTS = tuple(f"hist.{i}" for i in range(16))
HISTORY_QUERY = f"SELECT subject, count(*) AS n FROM {HISTORY_STREAM} GROUP BY subject"
QUERY_RUNS = 3  # timed queries after the warm-up ones; the median is reported
WARM_QUERIES = 5  # untimed: the JVM's JIT needs several runs of a query before the session is warm
# Every jetlake way to the history answer, each set against the one replay on the reference,
# by key and the scale its unit takes from seconds (DuckDB's answers are milliseconds).
HISTORY_UNITS = {"seconds": 1.0, "duckdb_ms": 1e3, "duckdb_cli_ms": 1e3}
LAKE_CATCH_UP_SECONDS = 300.0

COMPACT_BATCH = 10_000  # messages per store append while building segments
# The warm-up stream goes through Spark as the timed pass does: a stream of DIRECT_ROWS or
# fewer is appended by delta-rs and would leave the session's write path cold.
WARM_ROWS = DIRECT_ROWS + 1
MB = 1_000_000


@functools.cache
def _spark() -> SparkSession:
    """The one session of the run; built for a bucket's lake too (S3A's jars), since the S3
    rows' buckets are made after it (`SeaweedS3.bind`)."""
    return build_session("jetlake-bench", lake=spark_shape())


async def _until(
    check: Callable[[], Awaitable[bool]], what: str, deadline: float, every: float = POLL
) -> float:
    """Poll until check() holds; return the time it did, or fail naming what never happened."""
    end = perf_counter() + deadline
    while not await check():
        if perf_counter() > end:
            raise Incomplete(f"not within {deadline:g} s: {what}")
        await asyncio.sleep(every)
    return perf_counter()


def _table(store: Path | None, stream: str, lake: Lake | None = None) -> tuple[LakePath, str]:
    """The Delta table and transaction app id of a stream the server created (its lake the
    server's default unless given)."""
    assert store is not None, "the harness sets the store of every run"
    ref = StreamRef.load(store / STREAMS / stream)
    return ref.table_path(lake or default_lake_dir(store)), ref.app_id


def _progress_reader(table: LakePath, app_id: str) -> Callable[[], int]:
    """The lake's last seq, read incrementally from an open table: a fresh `lake_progress`
    parses the whole Delta log each time, which at 20 looks a second would take CPU from
    the compactor being measured."""
    from deltalake import DeltaTable

    opened = DeltaTable(table.uri, storage_options=table.delta_options)

    def read() -> int:
        opened.update_incremental()
        return int(opened.transaction_version(app_id) or 0)

    return read


def _seconds(samples: list[float], prefix: str, scale: float = 1.0) -> dict[str, float]:
    """p50/p99 by nearest rank, in seconds times ``scale``."""
    found = latency_metrics(samples)
    return {
        f"{prefix}_p50": found["p50_us"] / 1e6 * scale,
        f"{prefix}_p99": found["p99_us"] / 1e6 * scale,
    }


async def freshness(url: str, p: Params) -> dict[str, float]:
    """Seconds from PubAck to the row in Delta (default settings), and ms to the union view.

    Delta: see `delta_freshness`. Union: a message, then the session's views
    refreshed and queried for it until it is there; the target is that the
    first query after the ack already sees it.
    """
    spark = await asyncio.to_thread(_spark)
    async with js_context(url, p, "bench-lake") as js:
        delta = await delta_freshness(js, p, None)

        def visible(seq: int) -> bool:
            refresh(spark, store_dir=p.store)
            found = spark.sql(f"SELECT count(*) FROM {FRESH_STREAM} WHERE seq = {seq}").first()
            return found is not None and found[0] == 1

        union: list[float] = []
        first_look = 0
        for n in range(UNION_SAMPLES + 1):  # the first one warms the query path
            ack = await js.publish(FRESH_STREAM, p.payload)
            at = perf_counter()
            seen = await asyncio.to_thread(visible, ack.seq)
            done = perf_counter()
            if not seen:
                done = await _until(
                    lambda s=ack.seq: asyncio.to_thread(visible, s),
                    "a row in the view",
                    ROW_SECONDS,
                )
            if n:
                union.append(done - at)
                first_look += seen
    return (
        _seconds(delta, "delta_s")
        | _seconds(union, "union_ms", 1e3)
        | {"union_first_pct": 100.0 * first_look / UNION_SAMPLES}
    )


async def freshness_s3(_url: str, p: Params) -> dict[str, float]:
    """PubAck -> row in Delta with the lake in a bucket (`_on_s3`), at the defaults otherwise."""
    assert p.store is not None, "the harness sets the store of every run"
    async with (
        _on_s3(p.store.parent, None) as (target, lake),
        js_context(target.url, p, "bench-lake-s3") as js,
    ):
        return _seconds(await delta_freshness(js, replace(p, store=target.store), lake), "delta_s")


@asynccontextmanager
async def _on_s3(workdir: Path, spark: SparkSession | None) -> AsyncIterator[tuple[Target, Lake]]:
    """A jetlake server with its lake in a bucket: SeaweedFS's S3 server on this machine
    (`benchmarks.seaweed`, the tests' own) and the server started on it in `workdir`
    (`--lake_dir s3://…`, the keys in its environment as a user's). `spark`, if given, is
    pointed at the bucket (`SeaweedS3.bind`)."""
    seaweed = await asyncio.to_thread(SeaweedS3(workdir / "seaweed").start)
    try:
        bucket = await asyncio.to_thread(seaweed.bucket)
        if spark is not None:
            seaweed.bind(spark, bucket)
        lake = seaweed.lake(bucket)
        jetlake = [str(Path(sys.executable).parent / "jetlake"), "serve", "-a", "127.0.0.1"]
        store = workdir / STORE
        args = [*jetlake, "-p", "-1", "-js", "-sd", str(store), "--lake_dir", lake.root]
        env = {**os.environ, **lake.child_env()}
        async with server_process(args, workdir / "server.log", S3_START_SECONDS, env) as (
            _,
            target,
        ):
            yield target, lake
    finally:
        await asyncio.to_thread(seaweed.stop)


async def delta_freshness(js: JetStreamContext, p: Params, lake: Lake | None) -> list[float]:
    """Seconds from PubAck to the row in Delta, for ``FRESH_SAMPLES`` messages a quarter
    second apart: each timed from its ack until the Delta log's transaction version (the
    lake's last seq, read with the ``deltalake`` package) covers it. A first message, not
    timed, waits out the compactor's start. ``lake``: where the server keeps its lake
    (None: its default folder)."""
    await js.add_stream(name=FRESH_STREAM, subjects=[FRESH_STREAM])
    await js.publish(FRESH_STREAM, p.payload)
    table, app_id = _table(p.store, FRESH_STREAM, lake)

    async def started() -> bool:
        return await asyncio.to_thread(lake_progress, table, app_id) >= 1

    await _until(started, "the first row in Delta", FIRST_ROW_SECONDS)
    progress = _progress_reader(table, app_id)
    acked: dict[int, float] = {}
    delta: list[float] = []
    publishing = True

    async def watch() -> None:
        """Time each acked seq to the first look at the Delta log that covers it."""
        while publishing or acked:
            done = await asyncio.to_thread(progress)
            now = perf_counter()
            for seq in [s for s in acked if s <= done]:
                delta.append(now - acked.pop(seq))
            if any(now - at > ROW_SECONDS for at in acked.values()):
                raise Incomplete(f"a row not in Delta within {ROW_SECONDS:g} s")
            await asyncio.sleep(POLL)

    watcher = asyncio.ensure_future(watch())
    try:
        for _ in range(FRESH_SAMPLES):
            ack = await js.publish(FRESH_STREAM, p.payload)
            acked[ack.seq] = perf_counter()
            await asyncio.sleep(FRESH_GAP)
        publishing = False
        await watcher
    finally:
        watcher.cancel()
    return delta


async def history_sql(url: str, p: Params) -> dict[str, float]:
    """Count by subject over ``history`` messages over the lake (+ tail): Spark and DuckDB.

    The stream is filled through the server and left until its compactor has
    put all of it in Delta; then ``WARM_QUERIES`` untimed queries warm the
    session and the median of ``QUERY_RUNS`` is reported, each including the
    view refresh (the live tail read), as `jetlake sql` and `refresh()` do.
    DuckDB answers the same query as `jetlake inspect` does, in this process
    (views built from the store and the Delta log on each query, one untimed
    first) and as the command (a new Python process each time, imports and all).
    """
    return await _history(url, p, None)


async def history_s3(_url: str, p: Params) -> dict[str, float]:
    """`history_sql` with the lake in a bucket (`_on_s3`): the harness's server is left
    idle, as the bucket exists only once the measure has started its S3 server."""
    assert p.store is not None, "the harness sets the store of every run"
    spark = await asyncio.to_thread(_spark)
    async with _on_s3(p.store.parent / "s3", spark) as (target, lake):
        return await _history(target.url, replace(p, store=target.store), lake)


async def _history(url: str, p: Params, lake: Lake | None) -> dict[str, float]:
    """`history_sql` against the server at `url` whose lake is `lake` (None: its default
    folder)."""
    assert p.store is not None, "the harness sets the store of every run"
    store = p.store
    spark = await asyncio.to_thread(_spark)
    async with js_context(url, p, "bench-history") as js:
        await js.add_stream(name=HISTORY_STREAM, subjects=["hist.>"])
        await publish_all(js, p, p.history, HISTORY_SUBJECTS)
        table, app_id = _table(store, HISTORY_STREAM, lake)

        async def compacted() -> bool:
            return await asyncio.to_thread(lake_progress, table, app_id) >= p.history

        await _until(compacted, f"{p.history} rows in Delta", LAKE_CATCH_UP_SECONDS, 1.0)

    def query() -> tuple[float, Counter[str]]:
        start = perf_counter()
        refresh(spark, store_dir=store, lake_dir=lake)
        rows = spark.sql(HISTORY_QUERY).collect()
        return perf_counter() - start, Counter({r.subject: r.n for r in rows})

    runs = [await asyncio.to_thread(query) for _ in range(WARM_QUERIES + QUERY_RUNS)]
    timed = runs[WARM_QUERIES:]
    _check_counts(timed[0][1], p.history)
    duck = [await asyncio.to_thread(_duckdb_query, store, lake) for _ in range(1 + QUERY_RUNS)][1:]
    _check_counts(duck[0][1], p.history)
    cli = [await asyncio.to_thread(_duckdb_command, store, lake) for _ in range(QUERY_RUNS)]
    _check_counts(cli[0][1], p.history)
    return {
        key: scale * sorted(t for t, _ in samples)[len(samples) // 2]
        for (key, scale), samples in zip(HISTORY_UNITS.items(), (timed, duck, cli), strict=True)
    }


def _duckdb_query(store: Path, lake: Lake | None) -> tuple[float, Counter[str]]:
    start = perf_counter()
    problems: list[str] = []
    table = inspect_query(HISTORY_QUERY, find_stream_dirs(store), problems.append, lake)
    if table is None or problems:
        raise Incomplete(f"jetlake inspect answered nothing: {problems}")
    elapsed = perf_counter() - start
    subjects, counts = table.column("subject").to_pylist(), table.column("n").to_pylist()
    return elapsed, Counter(dict(zip(subjects, counts, strict=True)))


def _duckdb_command(store: Path, lake: Lake | None) -> tuple[float, Counter[str]]:
    """`jetlake inspect` as a user runs it: a bucket's lake named by --lake, its keys in the
    environment."""
    jetlake = Path(sys.executable).parent / "jetlake"
    where = ["--lake", lake.root] if lake else []
    env = {**os.environ, **lake.child_env()} if lake else None
    start = perf_counter()
    done = subprocess.run(
        [jetlake, "inspect", "--store", store, *where, "--format", "json", HISTORY_QUERY],
        capture_output=True,
        check=False,
        env=env,
    )
    elapsed = perf_counter() - start
    if done.returncode:
        raise Incomplete(f"jetlake inspect failed: {done.stderr.decode(errors='replace')}")
    return elapsed, Counter({r["subject"]: r["n"] for r in json.loads(done.stdout)})


async def history_replay(url: str, p: Params) -> dict[str, float]:
    """The reference's way to the same answer: read the stream back with an ordered
    consumer (flow control, the fastest nats-py path) and count by subject."""
    async with js_context(url, p, "bench-history") as js:
        await js.add_stream(name=HISTORY_STREAM, subjects=["hist.>"])
        await publish_all(js, p, p.history, HISTORY_SUBJECTS)
        counts: Counter[str] = Counter()
        deliveries = Deliveries(p.history)

        async def on_msg(msg: Msg) -> None:
            counts[msg.subject] += 1
            deliveries.hit()

        start = perf_counter()
        sub = await js.subscribe("hist.>", cb=on_msg, ordered_consumer=True)
        await deliveries.wait()
        elapsed = perf_counter() - start
        await sub.unsubscribe()
    _check_counts(counts, p.history)
    return {key: scale * elapsed for key, scale in HISTORY_UNITS.items()}


def _check_counts(counts: Counter[str], total: int) -> None:
    """Both sides must give the one right answer: round-robin over the subjects."""
    n = len(HISTORY_SUBJECTS)
    expected = {s: total // n + (i < total % n) for i, s in enumerate(HISTORY_SUBJECTS)}
    if dict(counts) != {s: c for s, c in expected.items() if c}:
        raise Incomplete(f"count by subject is wrong: {dict(counts)}")


def _build_stream(
    store: Path,
    name: str,
    count: int,
    payload: bytes | Callable[[int], bytes],
    metadata: dict[str, str] | None = None,
    subjects: list[str] | None = None,
) -> None:
    """A stream folder as the server leaves it, written through the segment store directly
    (no server and no client, so building a million rows takes seconds), all sealed."""
    folder = store / STREAMS / name
    segments = FileStore(folder, name=name)
    subjects = subjects or [f"{name.lower()}.{i}" for i in range(16)]
    body = payload if callable(payload) else lambda _: payload
    try:
        for first in range(0, count, COMPACT_BATCH):
            now = time_ns()
            size = min(COMPACT_BATCH, count - first)
            segments.append(
                [
                    NewMsg(subjects[(first + i) % len(subjects)], None, body(first + i), now)
                    for i in range(size)
                ]
            )
        segments.seal(older_than_ns=time_ns())
        segments.sync()
    finally:
        segments.close()
    config = {"name": name, "subjects": [f"{name.lower()}.>"], "storage": "file"}
    config["metadata"] = metadata or {}
    doc = {"config": config, "created": rfc3339(time_ns())}
    (folder / META_FILE).write_text(json.dumps(doc))


async def compaction(_url: str, p: Params) -> dict[str, float]:
    """MB/s of segments a warm session turns into Delta rows (`jetlake job compact`'s pass).

    Offline (no server, no URL): ``history`` messages are built as sealed
    segments, a small stream is compacted first to warm the session, then one
    timed pass over the big one. Per core divides by every core Spark may use.
    """
    return await _compaction(p, None)


async def compaction_s3(_url: str, p: Params) -> dict[str, float]:
    """The same pass with the lake in a bucket of SeaweedFS on this machine."""
    assert p.store is not None, "the harness sets the store of every run"
    spark = await asyncio.to_thread(_spark)
    seaweed = await asyncio.to_thread(SeaweedS3(p.store.parent / "seaweed").start)
    try:
        bucket = await asyncio.to_thread(seaweed.bucket)
        seaweed.bind(spark, bucket)
        return await _compaction(p, seaweed.lake(bucket))
    finally:
        await asyncio.to_thread(seaweed.stop)


async def _compaction(p: Params, lake: Lake | None) -> dict[str, float]:
    """`compaction` into `lake` (None: each store's default folder)."""
    assert p.store is not None, "the harness sets the store of every run"
    spark = await asyncio.to_thread(_spark)
    warm, main = p.store / "warm", p.store / "main"
    await asyncio.to_thread(_build_stream, warm, "WARM", WARM_ROWS, p.payload)
    await asyncio.to_thread(Compactor(spark, warm, lake or default_lake_dir(warm)).run_once)
    await asyncio.to_thread(_build_stream, main, "COMPACT", p.history, p.payload)
    compactor = Compactor(spark, main, lake or default_lake_dir(main))
    summary = await asyncio.to_thread(compactor.run_once)
    if summary.errors or summary.rows != p.history:
        raise Incomplete(f"compacted {summary.rows}/{p.history} rows: {summary.errors}")
    rate = summary.bytes / MB / summary.seconds
    cores = os.cpu_count() or 1
    return {
        "mb_per_s": rate,
        "mb_per_s_core": rate / cores,
        "rows_per_s": summary.rows / summary.seconds,
    }


TYPED_SCHEMA = "bench"
JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "amount": {"type": "number"},
        "customer": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "tier": {"type": "string"}},
        },
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["id", "amount"],
}
AVRO_SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "double"},
        {
            "name": "customer",
            "type": {
                "type": "record",
                "name": "Customer",
                "fields": [{"name": "id", "type": "long"}, {"name": "tier", "type": "string"}],
            },
        },
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}
TYPED_FORMATS = (  # (stream, jetlake.lake.format, schema name or None, payload kind)
    ("RAW", "raw", None, "json"),
    ("JSONI", "json", None, "json"),
    ("JSONS", "json", TYPED_SCHEMA, "json"),
    ("AVRO", "avro", TYPED_SCHEMA, "avro"),
)
FILTER_RAW = (
    "SELECT count(*) AS n FROM RAW WHERE from_json(CAST(data AS STRING), "
    "'customer STRUCT<id: BIGINT>').customer.id = 7"
)
FILTER_TYPED = "SELECT count(*) AS n FROM JSONI WHERE customer.id = 7"


def _order(i: int) -> dict[str, object]:
    return {"id": i, "amount": i * 0.5, "customer": {"id": i % 1000, "tier": "gold"},
            "tags": ["a", "b"]}  # fmt: skip


def _avro_payload() -> Callable[[int], bytes]:
    import io

    import fastavro

    parsed = fastavro.parse_schema(AVRO_SCHEMA)

    def encode(i: int) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, _order(i))
        return buf.getvalue()

    return encode


def _typed_store(store: Path, name: str, fmt: str, schema: str | None, kind: str, n: int) -> None:
    """A store holding one stream of `n` orders, typed as `fmt` says, and the schemas bucket
    (kept out of the lake, so the timed pass is the stream's alone)."""
    doc = JSON_SCHEMA if fmt == "json" else AVRO_SCHEMA
    _build_stream(
        store,
        "KV_jetlake_schemas",
        1,
        json.dumps(doc).encode(),
        {"jetlake.lake": "off"},
        [f"$KV.jetlake_schemas.{TYPED_SCHEMA}"],
    )
    meta = {"jetlake.lake.format": fmt} | ({"jetlake.lake.schema": schema} if schema else {})
    body = _avro_payload() if kind == "avro" else (lambda i: json.dumps(_order(i)).encode())
    _build_stream(store, name, n, body, meta)


async def typed_compaction(_url: str, p: Params) -> dict[str, float]:
    """Typed compaction against raw, and a filter on a typed field against `from_json`.

    Offline: ``history`` orders (a JSON object of about 100 bytes, or its Avro
    encoding) per format, each built as sealed segments in a store of its own,
    one timed warm compact pass each (rows/s, MB/s of segments). Then the same
    count by customer over the compacted raw table through `from_json` and
    over the inferred JSON table's typed column (median of ``QUERY_RUNS`` after
    warm-up runs, view refresh included).
    """
    assert p.store is not None, "the harness sets the store of every run"
    spark = await asyncio.to_thread(_spark)
    warm = p.store / "warm"
    await asyncio.to_thread(_build_stream, warm, "WARM", WARM_ROWS, p.payload)
    await asyncio.to_thread(Compactor(spark, warm, default_lake_dir(warm)).run_once)
    out: dict[str, float] = {}
    for name, fmt, schema, kind in TYPED_FORMATS:
        store = p.store / name.lower()
        await asyncio.to_thread(_typed_store, store, name, fmt, schema, kind, p.history)
        compactor = Compactor(spark, store, default_lake_dir(store))
        summary = await asyncio.to_thread(compactor.run_once)
        if summary.errors or summary.rows != p.history:
            raise Incomplete(f"{name}: compacted {summary.rows}/{p.history}: {summary.errors}")
        out[f"{name.lower()}_rows_per_s"] = summary.rows / summary.seconds
        out[f"{name.lower()}_mb_per_s"] = summary.bytes / MB / summary.seconds

    def timed(query: str, store: Path) -> float:
        times = []
        for _ in range(WARM_QUERIES + QUERY_RUNS):
            start = perf_counter()
            refresh(spark, store_dir=store)
            found = spark.sql(query).first()
            times.append(perf_counter() - start)
            if found is None or found.n != p.history // 1000 + (p.history % 1000 > 7):
                raise Incomplete(f"{query}: {found}")
        return sorted(times[WARM_QUERIES:])[QUERY_RUNS // 2]

    out["from_json_query_s"] = await asyncio.to_thread(timed, FILTER_RAW, p.store / "raw")
    out["typed_query_s"] = await asyncio.to_thread(timed, FILTER_TYPED, p.store / "jsoni")
    return out
