"""The framing of small JSON state files: every kind of damage is found and located."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from log.state_file import (
    MAGIC,
    StateFileError,
    decode_state,
    encode_state,
    read_state,
    set_aside,
    write_new_state,
    write_state,
)
from tests.support.poll import poll

DOC = {"config": {"name": "ORDERS", "subjects": ["o.>"]}, "created": "2026-01-01T00:00:00Z"}


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "stream.json"
    write_state(path, DOC)
    assert path.read_bytes().startswith(MAGIC)
    assert read_state(path) == DOC
    assert [p.name for p in tmp_path.iterdir()] == ["stream.json"]  # no temporary left


def test_several_writers_write_aside_under_their_own_names(tmp_path: Path) -> None:
    path = tmp_path / "_jetlake_pin.json"
    write_state(path, [1, 2], shared=True)
    assert read_state(path) == [1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["_jetlake_pin.json"]


def test_every_flipped_bit_is_found(tmp_path: Path) -> None:
    """A flip anywhere (header or body) either fails the check or, in the magic, makes
    the file neither framed nor JSON: never a different document."""
    data = encode_state(DOC)
    for i in range(len(data)):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[i] ^= 1 << bit
            with pytest.raises(StateFileError) as err:
                decode_state(bytes(flipped), tmp_path / "f")
            assert str(tmp_path / "f") in str(err.value)


def test_torn_file_names_where_it_ends(tmp_path: Path) -> None:
    data = encode_state(DOC)
    for cut in (1, len(MAGIC) + 3, len(data) - 10, len(data) - 1):
        with pytest.raises(StateFileError) as err:
            decode_state(data[:cut], tmp_path / "f")
        assert err.value.offset in (0, cut)


def test_trailing_bytes_are_damage(tmp_path: Path) -> None:
    data = encode_state(DOC)
    with pytest.raises(StateFileError) as err:
        decode_state(data + b"x", tmp_path / "f")
    assert err.value.offset == len(data)


def test_empty_file_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "peers.json"
    path.write_bytes(b"")
    with pytest.raises(StateFileError, match=r"peers\.json: damaged at byte 0: empty file"):
        read_state(path)


def test_old_unframed_files_are_still_read(tmp_path: Path) -> None:
    path = tmp_path / "peers.json"
    path.write_text(json.dumps(["n1", "n2", "n3"]))
    assert read_state(path) == ["n1", "n2", "n3"]


def test_damaged_old_file_names_the_offset(tmp_path: Path) -> None:
    """The failure of the issue: 18 bytes of peers.json with flipped bits."""
    path = tmp_path / "peers.json"
    raw = bytearray(json.dumps(["S0", "S1", "S2"]).encode())
    raw[4] ^= 0x22  # '"' -> a control character
    path.write_bytes(bytes(raw))
    with pytest.raises(StateFileError) as err:
        read_state(path)
    assert err.value.path == path and err.value.offset == 4
    assert "peers.json: damaged at byte 4" in str(err.value)


def test_missing_file_is_not_damage(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_state(tmp_path / "nothing.json")


def test_set_aside_keeps_the_bytes(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"\x00garbage")
    aside = set_aside(path)
    assert not path.exists() and aside.read_bytes() == b"\x00garbage"
    assert aside.name == "state.json.damaged"


def _fsyncs(monkeypatch: pytest.MonkeyPatch, under: Path) -> list[tuple[str, str]]:
    """Each fsync from now on of a path `under`: (the path, the thread that waited)."""
    seen: list[tuple[str, str]] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.startswith(str(under)):
            seen.append((path, threading.current_thread().name))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return seen


def test_new_state_under_an_interval_waits_for_no_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream's create answered only after its disk's fsyncs took seconds on a busy
    machine, where the reference waits for none: the file is in place at once (a kill -9
    keeps it) and the background thread fsyncs it, its folder and the one naming that."""
    folder = tmp_path / "streams" / "ORDERS"
    folder.mkdir(parents=True)
    seen = _fsyncs(monkeypatch, tmp_path)
    write_new_state(folder / "stream.json", DOC, 10_000_000)
    caller = threading.current_thread().name
    assert [what for what, thread in seen if thread == caller] == []
    assert read_state(folder / "stream.json") == DOC
    assert [p.name for p in folder.iterdir()] == ["stream.json"]
    poll(lambda: len(seen) >= 3, lambda: f"background fsyncs stopped at {seen}", 30)
    want = [str(folder / "stream.json"), str(folder), str(folder.parent)]
    assert seen == [(path, "background-sync") for path in want]


def test_new_state_under_always_is_fsynced_before_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "streams" / "ORDERS"
    folder.mkdir(parents=True)
    seen = _fsyncs(monkeypatch, tmp_path)
    write_new_state(folder / "stream.json", DOC, None)
    caller = threading.current_thread().name
    want = [str(folder / "stream.json.tmp"), str(folder), str(folder.parent)]
    assert seen == [(path, caller) for path in want]
    assert read_state(folder / "stream.json") == DOC
