"""Durable consumer state on disk: `<stream dir>/obs/<consumer>/{meta,state}.json`.

Each file is replaced whole (write a temporary file, rename over the old one),
so a kill -9 at any instant leaves either the previous or the next complete
state, never a torn one. A state snapshot is written before an ack is
confirmed and at least once per event-loop turn that changed it, so nothing
acknowledged is delivered again after a crash, and anything delivered but not
acknowledged is still pending (and redelivered) after it. Whether each write
is also fsynced follows the stream's `sync_interval`: with `always` it is, so
a confirmed ack survives a power cut too; with a deferred interval the page
cache carries it, which a process crash cannot lose.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OBS_DIR = "obs"
META_FILE = "meta.json"
STATE_FILE = "state.json"


@dataclass(frozen=True, slots=True)
class Saved:
    name: str
    config: dict[str, Any]
    created: str
    state: dict[str, Any] | None


class ConsumerStore:
    def __init__(self, folder: Path, *, fsync: bool) -> None:
        self.folder = folder
        self._fsync = fsync

    def save_meta(self, config: dict[str, Any], created: str) -> None:
        self._write(META_FILE, {"config": config, "created": created})

    def save_state(self, state: dict[str, Any]) -> None:
        self._write(STATE_FILE, state)

    def delete(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def _write(self, name: str, doc: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / (name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(json.dumps(doc, separators=(",", ":")).encode())
            if self._fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, self.folder / name)
        if self._fsync:
            dir_fd = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)


def consumers_dir(stream_folder: Path) -> Path:
    return stream_folder / OBS_DIR


def load_all(stream_folder: Path) -> list[Saved]:
    """Every consumer persisted for a stream; a folder without meta is skipped (torn create)."""
    root = consumers_dir(stream_folder)
    if not root.is_dir():
        return []
    found: list[Saved] = []
    for folder in sorted(root.iterdir()):
        meta = folder / META_FILE
        if not meta.is_file():
            continue
        doc = json.loads(meta.read_bytes())
        state_file = folder / STATE_FILE
        state = json.loads(state_file.read_bytes()) if state_file.is_file() else None
        found.append(Saved(folder.name, doc["config"], doc["created"], state))
    return found
