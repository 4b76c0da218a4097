"""The Raft log on disk, undamaged: round trips, conflicts, rolls, snapshots, sync accounting."""

from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path

import pytest

from consensus.durability import SYNCER
from consensus.log_store import LogStore
from consensus.types import Entry, EntryKind, HardState, Restored
from consensus.wal_recovery import LogStoreError
from tests.consensus.log_store_writer import entries, snapshot
from tests.support.poll import poll

SMALL = 1024  # bytes a WAL file: a few dozen of the test entries, so logs roll often


def reopen(path: Path, store: LogStore | None = None, **kw: int) -> tuple[LogStore, Restored]:
    if store is not None:
        store.close()
    return LogStore.open(path, name="g", **kw)


def fill(store: LogStore, term: int, first: int, last: int) -> None:
    """Append in batches of 5: a file rolls between appends, never inside one."""
    for i in range(first, last + 1, 5):
        store.append(entries(term, i, min(i + 4, last)))


def wal_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("*.wal"))


def test_fresh_directory_restores_nothing(tmp_path: Path) -> None:
    store, restored = reopen(tmp_path / "new")
    assert restored == Restored()
    # its `running` record waits for the first sync
    assert (store.last_index, store.synced_index, store.needs_sync) == (0, 0, True)
    store.sync()
    assert not store.needs_sync
    assert store.load_snapshot() is None
    store.close()


def _fsynced_inodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The inode of every file or directory fsynced (or fdatasynced) from now on."""
    seen: list[int] = []
    for call in ("fsync", "fdatasync"):
        real = getattr(os, call)

        def recording(fd: int, real=real) -> None:  # type: ignore[no-untyped-def]
            seen.append(os.fstat(fd).st_ino)
            real(fd)

        monkeypatch.setattr(os, call, recording)
    return seen


def test_a_new_log_is_durable_before_its_first_term(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new group opens without an fsync, and the sync its first term change waits for
    covers its hard state, its running record and the directory naming them: nothing
    the node says can come before them."""
    seen = _fsynced_inodes(monkeypatch)
    folder = tmp_path / "new"
    store, _ = reopen(folder)
    assert seen == []
    hard_state = (folder / "hardstate").stat().st_ino
    store.set_hard_state(HardState(1, "a", 0))  # Ready.must_sync: the driver syncs next
    store.sync()
    assert {(folder / "running").stat().st_ino, folder.stat().st_ino, hard_state} <= set(seen)
    seen.clear()
    store.close()
    store, _ = reopen(folder)  # a log that ran: everything recovered made durable again
    assert hard_state in seen and (folder / "running").stat().st_ino in seen
    store.close()


def test_round_trip_of_entries_and_hard_state(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path)
    written = [*entries(1, 1, 5), Entry(2, 6, EntryKind.NOOP), Entry(2, 7, data=b"\0" * 70_000)]
    store.append(written[:3])
    store.append(written[3:])
    store.set_hard_state(HardState(2, "node-β", 4))
    store, restored = reopen(tmp_path, store)
    assert restored.entries == tuple(written)
    assert restored.hard_state == HardState(2, "node-β", 4)
    assert (restored.snapshot, restored.vote_floor) == (None, 0)
    store.set_hard_state(HardState(3, None, 7))  # the other slot; then the first again
    store.set_hard_state(HardState(4, "c", 7))
    store, restored = reopen(tmp_path, store)
    assert restored.hard_state == HardState(4, "c", 7)
    store.close()


def test_one_write_per_append_whatever_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = reopen(tmp_path)
    real_write = os.write
    calls: list[int] = []

    def counting(fd: int, data: bytes) -> int:
        calls.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counting)
    store.append(entries(1, 1, 64))
    store.append(entries(1, 65, 65))
    monkeypatch.undo()
    assert len(calls) == 2
    store.close()


def test_conflicting_entries_replace_the_suffix(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path)
    store.append(entries(1, 1, 10))
    store.append(entries(2, 6, 8))  # a new leader's entries from 6 on: 9 and 10 go too
    assert store.last_index == 8
    store.append(entries(2, 9, 9))
    store, restored = reopen(tmp_path, store)
    assert restored.entries == (*entries(1, 1, 5), *entries(2, 6, 9))
    store.append(entries(3, 1, 2))  # everything replaced
    store, restored = reopen(tmp_path, store)
    assert restored.entries == tuple(entries(3, 1, 2))
    store.close()


def test_conflict_reaching_back_across_rolled_files(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path, max_file_bytes=SMALL)
    fill(store, 1, 1, 120)
    rolled = wal_files(tmp_path)
    assert len(rolled) >= 4
    store.append(entries(2, 30, 40))
    kept = set(wal_files(tmp_path)) & set(rolled)  # the files wholly after 29 went
    assert kept == {n for n in rolled if int(n[:20]) <= 29}
    store, restored = reopen(tmp_path, store, max_file_bytes=SMALL)
    assert restored.entries == (*entries(1, 1, 29), *entries(2, 30, 40))
    fill(store, 2, 41, 200)  # rolls again from the truncated file on
    store, restored = reopen(tmp_path, store, max_file_bytes=SMALL)
    assert restored.entries == (*entries(1, 1, 29), *entries(2, 30, 200))
    store.close()


