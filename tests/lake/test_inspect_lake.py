"""`jetlake inspect` (DuckDB) over a stream's whole history: Delta tables the real compactor
wrote, unioned with the live segments after them.

Expected answers come from what the tests wrote and erased, never from the
reader under test; where Spark is at hand its view is the second witness.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from log.compactor.compact import Compactor, Summary, lake_progress
from log.compactor.layout import default_lake_dir, read_pin
from log.segments import NewMsg, list_segments
from sql.inspect import find_stream_dirs, query
from sql.session import refresh
from tests.conftest import Connect
from tests.lake.conftest import Folder, Lake

EXACT = "SELECT count(*) AS n, count(DISTINCT seq) AS d, min(seq) AS lo, max(seq) AS hi FROM S"


def store_of(folder: Folder) -> Path:
    return folder.dir.parents[3]


def duck(folder: Folder, sql: str) -> list[dict]:
    """The rows DuckDB answers, as `jetlake inspect` computes them; no warning allowed."""
    warnings: list[str] = []
    table = query(sql, find_stream_dirs(store_of(folder)), warnings.append)
    assert table is not None and warnings == []
    return table.to_pylist()


def compact(spark: SparkSession, folder: Folder, **options: int) -> Summary:
    store = store_of(folder)
    summary = Compactor(spark, store, default_lake_dir(store), **options).run_once()
    assert not summary.errors, summary.errors
    return summary


def test_lake_and_tail_meet_with_every_seq_once_as_spark_sees_them(
    spark: SparkSession, folder: Folder
) -> None:
    folder.publish(300)
    assert duck(folder, EXACT) == [{"n": 300, "d": 300, "lo": 1, "hi": 300}]  # no lake yet
    assert compact(spark, folder).rows == 300
    folder.publish(50)  # sealed, not compacted
    folder.publish(7, seal=False)  # in the active segment
    folder.segments.remove(20, explicit=True)  # in Delta, the DELETE not carried yet
    folder.segments.remove(310, explicit=True)  # in the tail
    folder.segments.sync()
    want = [s for s in range(1, 358) if s not in (20, 310)]

    columns = "stream, seq, ts, subject, headers, data, date"
    rows = duck(folder, f"SELECT {columns} FROM S ORDER BY seq")
    assert [r["seq"] for r in rows] == want
    firsts = (1, 301, 351)  # of the three publishes, each numbering its messages from 0
    assert [r["data"] for r in rows] == [
        b"%d" % (s - max(f for f in firsts if f <= s)) for s in want
    ]
    refresh(spark, store_dir=store_of(folder))
    spark_rows = [r.asDict() for r in spark.sql(f"SELECT {columns} FROM S ORDER BY seq").collect()]
    assert list(rows[0]) == list(spark_rows[0])  # the same columns, in the same order
    for mine, theirs in zip(rows, spark_rows, strict=True):
        assert mine["ts"].timestamp() == theirs["ts"].timestamp()
        assert {**mine, "ts": None} == {**theirs, "ts": None}

    compact(spark, folder)  # the tail's sealed part and both deletes reach the lake
    assert [r["seq"] for r in duck(folder, "SELECT seq FROM S ORDER BY seq")] == want
    by_subject = duck(folder, "SELECT subject, count(*) AS n FROM s GROUP BY 1 ORDER BY 1")
    expected = Counter(f"s.{i % 4}" for i in [*range(300), *range(50), *range(7)])
    expected.subtract(["s.3", "s.1"])  # seq 20 is message 19; seq 310 is message 9
    assert {r["subject"]: r["n"] for r in by_subject} == expected


def test_every_seq_once_while_compactions_commit_and_reclaim_follows(
    spark: SparkSession, folder: Folder
) -> None:
    """Twelve commits, one per segment, while DuckDB asks again and again; the store
    reclaims what each new pin covers, as the server does, so rows leave the tail."""
    segments, per = 12, 250
    total = segments * per
    folder.segments.hold_for_lake(0)
    for _ in range(segments):
        folder.publish(per)
    table = folder.ref.table_path(default_lake_dir(store_of(folder)))
    failed: list[BaseException] = []

    def run() -> None:
        try:
            compact(spark, folder, max_rows=per)
        except BaseException as exc:  # reported by the main thread
            failed.append(exc)

    compactor = threading.Thread(target=run, name="compactor")
    compactor.start()
    seen: set[int] = set()
    reclaimed = 0
    while compactor.is_alive() or not seen or max(seen) < total:
        seen.add(lake_progress(table, folder.ref.app_id))
        pin = read_pin(folder.ref)
        if pin is not None and pin.seq > reclaimed:
            folder.segments.remove_many(range(reclaimed + 1, pin.seq + 1))  # retired by limits
            folder.segments.hold_for_lake(pin.seq)  # reclaim may now take them
            reclaimed = pin.seq
        assert duck(folder, EXACT) == [{"n": total, "d": total, "lo": 1, "hi": total}]
        if not compactor.is_alive() and failed:
            break
    compactor.join()
    assert failed == []
    # Queries ran between commits (how many depends on how fast this machine commits;
    # each query above was exact whatever the lake held).
    assert {s for s in seen if 0 < s < total}, seen
    assert all(s.first_seq > reclaimed for s in list_segments(folder.dir) if s.rows)
    assert duck(folder, EXACT) == [{"n": total, "d": total, "lo": 1, "hi": total}]


async def test_cli_over_lake_and_live_tail(lake: Lake, connect: Connect) -> None:
    """A real server with a capped stream: the lake keeps what the limit retired, the live
    tail adds what came after the compaction, and `jetlake inspect` answers both at once."""
    server = lake.start()
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="CAPPED", subjects=["capped.>"], max_msgs=100)
    sent: Counter[str] = Counter()
    for i in range(600):
        headers = {"Trace": str(i)} if i % 2 else None
        await js.publish(f"capped.{i % 5}", b"%d" % i, headers=headers)
        sent[f"capped.{i % 5}"] += 1
    await lake.sealed("CAPPED", 600)
    assert lake.compact().rows == 600
    for i in range(600, 630):
        await js.publish("capped.late", b"%d" % i)
        sent["capped.late"] += 1
    info = await js.stream_info("CAPPED")
    assert (info.state.messages, info.state.last_seq) == (100, 630)

    def inspect(sql: str) -> list[dict[str, str]]:
        jetlake = Path(sys.executable).parent / "jetlake"
        done = subprocess.run(
            [jetlake, "inspect", "--store", lake.store, "--format", "csv", sql],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert (done.returncode, done.stderr) == (0, "")
        return list(csv.DictReader(io.StringIO(done.stdout)))

    exact = inspect(
        "SELECT count(*) n, count(DISTINCT seq) d, min(seq) lo, max(seq) hi FROM capped"
    )
    assert exact == [{"n": "630", "d": "630", "lo": "1", "hi": "630"}]
    counts = inspect("SELECT subject, count(*) AS n FROM capped GROUP BY 1")
    assert {r["subject"]: int(r["n"]) for r in counts} == sent
    rows = inspect("SELECT seq, headers, data FROM capped WHERE seq IN (2, 3, 630) ORDER BY seq")
    assert [(r["seq"], r["data"]) for r in rows] == [("2", "1"), ("3", "2"), ("630", "629")]
    assert [json.loads(r["headers"]) if r["headers"] else None for r in rows] == [
        {"Trace": ["1"]},
        None,
        None,
    ]
    spark = lake.sql("SELECT subject, count(*) AS n FROM CAPPED GROUP BY subject")
    assert {r.subject: r.n for r in spark} == sent


def test_a_table_with_deletion_vectors_is_read_through_deltalake(
    spark: SparkSession, folder: Folder
) -> None:
    """Arrow datasets cannot apply deletion vectors: the rows they hide would come back."""
    folder.publish(100)
    compact(spark, folder)
    table = folder.ref.table_path(default_lake_dir(store_of(folder)))
    spark.sql(
        f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)"
    )
    spark.sql(f"DELETE FROM delta.`{table}` WHERE seq <= 10")
    assert DeltaTable(str(table)).protocol().min_reader_version == 3
    folder.publish(5, seal=False)
    assert duck(folder, EXACT) == [{"n": 95, "d": 95, "lo": 11, "hi": 105}]


TYPED_VIEWS = ("S", "S_rejects", "shipped", "shipped_rejects")


def typed_views_agree(spark: SparkSession, folder: Folder) -> dict[str, list[dict]]:
    """Every typed view as DuckDB answers it, checked against Spark's view of the same name:
    the same columns, and the same values in every one but the timestamps'."""
    refresh(spark, store_dir=store_of(folder))
    out = {}
    for view in TYPED_VIEWS:
        columns = spark.table(view).columns
        table = query(f"SELECT * FROM {view} LIMIT 0", find_stream_dirs(store_of(folder)), print)
        # The same columns; Spark reads a typed table as Parquet with `date` from its path,
        # which puts `date` last, while the table (and DuckDB) has it before the payload.
        assert table is not None and sorted(table.column_names) == sorted(columns), view
        shown = ", ".join(c for c in columns if c not in ("ts", "headers"))
        mine = duck(folder, f"SELECT {shown} FROM {view} ORDER BY seq")
        theirs = spark.sql(f"SELECT {shown} FROM {view} ORDER BY seq").collect()
        assert mine == [r.asDict(recursive=True) for r in theirs], view
        out[view] = mine
    return out


