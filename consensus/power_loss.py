"""Telling a power loss from a kill -9, and simulating one for a real process's Raft logs.

A kill -9 loses nothing the process had written: the OS keeps its page cache.
A power loss (or any reboot) loses what was not yet fsynced, and under a sync
window that can include entries the node acknowledged; a clean truncation
leaves no trace of them (see `Restored.reboot_term`). The log store tells the
two apart by the kernel's boot id, which changes at every boot: it records the
boot id while its log is open and removes the record on a clean `close()`, so
at the next open a leftover record with another boot id means the machine went
down under the open log.

Tests cannot pull the plug, so a test can stand in for the two things a power
loss does, with these environment variables (read by every `LogStore.open`):

JETLAKE_BOOT_ID_FILE
    The file the boot id is read from (default `/proc/sys/kernel/random/boot_id`).
    A test points each process at its own file and writes a new id into it to
    make the next start see a reboot (`power_cut` does).
JETLAKE_SYNC_RECORD
    A file to which every log store of the process appends, after each fsync, one
    JSON line per log directory: the length of each of its WAL files and the bytes
    of its hard-state file as that fsync made them durable. After a SIGKILL,
    `lose_unsynced(record)` cuts every WAL file back to its recorded length,
    removes WAL files created since, and puts back the synced hard state: what a
    power loss that kept nothing unsynced leaves. Unset (the default): nothing
    is recorded and a sync costs nothing more.

Neither variable is meant for production; a server started without them uses
the real boot id and records nothing.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

BOOT_ID_ENV = "JETLAKE_BOOT_ID_FILE"
SYNC_RECORD_ENV = "JETLAKE_SYNC_RECORD"
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
WAL_SUFFIX = ".wal"


def boot_id() -> str:
    """This boot's id; "" where the system has none to read (every unclean stop then
    counts as a possible power loss, the safe side)."""
    try:
        return Path(os.environ.get(BOOT_ID_ENV) or BOOT_ID_FILE).read_text().strip()
    except OSError:
        return ""


class SyncRecorder:
    """Appends what each fsync made durable to the file JETLAKE_SYNC_RECORD names."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def from_env(cls) -> SyncRecorder | None:
        path = os.environ.get(SYNC_RECORD_ENV)
        return cls(Path(path)) if path else None

    def record(self, directory: Path, wal: dict[str, int], hard_state: bytes | None) -> None:
        """`wal`: file name -> synced length; `hard_state`: its synced bytes (None: this
        fsync did not cover it). One O_APPEND write: lines from threads never mix."""
        line = {"dir": str(directory), "wal": wal}
        if hard_state is not None:
            line["hard_state"] = hard_state.hex()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, json.dumps(line).encode() + b"\n")
        finally:
            os.close(fd)


def lose_unsynced(record: Path, hard_state_name: str = "hardstate") -> list[Path]:
    """Make every log directory in `record` what a power loss that kept nothing unsynced
    leaves (call it only once the process is dead). Returns the directories."""
    wal: dict[str, dict[str, int]] = {}
    hard_states: dict[str, bytes] = {}
    for raw in record.read_text().splitlines():
        line = json.loads(raw)
        wal[line["dir"]] = line["wal"]
        if "hard_state" in line:
            hard_states[line["dir"]] = bytes.fromhex(line["hard_state"])
    for directory, sizes in wal.items():
        for path in Path(directory).glob(f"*{WAL_SUFFIX}"):
            if path.name not in sizes:
                path.unlink()  # created after the last sync: its directory entry was not durable
            elif path.stat().st_size > sizes[path.name]:
                os.truncate(path, sizes[path.name])
    for directory, data in hard_states.items():
        (Path(directory) / hard_state_name).write_bytes(data)
    return [Path(d) for d in wal]


def power_cut(record: Path, boot_id_file: Path) -> list[Path]:
    """The whole power loss of one (already killed) process: unsynced writes gone and a
    new boot id for its next start. Returns the log directories it cut."""
    cut = lose_unsynced(record)
    boot_id_file.write_text(f"{uuid.uuid4()}\n")
    return cut
