"""The Raft log on disk, damaged: torn tails, bit flips in entries, hard state and snapshots.

Every case checks the three promises: no damaged entry is ever returned, the
log is cut at the damaged entry (the file truncated there, the WARNING naming
file and offset), and `vote_floor` covers what the log had reached.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from consensus.log_store import LogStore
from consensus.types import Entry, HardState, Restored
from consensus.wal_format import FRAME_OVERHEAD, SLOT_SIZE, decode_slot, encode_slot
from consensus.wal_recovery import HARD_STATE, CorruptLogError
from tests.consensus.log_store_writer import entries, no_fsync, snapshot  # noqa: F401 (fixture)

SMALL = 1024
LAST = 62  # its entry has data: a torn tail can cut its header or its data
COMMIT = 10
Image = dict[str, bytes]  # a log directory's files


def build(path: Path) -> tuple[Image, list[Entry]]:
    """A log of entries 1..LAST over several files, the last entry alone in its append."""
    store, _ = LogStore.open(path, name="g", max_file_bytes=SMALL)
    written = entries(1, 1, LAST)
    for i in range(0, LAST - 1, 6):
        store.append(written[i : min(i + 6, LAST - 1)])
    store.append(written[-1:])
    store.set_hard_state(HardState(1, "a", COMMIT))
    store.close()
    return {p.name: p.read_bytes() for p in path.iterdir()}, written


def put(path: Path, image: Image) -> None:
    """Make the directory hold exactly `image`, rewriting only the files that differ
    (each open fsyncs every file: a rewritten one costs a disk write)."""
    path.mkdir(exist_ok=True)
    for p in path.iterdir():
        if p.name not in image:
            p.unlink()
    for name, data in image.items():
        target = path / name
        if not target.exists() or target.read_bytes() != data:
            target.write_bytes(data)


def frames(image: Image, written: list[Entry]) -> list[tuple[str, int, int, Entry]]:
    """(file, start, end, entry) of every frame, from the entries' sizes alone."""
    out = []
    it = iter(written)
    for name in sorted(n for n in image if n.endswith(".wal")):
        off = 0
        while off < len(image[name]):
            e = next(it)
            end = off + FRAME_OVERHEAD + len(e.data)
            out.append((name, off, end, e))
            off = end
    assert len(out) == len(written)
    return out


def open_logged(path: Path, caplog: pytest.LogCaptureFixture) -> tuple[LogStore, Restored]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, "jetlake.consensus"):
        return LogStore.open(path, name="g", max_file_bytes=SMALL)


