"""The jetlake per-node read: a stopped node's stream files, every live message in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from log.segments.api import NewMsg
from log.segments.filestore import FileStore, SegmentConfig
from tests.jepsen.workload import STREAM, JepsenError, read_store, stream_folder


def _write(store: Path, values: list[str], *, remove: tuple[int, ...] = ()) -> None:
    """A node's stream files as jetlake leaves them: small segments of batches of two
    (a group commit), some seqs deleted."""
    files = FileStore(stream_folder(store), name=STREAM, config=SegmentConfig(max_msgs=3))
    try:
        for i in range(0, len(values), 2):
            files.append([NewMsg("jepsen.w0", None, v.encode(), 1) for v in values[i : i + 2]])
        for seq in remove:
            files.remove(seq)
    finally:
        files.close()


def test_reads_every_message_across_segments_in_order(tmp_path: Path) -> None:
    values = [f"w0-{i}" for i in range(10)]
    _write(tmp_path, values)
    read = read_store("S1", tmp_path)
    assert read.node == "S1"
    assert read.messages == tuple(enumerate(values, start=1))


def test_deleted_messages_leave_gaps_not_stops(tmp_path: Path) -> None:
    _write(tmp_path, [f"w0-{i}" for i in range(8)], remove=(1, 4, 5, 6))
    assert read_store("S0", tmp_path).messages == (
        (2, "w0-1"),
        (3, "w0-2"),
        (7, "w0-6"),
        (8, "w0-7"),
    )


def test_a_node_without_the_stream_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(JepsenError, match="S2 has no store for JEPSEN"):
        read_store("S2", tmp_path)
