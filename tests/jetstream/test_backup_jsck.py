"""`jsck` on a snapshot: a flipped byte in a sealed segment fails it with the reference's
`10064`, naming the file; a healthy stream passes. Real segment files, no server."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.server.jetstream.backup import verify_segments
from log.errors import ApiError
from log.segments.api import NewMsg
from log.segments.filestore import FileStore, SegmentConfig


def _segments(folder: Path) -> list[Path]:
    store = FileStore(folder, name="S", config=SegmentConfig(max_msgs=10))
    for i in range(35):
        store.append([NewMsg("s", None, b"payload %d" % i * 20, i + 1)])
    store.close()
    return sorted(folder.glob("*.arrows"))


async def test_a_healthy_stream_passes(tmp_path: Path) -> None:
    assert len(_segments(tmp_path)) > 2
    await verify_segments(tmp_path)


async def test_a_flipped_byte_in_a_sealed_segment_fails(tmp_path: Path) -> None:
    sealed = _segments(tmp_path)[0]
    data = bytearray(sealed.read_bytes())
    data[len(data) // 2] ^= 0x01
    sealed.write_bytes(bytes(data))
    with pytest.raises(ApiError) as caught:
        await verify_segments(tmp_path)
    assert (caught.value.code, caught.value.err_code) == (500, 10064)
    assert caught.value.description.startswith(f"snapshot failed: {sealed}")