def test_files_roll_at_their_size_and_are_named_after_their_first_index(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path, max_file_bytes=SMALL)
    for i in range(1, 201, 8):
        store.append(entries(1, i, i + 7))
    store.close()
    names = wal_files(tmp_path)
    firsts = [int(n[:20]) for n in names]
    assert firsts[0] == 1 and firsts == sorted(firsts) and len(firsts) > 5
    for name in names[:-1]:  # each rolled once past the size, so by less than one batch
        assert SMALL <= (tmp_path / name).stat().st_size < SMALL + 8 * 130


def test_appends_that_leave_a_gap_or_rewrite_compacted_entries_fail(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path)
    store.append(entries(1, 1, 5))
    with pytest.raises(LogStoreError, match="index 7"):
        store.append(entries(1, 7, 8))
    with pytest.raises(LogStoreError, match="not contiguous"):
        store.append([*entries(1, 6, 6), *entries(1, 8, 8)])
    store.save_snapshot(snapshot(1, 3))
    with pytest.raises(LogStoreError, match="snapshot at 3"):
        store.append(entries(2, 3, 4))
    store.close()
    with pytest.raises(LogStoreError, match="closed"):
        store.append(entries(1, 6, 6))


def test_snapshots_compact_whole_files_keeping_the_previous_snapshot_reachable(
    tmp_path: Path,
) -> None:
    store, _ = reopen(tmp_path, max_file_bytes=SMALL)
    fill(store, 1, 1, 300)
    before = wal_files(tmp_path)
    store.save_snapshot(snapshot(1, 100))
    assert wal_files(tmp_path) == before  # no older snapshot: the log since index 1 stays
    store.save_snapshot(snapshot(1, 250))
    kept = wal_files(tmp_path)
    assert kept == before[-len(kept) :] and len(kept) < len(before)
    assert int(kept[0][:20]) <= 101  # the log after the older snapshot is whole
    store.save_snapshot(snapshot(1, 280))
    snaps = sorted(p.name for p in tmp_path.glob("*.snap"))
    assert [int(n[:20]) for n in snaps] == [250, 280]
    store.append(entries(1, 301, 310))
    store, restored = reopen(tmp_path, store, max_file_bytes=SMALL)
    assert restored.snapshot == snapshot(1, 280).meta
    assert restored.entries == tuple(entries(1, 281, 310))
    assert store.load_snapshot() == snapshot(1, 280)
    store.close()


def test_a_leaders_snapshot_past_or_against_the_log_replaces_it(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path, max_file_bytes=SMALL)
    fill(store, 1, 1, 50)
    store.save_snapshot(snapshot(3, 80))  # past the log
    assert (wal_files(tmp_path), store.last_index) == ([], 80)
    store.append(entries(3, 81, 90))
    store, restored = reopen(tmp_path, store, max_file_bytes=SMALL)
    assert (restored.snapshot, restored.entries) == (
        snapshot(3, 80).meta,
        tuple(entries(3, 81, 90)),
    )
    store.save_snapshot(snapshot(4, 85))  # holds index 85, but of term 3: not this snapshot's
    assert store.last_index == 85
    store.append(entries(4, 86, 86))
    store, restored = reopen(tmp_path, store, max_file_bytes=SMALL)
    assert (restored.snapshot, restored.entries) == (
        snapshot(4, 85).meta,
        tuple(entries(4, 86, 86)),
    )
    store.close()


def test_crash_inside_a_snapshot_install_leaves_a_log_that_is_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, _ = reopen(tmp_path)
    store.append(entries(1, 1, 50))
    store.close()
    saved = tmp_path.parent / "saved"
    shutil.copytree(tmp_path, saved)
    store, _ = reopen(tmp_path)
    store.save_snapshot(snapshot(2, 40))  # term 2 at 40 disagrees with the log: it goes
    store.close()
    for wal in saved.glob("*.wal"):  # as if the crash came before the unlinks were durable
        shutil.copy(wal, tmp_path / wal.name)
    half = tmp_path / f"{45:020d}.snap.tmp"  # and a later snapshot's save was under way
    half.write_bytes(b"JLSNAP1\n\0")
    with caplog.at_level(logging.WARNING, "jetlake.consensus"):
        store, restored = reopen(tmp_path)
    assert "disagrees with the snapshot at index 40" in caplog.text
    assert (restored.snapshot, restored.entries, restored.vote_floor) == (
        snapshot(2, 40).meta,
        (),
        0,
    )
    assert wal_files(tmp_path) == [] and store.last_index == 40 and not half.exists()
    store.close()