@pytest.mark.timeout(600)  # Spark reads the typed side tables through delta-spark
def test_typed_views_match_spark_before_and_after_compaction(
    spark: SparkSession, folder: Folder
) -> None:
    """JSON inferred, a fan-out table, rejects: the tail typed as compaction types it, and a
    column the tail retyped (a widening, a conflict kept as JSON text) retyped in the lake."""
    doc = json.loads((folder.dir / "stream.json").read_text())
    doc["config"]["metadata"] = {
        "jetlake.lake.format": "json",
        "jetlake.lake.tables": "s.ship.*=shipped",
    }
    (folder.dir / "stream.json").write_text(json.dumps(doc))

    def send(*msgs: tuple[str, object], seal: bool = True) -> None:
        now = time.time_ns()
        folder.segments.append(
            [
                NewMsg(s, None, m if isinstance(m, bytes) else json.dumps(m).encode(), now)
                for s, m in msgs
            ]
        )
        if seal:
            folder.segments.seal(older_than_ns=time.time_ns())
        folder.segments.sync()

    send(
        *[("s.created.eu", {"id": i, "amount": i, "customer": {"id": i % 3}}) for i in range(6)],
        ("s.created.eu", b"{not json"),
        ("s.ship.eu", {"id": 1, "carrier": "ups"}),
    )
    before = typed_views_agree(spark, folder)
    compact(spark, folder)
    assert typed_views_agree(spark, folder) == before  # the lake holds what the tail showed
    send(
        ("s.created.us", {"id": 6, "amount": 6.5, "customer": {"id": 1}, "coupon": "X"}),
        ("s.created.eu", {"id": 7, "amount": 7, "customer": "walk-in"}),
        ("s.created.eu", b"[]"),
        seal=False,
    )
    after = typed_views_agree(spark, folder)
    assert [r["amount"] for r in after["S"]] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.5, 7.0]
    assert [r["customer"] for r in after["S"]][-2:] == ['{"id":1}', "walk-in"]
    assert [r["coupon"] for r in after["S"]] == [None] * 6 + ["X", None]
    assert [r["seq"] for r in after["S_rejects"]] == [7, 11]
    assert [(r["id"], r["carrier"]) for r in after["shipped"]] == [(1, "ups")]
