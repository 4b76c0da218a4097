"""The compactor killed with SIGKILL mid-append, again and again: no row lost, none duplicated.

The killed compactor is a `jetlake job compact` process (a JVM of its own, so the kill
is a real one); the compactor that finishes after it runs on the tests' shared session,
which reads the same files and spares a JVM start per test.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyspark.sql import SparkSession

from log.compactor.compact import Compactor
from log.compactor.layout import STREAMS, StreamRef
from log.compactor.location import Lake
from log.segments import FileStore, NewMsg, SegmentConfig

ROWS_PER_SEGMENT = 400
SEGMENTS = 6  # 2,400 rows: three appends of 800, the third retyping `v` (from 2,000)
MAX_ROWS = 800
# One kill per run keeps CI's JVM starts down; the soak runs more kill points per table.
KILLS = [1, pytest.param(3, marks=pytest.mark.soak)]


def build_store(
    store: Path,
    metadata: dict[str, str] | None = None,
    payload: Callable[[int], bytes] = lambda i: b"%d" % i,
) -> tuple[StreamRef, set[int]]:
    """A stream folder as the server leaves it: stream.json, sealed segments, explicit deletes."""
    folder = store / STREAMS / "CRASH"
    folder.mkdir(parents=True)
    config = {"name": "CRASH", "subjects": ["c.>"], "storage": "file", "metadata": metadata or {}}
    doc: dict[str, Any] = {"config": config}
    doc["created"] = "2026-01-02T03:04:05.000000006Z"
    (folder / "stream.json").write_text(json.dumps(doc))
    fs = FileStore(folder, name="CRASH", config=SegmentConfig(max_msgs=ROWS_PER_SEGMENT))
    now = time.time_ns()
    for k in range(SEGMENTS + 1):  # the last one stays active
        base = k * ROWS_PER_SEGMENT
        fs.append(
            [NewMsg(f"c.{i % 5}", None, payload(i), now + i) for i in range(base, base + 400)]
        )
    deleted = {7, 2000, 2001}
    for seq in deleted:
        fs.remove(seq, explicit=True)
    fs.close()
    expected = set(range(1, SEGMENTS * ROWS_PER_SEGMENT + 1)) - deleted
    return StreamRef.load(folder), expected


def kill_job(store: Path, *, kill_after: int, rng: random.Random) -> int:
    """`jetlake job compact`, SIGKILLed once `kill_after` appends have begun."""
    argv = [sys.executable, "-m", "jobs.cli", "job", "compact", "--store", str(store)]
    proc = subprocess.Popen(
        [*argv, "--max_rows", str(MAX_ROWS), "--spark_master", "local[1]"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:
        if "appending" in line:
            seen += 1
            if seen == kill_after:
                time.sleep(rng.uniform(0.0, 2.5))  # before, inside or just after a commit
                proc.kill()
                break
    return proc.wait(timeout=120)


def finish(spark: SparkSession, store: Path) -> None:
    """A whole compactor pass after the killed one, as the job runs it, on the shared session."""
    summary = Compactor(spark, store, Lake.at(store / "lake"), max_rows=MAX_ROWS).run_once()
    assert not summary.errors, summary.errors


def table_seqs(ref: StreamRef, lake: Path, name: str = "CRASH") -> tuple[list[int], int]:
    """The table's seqs, sorted (duplicates kept), and the version its log records."""
    try:
        table = DeltaTable(str(ref.typed_table_path(lake, name)))
    except TableNotFoundError:  # killed before its first commit: a log folder, no commit
        return [], 0
    seqs = sorted(table.to_pyarrow_table(columns=["seq"]).column("seq").to_pylist())
    return seqs, int(table.transaction_version(ref.app_id) or 0)


@pytest.mark.timeout(600)  # up to four JVM starts on two cores
@pytest.mark.parametrize("kills", KILLS)
def test_sigkill_mid_append_then_restart_is_exact(
    tmp_path: Path, spark: SparkSession, kills: int
) -> None:
    store = tmp_path / "store"
    ref, expected = build_store(store)
    rng = random.Random(5)
    for _ in range(kills):
        assert kill_job(store, kill_after=1, rng=rng) == -9
        if ref.table_path(store / "lake").is_delta_table():
            seqs, done = table_seqs(ref, store / "lake")
            # Whatever committed is whole: exactly the rows up to the recorded version.
            assert seqs == sorted(s for s in expected if s <= done)
    finish(spark, store)
    seqs, done = table_seqs(ref, store / "lake")
    assert done == SEGMENTS * ROWS_PER_SEGMENT
    assert seqs == sorted(expected)  # no loss, no duplicate
    done_already = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "job", "compact", "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done_already.returncode == 0  # and no JVM was started for nothing:
    assert "every stream's lake is up to date" in done_already.stdout


def test_a_log_folder_without_commits_is_an_empty_table(
    tmp_path: Path, spark: SparkSession
) -> None:
    """A compactor killed before its first commit leaves `_delta_log/` and nothing in it."""
    store = tmp_path / "store"
    ref, expected = build_store(store)
    (ref.table_path(store / "lake") / "_delta_log").mkdir()
    assert table_seqs(ref, store / "lake") == ([], 0)
    finish(spark, store)
    seqs, done = table_seqs(ref, store / "lake")
    assert (seqs, done) == (sorted(expected), SEGMENTS * ROWS_PER_SEGMENT)


def _order(i: int) -> bytes:
    """A JSON order; every seventh payload is not JSON (a reject), from 2000 on `v` is text."""
    if i % 7 == 3:
        return b"{broken %d" % i
    return b'{"id": %d, "v": %s}' % (i, b'"t"' if i >= 2000 else b"%d" % i)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kills", KILLS)
def test_sigkill_mid_typed_append_leaves_both_tables_exact(
    tmp_path: Path, spark: SparkSession, kills: int
) -> None:
    """A typed stream's group is two commits (rejects, then the stream's own table, one of
    them a rewrite when `v` turns to text): killed anywhere, each table ends exact."""
    store = tmp_path / "store"
    ref, expected = build_store(store, {"jetlake.lake.format": "json"}, _order)
    bad = {s for s in expected if (s - 1) % 7 == 3}  # seq = i + 1
    rng = random.Random(11)
    for _ in range(kills):
        assert kill_job(store, kill_after=2, rng=rng) == -9
    finish(spark, store)
    good, done = table_seqs(ref, store / "lake")
    rejects, _ = table_seqs(ref, store / "lake", "CRASH_rejects")
    assert done == SEGMENTS * ROWS_PER_SEGMENT
    assert good == sorted(expected - bad) and rejects == sorted(bad)
    typed = DeltaTable(str(ref.table_path(store / "lake"))).to_pyarrow_table(columns=["id", "v"])
    assert typed.schema.field("v").type == "string"  # retyped: numbers kept as their text