def test_sync_accounting_written_versus_synced(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path)
    store.append(entries(1, 1, 10))
    assert (store.last_index, store.synced_index, store.needs_sync) == (10, 0, True)
    store.sync()
    assert (store.synced_index, store.needs_sync) == (10, False)
    store.set_hard_state(HardState(1, "a", 3))
    assert store.needs_sync
    store.sync()
    store.append(entries(2, 8, 9))  # replaced entries are no longer synced
    assert (store.last_index, store.synced_index) == (9, 7)
    store.sync()
    assert store.synced_index == 9
    store.close()
    store.sync()  # a background sync queued before close does nothing
    store, restored = reopen(tmp_path)
    assert (store.synced_index, restored.entries[-1]) == (9, entries(2, 9, 9)[0])
    store.close()


def test_syncs_on_another_thread_while_the_owner_appends_and_rolls(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path, max_file_bytes=4 * SMALL)
    store.sync()  # a new log's first sync, longer than the rest (its running record)
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: list[tuple[int, int]] = []

    def syncing() -> None:
        try:
            while not stop.is_set():
                store.sync()
                seen.append((store.synced_index, store.last_index))
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=syncing)
    thread.start()
    last, term = 0, 1
    for step in range(1, 1500):
        if step % 50 == 0:
            term += 1
            last -= 5  # conflicts while syncs are in flight
        store.append(entries(term, last + 1, last + 4))
        last += 4
    stop.set()
    thread.join()
    assert not errors and len(seen) > 10
    store.sync()
    assert store.synced_index == last
    store, restored = reopen(tmp_path, store)
    assert [e.index for e in restored.entries] == list(range(1, last + 1))
    store.close()


def test_the_process_syncer_fsyncs_it_within_its_delay(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path)
    store.append(entries(1, 1, 3))
    SYNCER.request(store, 0.001)
    poll(lambda: store.synced_index >= 3, "the store synced up to 3", 10)
    assert store.synced_index == 3 and not store.sync_queued
    store.close()


def test_a_long_vote_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path)
    with pytest.raises(ValueError, match="too long"):
        store.set_hard_state(HardState(1, "x" * 2000, 0))
    store, restored = reopen(tmp_path, store)
    assert restored.hard_state == HardState()
    store.close()


def test_a_failed_fsync_fails_the_store_for_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = reopen(tmp_path)
    store.append(entries(1, 1, 3))

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(LogStoreError, match=f"raft log g: fsync in {tmp_path}"):
        store.sync()
    monkeypatch.undo()
    # The kernel may have dropped the pages: a later fsync that "works" proves nothing.
    with pytest.raises(LogStoreError, match="Input/output error"):
        store.sync()
    with pytest.raises(LogStoreError, match="Input/output error"):
        store.append(entries(1, 4, 4))
    assert store.synced_index == 0
    store.close()
    store.close()  # releases once, then does nothing
    store, restored = reopen(tmp_path)
    assert restored.entries == tuple(entries(1, 1, 3))
    store.close()


def test_empty_files_a_crash_left_behind_are_harmless(tmp_path: Path) -> None:
    store, _ = reopen(tmp_path)
    store.append(entries(1, 1, 5))
    store.close()
    (tmp_path / f"{6:020d}.wal").touch()  # a roll made it, the crash came before its write
    store, restored = reopen(tmp_path)
    assert restored.entries == tuple(entries(1, 1, 5))
    store.append(entries(1, 6, 7))
    store.save_snapshot(snapshot(2, 80))  # a leader's, past the log
    store.close()
    (tmp_path / f"{6:020d}.wal").touch()  # an unlink that did not reach the disk
    store, restored = reopen(tmp_path)
    assert (restored.snapshot, restored.entries, restored.vote_floor) == (
        snapshot(2, 80).meta,
        (),
        0,
    )
    store.append(entries(2, 81, 81))
    store, restored = reopen(tmp_path, store)
    assert restored.entries == tuple(entries(2, 81, 81))
    store.close()


def test_a_vote_floor_outlives_a_second_restart_until_released(tmp_path: Path) -> None:
    """The scan past damage that found the floor cannot find it again once the log
    was cut: the floor is kept on disk until the log reaches it."""
    store, _ = reopen(tmp_path)
    store.append(entries(1, 1, 6))
    store.close()
    wal = sorted(tmp_path.glob("*.wal"))[-1]
    data = bytearray(wal.read_bytes())
    data[len(data) // 2] ^= 0x10  # damage in the middle: the log is cut, later headers seen
    wal.write_bytes(bytes(data))
    store, restored = reopen(tmp_path)
    floor = restored.vote_floor
    assert floor == 6 and len(restored.entries) < 6 and store.held
    store, restored = reopen(tmp_path, store)
    assert restored.vote_floor == floor and store.held  # the second restart still holds
    store.append(entries(2, len(restored.entries) + 1, 6))  # a leader refills it
    store, restored = reopen(tmp_path, store)
    assert not store.held  # holding all it ever acknowledged again: the hold is gone
