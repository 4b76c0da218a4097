"""What the SQL service watches between queries (`sql.warming`) and which lake tables its
views still read (`sql.views.lake_tables`): the pure parts, over real folders, no Spark."""

from __future__ import annotations

from pathlib import Path

from log.compactor.layout import META_FILE, STREAMS, Pin, StreamRef, lake_at, write_pin
from log.state_file import write_state
from sql.views import lake_tables
from sql.warming import marks

CREATED = "2026-11-28T06:00:00.000000001Z"


def _stream(store: Path, name: str) -> Path:
    folder = store / STREAMS / name
    folder.mkdir(parents=True)
    config = {"config": {"name": name, "storage": "file"}, "created": CREATED}
    write_state(folder / META_FILE, config)
    return folder


def test_a_commit_or_a_stream_created_or_deleted_is_seen_a_publish_is_not(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    lake = lake_at(str(tmp_path / "lake"), store)
    orders = _stream(store, "ORDERS")
    log = Path(StreamRef.load(orders).table_path(lake).uri) / "_delta_log"
    log.mkdir(parents=True)
    first = marks(store, lake)
    (orders / "1.arrow").write_bytes(b"a publish")
    (log.parent / "part-0.parquet").write_bytes(b"a data file, before its commit")
    assert marks(store, lake) == first
    (log / "00000000000000000000.json").write_text("{}")  # the commit
    committed = marks(store, lake)
    assert committed != first
    _stream(store, "EVENTS")
    created = marks(store, lake)
    assert created != committed
    (store / STREAMS / "EVENTS" / META_FILE).unlink()  # deleted (its folder goes next)
    assert marks(store, lake) == committed


def test_a_lake_in_object_storage_is_watched_by_its_streams_and_their_pins(
    tmp_path: Path,
) -> None:
    """The compactor moves a stream's pin after each commit (new rows, a new typed table, a
    schema change); a publish leaves it."""
    store = tmp_path / "store"
    lake = lake_at("s3://bucket/lake", store)
    orders = _stream(store, "ORDERS")
    first = marks(store, lake)
    assert first == {(str(orders), 0, 0)}
    (orders / "1.arrow").write_bytes(b"a publish")
    assert marks(store, lake) == first
    write_pin(StreamRef.load(orders), Pin(StreamRef.load(orders).app_id, "t", 5))
    committed = marks(store, lake)
    assert committed != first
    write_pin(StreamRef.load(orders), Pin(StreamRef.load(orders).app_id, "t", 10))
    assert marks(store, lake) not in (first, committed)


def test_the_tables_read_are_each_streams_current_one_and_its_typed_tables(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    lake = lake_at(str(tmp_path / "lake"), store)
    main = StreamRef.load(_stream(store, "ORDERS")).table_path(lake)
    live = lake_tables(store, lake)
    assert live(main)
    assert live(main.with_name(f"{main.name}.rejects"))  # a typed table beside it
    assert not live(main.with_name("20261127T000000.000000001Z"))  # a former incarnation
    assert not live(lake.path("GONE") / main.name)


def test_an_unreadable_stream_folder_takes_no_table_for_gone(tmp_path: Path) -> None:
    store = tmp_path / "store"
    lake = lake_at(str(tmp_path / "lake"), store)
    main = StreamRef.load(_stream(store, "ORDERS")).table_path(lake)
    (store / STREAMS / "ORDERS" / META_FILE).write_text("{not json")
    assert lake_tables(store, lake)(main.with_name("20261127T000000.000000001Z"))
