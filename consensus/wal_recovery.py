"""Reading a Raft group's log directory back at start, and repairing what a crash left.

What is trusted: a frame whose header and data checksums verify, whose index
follows the previous one (across files too: a file is named after its first
index) and whose term does not go down. The first frame that fails any of
that cuts the log: its file is truncated there, later files are dropped, and a
WARNING names the file and byte offset. The cut entries may have been
acknowledged (under a sync window an APPEND is answered once the OS has it),
so recovery also works out how far the log had reached, from every header
that still verifies past the damage and from the names of the dropped files,
and hands that to the core as `Restored.vote_floor`: the node then neither
votes nor campaigns until a leader has refilled it, so a damaged minority can
never outvote the entries it lost.

The log and the snapshot must agree: the log continues right after the
snapshot's index, or holds that index with the snapshot's term. A log that
disagrees is what a crash inside `save_snapshot` of a leader's snapshot
leaves (the snapshot is durable before the old log goes) and is dropped; a
log that starts after the snapshot (a newest snapshot was damaged and the
older one does not reach the log) cannot be placed and is dropped too, with
the floor set so the node waits for the leader's snapshot. Damage among
entries the snapshot covers cuts nothing when the entry after it is intact.

Hard state: the slot with the higher sequence number that verifies; a
damaged slot is logged and the other used (a torn write of the newer slot
was never fsynced, so nobody was answered on it); both damaged, or the file
missing beside a log, is `CorruptLogError`: term and vote are unknown, and
guessing them could make the node vote twice in a term. A new log's hard state
is created without an fsync (its first sync covers it, and the node says
nothing before that sync), so a power loss may leave it short: a short one
(every fsynced one is whole) starts the log anew, dropping what was beside it.
"""

from __future__ import annotations

import logging
import os
from array import array
from dataclasses import dataclass
from pathlib import Path

from consensus.durability import fsync_dir
from consensus.types import Entry, HardState, Restored, SnapshotMeta
from consensus.wal_format import (
    SLOT_SIZE,
    decode_frame,
    decode_slot,
    decode_snapshot,
    encode_slot,
    highest_index_after,
    locate,
)

log = logging.getLogger("jetlake.consensus")

HARD_STATE = "hardstate"
WAL_SUFFIX = ".wal"
SNAP_SUFFIX = ".snap"
TMP_SUFFIX = ".tmp"
DAMAGED_SUFFIX = ".damaged"


class LogStoreError(Exception):
    """The Raft log of a group cannot be used as asked; the message names the group and file."""


class CorruptLogError(LogStoreError):
    """Damage recovery cannot work around (both hard-state slots): an operator must look."""


def wal_path(directory: Path, first: int) -> Path:
    return directory / f"{first:020d}{WAL_SUFFIX}"


def snap_path(directory: Path, index: int) -> Path:
    return directory / f"{index:020d}{SNAP_SUFFIX}"


