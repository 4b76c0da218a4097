"""Where a stream's table lives and who owns it: pure functions of its folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from log.compactor.layout import LakeError, Pin, StreamRef, read_pin, write_pin


def stream_at(tmp_path: Path, **config: object) -> StreamRef:
    folder = tmp_path / "S"
    folder.mkdir()
    doc = {"config": {"name": "S", "storage": "file", **config}}
    doc["created"] = "2026-11-21T10:54:17.1234Z"
    (folder / "stream.json").write_text(json.dumps(doc))
    return StreamRef.load(folder)


def test_table_per_incarnation_and_app_id(tmp_path: Path) -> None:
    ref = stream_at(tmp_path)
    assert ref.lake_on and ref.deletes_reach_lake
    assert ref.app_id == "jetlake:S:2026-11-21T10:54:17.1234Z"
    assert str(ref.table_path("/lake")) == "/lake/S/20261121T105417.123400000Z"


def test_metadata_keys(tmp_path: Path) -> None:
    meta = {"jetlake.lake": "OFF", "jetlake.lake.table": "/t", "jetlake.lake.deletes": "keep"}
    ref = stream_at(tmp_path, metadata=meta)
    assert not ref.lake_on and not ref.deletes_reach_lake
    assert str(ref.table_path("/lake")) == "/t/20261121T105417.123400000Z"


def test_memory_streams_stay_out(tmp_path: Path) -> None:
    assert not stream_at(tmp_path, storage="memory").lake_on


def test_pin_belongs_to_its_incarnation(tmp_path: Path) -> None:
    ref = stream_at(tmp_path)
    assert read_pin(ref) is None
    write_pin(ref, Pin(ref.app_id, "/t", 42, 8))
    assert read_pin(ref) == Pin(ref.app_id, "/t", 42, 8)
    write_pin(ref, Pin("jetlake:S:another", "/t", 7))
    assert read_pin(ref) is None


def test_unreadable_config_names_the_folder(tmp_path: Path) -> None:
    (tmp_path / "X").mkdir()
    (tmp_path / "X" / "stream.json").write_text("{")
    with pytest.raises(LakeError, match="X"):
        StreamRef.load(tmp_path / "X")
