"""A typed group half committed, then `jetlake.lake.tables` changed: no row in two tables.

The compactor dies (here: raises) after a group's fan-out table committed and before
the stream's own table did. The stream's metadata then routes the fan-out table to
another subject. The next pass routes that group as it was begun (the metadata it
recorded), so each row is in exactly one table, and the groups after it follow the new
routing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from log.compactor.compact import Compactor
from log.compactor.layout import META_FILE, StreamRef
from tests.lake.test_crash import ROWS_PER_SEGMENT, SEGMENTS, build_store, table_seqs

GROUP = 2 * ROWS_PER_SEGMENT  # max_rows below: two segments a group


class Crash(Exception):
    pass


def subject_of(seq: int) -> str:
    return f"c.{(seq - 1) % 5}"  # build_store's subjects, by seq


def test_a_half_committed_group_is_routed_as_begun(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    lake = store / "lake"
    metadata = {"jetlake.lake.format": "json", "jetlake.lake.tables": "c.1=ONES"}
    ref, expected = build_store(store, metadata, lambda i: b'{"id": %d}' % i)
    real_append = Compactor._append

    def dies_before_the_streams_own_table(
        self: Compactor, stream: StreamRef, table: Path, *args: object
    ) -> None:
        if table == stream.table_path(lake):
            raise Crash(table)
        real_append(self, stream, table, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Compactor, "_append", dies_before_the_streams_own_table)
    with pytest.raises(Crash):
        Compactor(spark, store, lake, max_rows=GROUP).compact_stream(ref)
    monkeypatch.setattr(Compactor, "_append", real_append)
    assert table_seqs(ref, lake, "ONES")[1] == GROUP  # the fan-out table landed alone
    assert table_seqs(ref, lake)[1] == 0

    doc = json.loads((ref.dir / META_FILE).read_text())
    doc["config"]["metadata"]["jetlake.lake.tables"] = "c.2=ONES"
    (ref.dir / META_FILE).write_text(json.dumps(doc))
    summary = Compactor(spark, store, lake, max_rows=GROUP).run_once()
    assert not summary.errors

    own, done = table_seqs(ref, lake)
    ones, _ = table_seqs(ref, lake, "ONES")
    assert done == SEGMENTS * ROWS_PER_SEGMENT
    assert sorted(own + ones) == sorted(expected)  # each row once, in one table
    assert {subject_of(s) for s in ones if s <= GROUP} == {"c.1"}  # routed as begun
    assert {subject_of(s) for s in ones if s > GROUP} == {"c.2"}  # then as changed
