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


class _Frame:
    """A frame that counts its registrations."""

    def __init__(self, source: object = None) -> None:
        self.source = source
        self.registered = 0

    def createOrReplaceTempView(self, _name: str) -> None:
        self.registered += 1


class _Session:
    def table(self, name: str) -> _Frame:
        return _Frame(name)


def test_views_are_registered_again_only_when_their_frames_change(tmp_path: Path) -> None:
    """A stream frame kept (no file changed) is not registered again, and the bucket view
    derived from it is neither built nor registered again; a new stream frame rebuilds both."""
    store = tmp_path / "store"
    (store / "jetstream" / "$G" / "streams").mkdir(parents=True)
    stream = {"KV_config": _Frame()}
    built: list[object] = []

    def streams(*_: object) -> dict[str, object]:
        return dict(stream)

    def buckets(spark: object, *_: object) -> dict[str, object]:
        def kv(source: object) -> _Frame:
            built.append(source)
            return _Frame(source)

        return {"kv_config": sql.views.derived(spark, "KV_config", "kv_config", kv)}  # type: ignore[arg-type]

    spark = _Session()
    lake = lake_at(str(tmp_path / "lake"), store)

    def register() -> set[str]:
        names, changed = sql.views.register_changed(spark, store, lake, (streams, buckets))  # type: ignore[arg-type]
        assert names == {"$G": ["KV_config", "kv_config"]}
        return changed

    assert register() == {"KV_config", "kv_config"}
    assert register() == set()
    assert [b.source for b in built] == ["`KV_config`"]  # type: ignore[attr-defined]
    assert stream["KV_config"].registered == 1
    stream["KV_config"] = _Frame()  # the stream was written to
    assert register() == {"KV_config", "kv_config"}
    assert len(built) == 2
    stream.clear()
    names, changed = sql.views.register_changed(spark, store, lake, (streams,))  # type: ignore[arg-type]
    assert names == {"$G": []} and changed == set()
    assert "KV_config" not in sql.views._REGISTERED and "kv_config" not in sql.views._DERIVED