def numbered(directory: Path, suffix: str) -> list[tuple[int, Path]]:
    """(number, path) of the files named `<digits><suffix>`, ascending."""
    found = []
    for p in directory.iterdir():
        stem = p.name[: -len(suffix)]
        if p.name.endswith(suffix) and stem.isdigit():
            found.append((int(stem), p))
    return sorted(found)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def replace_durably(path: Path, data: bytes, *, tmp: Path | None = None) -> None:
    """Old file or new, whole, after any crash: written aside (at `tmp`, by default
    beside it with `.tmp` added), fsynced, renamed over it."""
    tmp = tmp or path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def replace_unsynced(path: Path, data: bytes) -> None:
    """Old file or new, whole, after a kill -9 (written aside, renamed over it); a power
    loss may undo it until its caller fsyncs it and its folder."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    tmp.write_bytes(data)
    os.replace(tmp, path)


@dataclass(slots=True)
class WalFile:
    path: Path
    first: int  # the index its first frame has (or will have)
    starts: array  # byte offset of each frame: index first + k starts at starts[k]
    size: int

    @property
    def last(self) -> int:
        return self.first + len(self.starts) - 1


@dataclass(slots=True)
class Recovered:
    restored: Restored
    files: list[WalFile]
    last: int  # the log's last index (the snapshot's when no entry follows it)
    hs_seq: int  # sequence number of the hard-state slot in use
    snapshot: Path | None
    new: bool  # no log was here: its hard state was created now, not yet fsynced


def recover(directory: Path, name: str) -> Recovered:
    directory.mkdir(parents=True, exist_ok=True)
    for _, tmp in numbered(directory, SNAP_SUFFIX + TMP_SUFFIX):
        tmp.unlink()  # a snapshot whose save did not finish
    hs_seq, hs, created = _read_hard_state(directory, name)
    meta, snapshot, lost_snapshot = _pick_snapshot(directory, name)
    s_index = meta.index if meta else 0
    files, entries, floor = _scan_wal(directory, name, s_index)
    floor = max(floor, lost_snapshot)
    agrees = False  # files without an entry are dropped too: the next append starts afresh
    if entries:
        first, last = entries[0].index, entries[-1].index
        if first > s_index:
            agrees = first == s_index + 1
        else:
            agrees = last >= s_index and entries[s_index - first].term == _term(meta)
        if first > s_index + 1:
            floor = max(floor, last)
            log.warning(
                "raft log %s: log starts at index %d, after the snapshot (index %d): "
                "entries cannot be placed, dropped; the node needs a snapshot from the leader",
                name,
                first,
                s_index,
            )
        elif not agrees and last >= s_index:
            log.warning(
                "raft log %s: log disagrees with the snapshot at index %d (an interrupted "
                "snapshot install): dropped",
                name,
                s_index,
            )
    if files and not agrees:
        for f in files:
            f.path.unlink()
        fsync_dir(directory)
        files, entries = [], []
    after = [e for e in entries if e.index > s_index]
    last_index = max(s_index, entries[-1].index if entries else 0)
    if hs.commit > last_index:
        log.warning(
            "raft log %s: commit index %d is past the log's end %d: entries were lost",
            name,
            hs.commit,
            last_index,
        )
        floor = max(floor, hs.commit)
        hs = HardState(hs.term, hs.vote, last_index)
    restored = Restored(hs, meta, tuple(after), floor)
    return Recovered(restored, files, last_index, hs_seq, snapshot, created)


def _term(meta: SnapshotMeta | None) -> int:
    return meta.term if meta else 0


def create_hard_state(path: Path) -> None:
    """Both slots hold the empty state from the start: a slot that fails is then always damage.

    Not fsynced: the log's first sync covers it (see `LogStore._start_lazily`), and a
    power loss before that leaves it missing or short, which the next open takes for a
    creation that never finished (`_read_hard_state`)."""
    raw = encode_slot(0, HardState()).ljust(SLOT_SIZE, b"\0") + encode_slot(1, HardState())
    tmp = path.with_name(path.name + TMP_SUFFIX)
    tmp.write_bytes(raw.ljust(2 * SLOT_SIZE, b"\0"))
    os.replace(tmp, path)


def _read_hard_state(directory: Path, name: str) -> tuple[int, HardState, bool]:
    """(slot sequence, hard state, whether the file was created now)."""
    path = directory / HARD_STATE
    created = False
    if path.exists() and _unfinished(path):
        beside = [p for _, p in numbered(directory, WAL_SUFFIX) + numbered(directory, SNAP_SUFFIX)]
        log.warning(
            "raft log %s: %s was never synced (a new log, nothing said on it): created again%s",
            name,
            path,
            f"; unacknowledged {', '.join(p.name for p in beside)} dropped" if beside else "",
        )
        for p in [*beside, path]:
            p.unlink()
    if not path.exists():
        if numbered(directory, WAL_SUFFIX) or numbered(directory, SNAP_SUFFIX):
            raise CorruptLogError(
                f"raft log {name}: {path} is missing beside the log: term and vote are unknown"
            )
        create_hard_state(path)
        created = True
    raw = path.read_bytes()
    slots = [decode_slot(raw[k * SLOT_SIZE : (k + 1) * SLOT_SIZE]) for k in (0, 1)]
    good = [s for s in slots if s is not None]
    if not good:
        raise CorruptLogError(
            f"raft log {name}: both hard-state slots of {path} are damaged; "
            "term and vote are unknown, so the node must not run on this log"
        )
    for k, slot in enumerate(slots):
        if slot is None:
            log.warning(
                "raft log %s: hard-state slot %d of %s is damaged (at byte %d); using the other",
                name,
                k,
                path,
                k * SLOT_SIZE,
            )
    return (*max(good, key=lambda s: s[0]), created)


def _unfinished(path: Path) -> bool:
    """A hard-state file shorter than its two slots: every fsynced one has their full
    length (slots are rewritten in place), so only a new one a power loss caught before
    its first fsync is short. A node says nothing before its first term change is
    fsynced, so nothing was said on this log: entries or a snapshot beside it (a
    leader's, written before that fsync) were never acknowledged, and the log is new."""
    return path.stat().st_size < 2 * SLOT_SIZE


def _pick_snapshot(directory: Path, name: str) -> tuple[SnapshotMeta | None, Path | None, int]:
    """The newest snapshot that verifies; and the highest index of a damaged newer one (0: none).

    A damaged file is renamed aside (kept for an operator, never read again).
    """
    lost = 0
    snaps = numbered(directory, SNAP_SUFFIX)[::-1]
    for k, (index, path) in enumerate(snaps):
        snap = decode_snapshot(path.read_bytes())
        if snap is not None and snap.meta.index == index:
            return snap.meta, path, lost
        lost = max(lost, index)
        left = (
            "falling back to an older one"
            if k + 1 < len(snaps)
            else "none left: the node needs a snapshot from the leader"
        )
        log.warning("raft log %s: damaged snapshot %s (index %d); %s", name, path, index, left)
        path.rename(path.with_name(path.name + DAMAGED_SUFFIX))
    return None, None, lost


def _scan_wal(directory: Path, name: str, covered: int) -> tuple[list[WalFile], list[Entry], int]:
    """The verified files and entries, the log cut at the first bad frame; and the floor.

    Damage among entries the snapshot covers (index <= `covered`) cuts nothing
    when the entry after the snapshot is found intact past it: the scan resumes
    there (every open, until compaction drops those files), and the files
    before it are kept as empty stubs, dropped by the next snapshot.
    """
    paths = numbered(directory, WAL_SUFFIX)
    files: list[WalFile] = []
    entries: list[Entry] = []
    expected: int | None = None
    min_term = 0
    k = off = 0
    while k < len(paths):
        first, path = paths[k]
        data = path.read_bytes()
        starts = array("Q")
        problem = ""
        if off:  # resumed inside this file, at the entry after the snapshot
            first = covered + 1
        elif expected is not None and first != expected:
            problem = f"file starts at index {first}, index {expected} expected"
        expected = first if expected is None else expected
        while not problem and off < len(data):
            got = decode_frame(data, off)
            if got is None:
                problem = "torn or failing its checksum"
                break
            entry, end = got
            if entry.index != expected:
                problem = f"index {entry.index} where {expected} belongs"
            elif entry.term < min_term:
                problem = f"term {entry.term} after term {min_term}"
            else:
                starts.append(off)
                entries.append(entry)
                off, expected, min_term = end, expected + 1, entry.term
        if problem and expected <= covered:
            found = _resume(paths, k, data, off, covered + 1)
            if found is not None:
                log.warning(
                    "raft log %s: damaged entry at %s:%d (%s), below the snapshot (index %d): "
                    "skipped, the log resumes at %s:%d",
                    name,
                    path,
                    off,
                    problem,
                    covered,
                    paths[found[0]][1],
                    found[1],
                )
                files = [WalFile(p, f, array("Q"), 0) for f, p in paths[: found[0]]]
                entries = []
                k, off, expected = found[0], found[1], covered + 1
                continue
        if problem:
            files.append(WalFile(path, first, starts, off))
            floor = _cut(name, files, paths[k + 1 :], data, off, problem, expected - 1)
            return files, entries, floor
        files.append(WalFile(path, first, starts, len(data)))
        k, off = k + 1, 0
    return files, entries, 0


def _resume(
    paths: list[tuple[int, Path]], k: int, data: bytes, off: int, index: int
) -> tuple[int, int] | None:
    """(file number, offset) of an intact frame of `index` past byte `off` of paths[k]."""
    for j in range(k, len(paths)):
        chunk = data if j == k else paths[j][1].read_bytes()
        at = locate(chunk, off + 1 if j == k else 0, index)
        if at is not None:
            return (j, at) if decode_frame(chunk, at) is not None else None
    return None


def _cut(
    name: str,
    files: list[WalFile],
    later: list[tuple[int, Path]],
    data: bytes,
    off: int,
    why: str,
    kept: int,
) -> int:
    """Cut the log after index `kept`, at byte `off` of files[-1]; returns the highest
    index it had reached."""
    cut = files[-1]
    highest = highest_index_after(data, off, max(kept, cut.first - 1))
    for first, path in later:
        # A file is created when its first entry is written: the one before it was written.
        highest = highest_index_after(path.read_bytes(), 0, max(highest, first - 1))
        path.unlink()
    if off == 0:
        cut.path.unlink()
        files.pop()
    else:
        with open(cut.path, "r+b") as f:
            f.truncate(off)
            os.fsync(f.fileno())
    fsync_dir(cut.path.parent)
    log.warning(
        "raft log %s: damaged entry at %s:%d (%s), log cut at index %d; "
        "it had reached index %d: no vote until a leader restores it",
        name,
        cut.path,
        off,
        why,
        kept,
        highest,
    )
    return highest