@pytest.mark.usefixtures("no_fsync")
def test_torn_tail_at_every_byte_of_the_last_frame(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    image, written = build(tmp_path / "orig")
    name, start, end, last = frames(image, written)[-1]
    assert last.index == LAST
    log = tmp_path / "log"
    for size in range(start, end):
        put(log, {**image, name: image[name][:size]})
        store, restored = open_logged(log, caplog)
        assert restored.entries == tuple(written[:-1]), size
        assert (log / name).stat().st_size == start
        if size == start:  # a whole frame was never written: a clean end, nothing cut
            assert restored.vote_floor == 0 and not caplog.records
        else:
            assert f"damaged entry at {log / name}:{start} " in caplog.text
            assert f"log cut at index {LAST - 1};" in caplog.text
            # Once its header is whole, the torn entry is known to have been written.
            assert restored.vote_floor == (LAST if size >= start + FRAME_OVERHEAD else LAST - 1)
        store.append(written[-1:])  # the leader's copy lands where the torn one was
        store.close()
        store, restored = open_logged(log, caplog)
        assert restored.entries == tuple(written) and not caplog.records
        store.close()


@pytest.mark.usefixtures("no_fsync")
def test_bit_flips_anywhere_in_the_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    image, written = build(tmp_path / "orig")
    layout = frames(image, written)
    log = tmp_path / "log"
    checked = 0
    for name, start, end, hit in layout:
        positions = range(start, end) if hit.index in (1, 31, LAST) else range(start, end, 11)
        for pos in positions:
            for bit in {pos % 8, (pos + 3) % 8 if hit.index == 31 else pos % 8}:
                data = bytearray(image[name])
                data[pos] ^= 1 << bit
                put(log, {**image, name: bytes(data)})
                store, restored = open_logged(log, caplog)
                store.close()
                where = (name, pos, bit)
                assert restored.entries == tuple(written[: hit.index - 1]), where
                assert f"damaged entry at {log / name}:{start} " in caplog.text, where
                assert f"log cut at index {hit.index - 1};" in caplog.text, where
                in_header = pos < start + FRAME_OVERHEAD
                reached = LAST - 1 if hit.index == LAST and in_header else LAST
                assert restored.vote_floor == max(reached, COMMIT), where
                assert restored.hard_state == HardState(1, "a", min(COMMIT, hit.index - 1))
                cut = log / name  # truncated at the damaged frame, or gone if it was first
                assert cut.stat().st_size == start if start else not cut.exists(), where
                assert all(n <= name for n in (p.name for p in log.glob("*.wal")))
                checked += 1
    assert checked > 600


def test_a_lost_page_inside_a_file_still_reveals_how_far_the_log_reached(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "log"
    store, _ = LogStore.open(log, name="g")  # 64 MiB files: all of it in one
    written = entries(1, 1, 400)
    for i in range(0, 400, 10):
        store.append(written[i : i + 10])
    store.close()
    (wal,) = log.glob("*.wal")
    data = bytearray(wal.read_bytes())
    data[8192 : 8192 + 4096] = bytes(4096)  # a page of zeros: ~50 frames, cut mid-frame
    wal.write_bytes(bytes(data))
    store, restored = open_logged(log, caplog)
    store.close()
    kept = len(restored.entries)
    assert restored.entries == tuple(written[:kept]) and 60 < kept < 120
    assert restored.vote_floor == 400
    assert f"damaged entry at {wal}:" in caplog.text and wal.stat().st_size <= 8192


def test_a_missing_file_in_the_middle_cuts_the_log_there(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    image, written = build(tmp_path / "orig")
    names = sorted(n for n in image if n.endswith(".wal"))
    gone = names[1]
    log = tmp_path / "log"
    put(log, {n: d for n, d in image.items() if n != gone})
    store, restored = open_logged(log, caplog)
    store.close()
    assert restored.entries == tuple(written[: int(gone[:20]) - 1])
    assert f"file starts at index {int(names[2][:20])}" in caplog.text
    assert restored.vote_floor == LAST


def test_damage_below_the_snapshot_cuts_nothing_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    image, written = build(tmp_path / "orig")
    log = tmp_path / "log"
    put(log, image)
    store, _ = LogStore.open(log, name="g", max_file_bytes=SMALL)
    store.save_snapshot(snapshot(1, 40))  # the first snapshot: every file stays
    store.close()
    image = {p.name: p.read_bytes() for p in log.iterdir()}
    name, start, _, hit = frames(image, written)[20]
    assert hit.index < 40
    data = bytearray(image[name])
    data[start + 30] ^= 0x10
    put(log, {**image, name: bytes(data)})
    for _ in range(2):  # skipped at every open, nothing is cut
        store, restored = open_logged(log, caplog)
        assert "below the snapshot (index 40): skipped" in caplog.text
        assert (restored.entries, restored.vote_floor) == (tuple(written[40:]), 0)
        store.close()
    store, _ = LogStore.open(log, name="g", max_file_bytes=SMALL)
    store.append(entries(1, LAST + 1, LAST + 30))
    store.save_snapshot(snapshot(1, LAST + 30))  # compacts through 40: the damage goes
    store.close()
    store, restored = open_logged(log, caplog)
    store.close()
    assert not caplog.records and name not in {p.name for p in log.glob("*.wal")}
    assert restored.snapshot == snapshot(1, LAST + 30).meta and restored.entries == ()


@pytest.mark.usefixtures("no_fsync")
def slot_seqs(raw: bytes) -> list[int]:
    """The sequence number in each hard-state slot (both must verify)."""
    slots = [decode_slot(raw[k * SLOT_SIZE : (k + 1) * SLOT_SIZE]) for k in (0, 1)]
    assert all(slots), slots
    return [slot[0] for slot in slots if slot]


def test_hard_state_slots_fall_back_one_to_the_other(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A vote is in both slots, so a flip in either keeps it; a commit-only change is in
    one slot, so a flip there falls back to the same term and vote, an older commit."""
    image, _ = build(tmp_path / "orig")
    log = tmp_path / "log"
    put(log, image)
    store, _ = LogStore.open(log, name="g")
    store.set_hard_state(HardState(2, "b", 20))
    store.set_hard_state(HardState(3, "c", 30))
    store.set_hard_state(HardState(3, "c", 40))
    store.close()
    image = {p.name: p.read_bytes() for p in log.iterdir()}
    raw = image[HARD_STATE]
    seqs = slot_seqs(raw)
    newest_slot = seqs.index(max(seqs))
    newest, voted = HardState(3, "c", 40), HardState(3, "c", 30)
    slot_of = {newest_slot: newest, 1 - newest_slot: voted}
    for slot in (0, 1):
        used = len(encode_slot(0, slot_of[slot]))
        for pos in range(slot * SLOT_SIZE, slot * SLOT_SIZE + used):
            data = bytearray(raw)
            data[pos] ^= 0x04
            put(log, {**image, HARD_STATE: bytes(data)})
            store, restored = open_logged(log, caplog)
            store.close()
            assert restored.hard_state == slot_of[1 - slot], (slot, pos)
            assert (restored.hard_state.term, restored.hard_state.vote) == (3, "c")
            assert f"hard-state slot {slot} of {log / HARD_STATE} is damaged" in caplog.text
    data = bytearray(raw)
    data[SLOT_SIZE + used] ^= 1  # past the slot's record: not part of it
    put(log, {**image, HARD_STATE: bytes(data)})
    store, restored = open_logged(log, caplog)
    store.close()
    assert restored.hard_state == newest and not caplog.records
    data = bytearray(raw)
    data[3] ^= 1
    data[SLOT_SIZE + 3] ^= 1
    put(log, {**image, HARD_STATE: bytes(data)})
    with pytest.raises(CorruptLogError, match="both hard-state slots"):
        LogStore.open(log, name="g")
    put(log, {n: d for n, d in image.items() if n != HARD_STATE})
    with pytest.raises(CorruptLogError, match="missing"):
        LogStore.open(log, name="g")


@pytest.mark.parametrize("kept", [0, 1, SLOT_SIZE, 2 * SLOT_SIZE - 1])
@pytest.mark.parametrize("beside", ["nothing", "entries", "a snapshot"])
def test_a_new_logs_hard_state_a_power_loss_cut_short_makes_it_new_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kept: int, beside: str
) -> None:
    """Created without an fsync, it is short after a power loss only if it was never
    fsynced, and a node fsyncs its first term before saying anything: what a leader
    sent that landed beside it was never acknowledged, and the log starts anew."""
    log = tmp_path / "log"
    store, _ = LogStore.open(log, name="g")
    if beside == "entries":
        store.append(entries(1, 1, 3))
    elif beside == "a snapshot":
        store.save_snapshot(snapshot(1, 5))
    store.close()
    raw = (log / HARD_STATE).read_bytes()
    (log / HARD_STATE).write_bytes(raw[:kept])
    store, restored = open_logged(log, caplog)
    assert restored == Restored() and "never synced" in caplog.text
    assert (beside == "nothing") == ("dropped" not in caplog.text)
    store.set_hard_state(HardState(4, "b", 0))
    store.close()
    store, restored = LogStore.open(log, name="g")
    store.close()
    assert restored.hard_state == HardState(4, "b", 0)


@pytest.mark.usefixtures("no_fsync")
def test_a_damaged_snapshot_falls_back_to_the_older_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "log"
    store, _ = LogStore.open(log, name="g", max_file_bytes=SMALL)
    for i in range(1, 300, 5):
        store.append(entries(1, i, i + 4))
    store.save_snapshot(snapshot(1, 100))
    store.save_snapshot(snapshot(1, 250))
    store.close()
    image = {p.name: p.read_bytes() for p in log.iterdir()}
    snap = f"{250:020d}.snap"
    for pos in range(len(image[snap])):
        data = bytearray(image[snap])
        data[pos] ^= 0x80
        put(log, {**image, snap: bytes(data)})
        store, restored = open_logged(log, caplog)
        assert f"damaged snapshot {log / snap} (index 250); falling back" in caplog.text
        assert restored.snapshot == snapshot(1, 100).meta, pos
        assert restored.entries == tuple(entries(1, 101, 300))
        assert store.load_snapshot() == snapshot(1, 100)
        store.close()
        assert (log / (snap + ".damaged")).exists() and not (log / snap).exists()


def test_no_usable_snapshot_leaves_the_node_waiting_for_the_leaders(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "log"
    store, _ = LogStore.open(log, name="g", max_file_bytes=SMALL)
    for i in range(1, 300, 5):
        store.append(entries(1, i, i + 4))
    store.set_hard_state(HardState(1, None, 290))
    store.save_snapshot(snapshot(1, 100))
    store.save_snapshot(snapshot(1, 250))
    store.save_snapshot(snapshot(1, 280))  # the log now starts after 101: 100 is gone anyway
    store.close()
    for index in (250, 280):
        path = log / f"{index:020d}.snap"
        path.write_bytes(path.read_bytes()[:-1])
    store, restored = open_logged(log, caplog)
    assert "none left" in caplog.text and "cannot be placed" in caplog.text
    assert (restored.snapshot, restored.entries) == (None, ())
    assert restored.vote_floor == 300 and restored.hard_state == HardState(1, None, 0)
    assert store.load_snapshot() is None and store.last_index == 0
    store.save_snapshot(snapshot(2, 310))  # the leader's snapshot
    store.append(entries(2, 311, 312))
    store.close()
    store, restored = open_logged(log, caplog)
    store.close()
    assert restored.snapshot == snapshot(2, 310).meta and len(restored.entries) == 2


@pytest.mark.usefixtures("no_fsync")
def test_a_torn_hard_state_write_keeps_the_state_before_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "log"
    store, _ = LogStore.open(log, name="g")
    store.set_hard_state(HardState(1, "a", 0))
    store.set_hard_state(HardState(2, "bb", 0))
    store.close()
    raw = (log / HARD_STATE).read_bytes()
    seq = max(slot_seqs(raw)) + 1
    at = (seq % 2) * SLOT_SIZE  # where the next write goes
    torn = encode_slot(seq, HardState(3, "ccc", 0))
    for k in range(1, len(torn)):
        (log / HARD_STATE).write_bytes(raw[:at] + torn[:k] + raw[at + k :])
        store, restored = open_logged(log, caplog)
        store.close()
        assert restored.hard_state == HardState(2, "bb", 0), k
        assert f"hard-state slot {seq % 2}" in caplog.text
    (log / HARD_STATE).write_bytes(raw[:at] + torn + raw[at + len(torn) :])
    store, restored = open_logged(log, caplog)
    store.close()
    assert restored.hard_state == HardState(3, "ccc", 0) and not caplog.records
