"""A stream's frames are read again only when its files changed (the SQL service registers
the views at every query): the pure part, with the frames' reader counted, no Spark."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import sql.views
from log.compactor.layout import StreamRef, lake_at

CREATED = "2026-11-28T06:00:00.000000001Z"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    done: list[str] = []

    def read(spark: object, stream: StreamRef, lake: object) -> dict[str, object]:
        done.append(stream.name)
        return {stream.name: object()}

    monkeypatch.setattr(sql.views, "stream_frames", read)
    return done


def test_frames_are_kept_until_the_stream_or_its_lake_folder_changes(
    tmp_path: Path, reads: list[str]
) -> None:
    store = tmp_path / "store"
    folder = store / "jetstream" / "$G" / "streams" / "ORDERS"
    folder.mkdir(parents=True)
    segment = folder / "1.arrow"
    segment.write_bytes(b"a")
    lake = lake_at(str(tmp_path / "lake"), store)
    stream = StreamRef("ORDERS", folder, CREATED, {}, "file")
    table = Path(stream.table_path(lake).uri)
    (table / "_delta_log").mkdir(parents=True)
    spark = object()

    first = sql.views._current_frames(spark, stream, lake)  # type: ignore[arg-type]
    assert sql.views._current_frames(spark, stream, lake) is first  # type: ignore[arg-type]
    assert reads == ["ORDERS"]

    with segment.open("ab") as out:  # a publish
        out.write(b"b")
    assert sql.views._current_frames(spark, stream, lake) is not first  # type: ignore[arg-type]
    assert len(reads) == 2

    (table / "_delta_log" / "00000000000000000001.json").write_text("{}")  # a compaction
    sql.views._current_frames(spark, stream, lake)  # type: ignore[arg-type]
    (table.parent / f"{table.name}.rejects").mkdir()  # a typed table beside it
    (table.parent / f"{table.name}.rejects" / "x.json").write_text("{}")
    sql.views._current_frames(spark, stream, lake)  # type: ignore[arg-type]
    assert len(reads) == 4

    (table / "part-0.parquet").write_bytes(b"data")  # data files come with a log entry
    os.utime(segment)  # same size, a new mtime: a rewrite
    sql.views._current_frames(spark, stream, lake)  # type: ignore[arg-type]
    assert len(reads) == 5

    sql.views._current_frames(object(), stream, lake)  # type: ignore[arg-type]
    assert len(reads) == 6  # another session's frames are its own


def test_a_lake_in_object_storage_is_read_every_time(tmp_path: Path, reads: list[str]) -> None:
    folder = tmp_path / "ORDERS"
    folder.mkdir()
    lake = lake_at("s3://bucket/lake", tmp_path)
    stream = StreamRef("ORDERS", folder, CREATED, {}, "file")
    spark = object()
    sql.views._current_frames(spark, stream, lake)  # type: ignore[arg-type]
    sql.views._current_frames(spark, stream, lake)  # type: ignore[arg-type]
    assert reads == ["ORDERS", "ORDERS"]
