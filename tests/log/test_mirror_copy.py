"""A mirror's copies over a real file store: the origin's seqs kept with their gaps, and the
gaps still there after the store is reopened (no server)."""

from __future__ import annotations

from pathlib import Path

from ingest.parser.headers import encode_headers
from log.config import from_request
from log.segments.filestore import FileStore
from log.streams.stream import Stream
from tests.log.test_stream import read_headers


def _mirror(path: Path, **cfg: object) -> Stream:
    config = from_request({"name": "m", "mirror": {"name": "o"}, **cfg})
    return Stream(config, FileStore(path, name="m"), created_ns=0, read_headers=read_headers)


async def test_copies_keep_origin_seqs_and_gaps_across_reopen(tmp_path: Path) -> None:
    stream = _mirror(tmp_path)
    for seq in (3, 4, 7):  # one group commit: a run with gaps
        stream.copy_mirrored(seq, "o.a", None, b"%d" % seq, 1_000 + seq)
    stream.copy_mirrored(4, "o.a", None, b"again", 5)  # already copied: ignored
    await stream.flush()
    state = stream.store.state()
    assert (state.first_seq, state.last_seq, state.msgs, state.num_deleted) == (3, 7, 3, 2)
    assert stream.store.load(7) is not None and stream.store.load(7).ts == 1_007
    await stream.close()
    stream = _mirror(tmp_path)
    state = stream.store.state()
    assert (state.first_seq, state.last_seq, state.msgs, state.num_deleted) == (3, 7, 3, 2)
    stream.copy_mirrored(10, "o.b", None, b"10", 1_010)
    await stream.flush()
    assert list(stream.store.seqs_for(">", 0)) == [3, 4, 7, 10]
    await stream.close()


async def test_rollups_act_only_where_the_mirror_allows_them(tmp_path: Path) -> None:
    purge = encode_headers({"Nats-Rollup": "sub", "KV-Operation": "PURGE"})
    for allow, left in ((False, [1, 2]), (True, [2])):
        stream = _mirror(tmp_path / str(allow), allow_rollup_hdrs=allow)
        stream.copy_mirrored(1, "k", None, b"v", 1)
        stream.copy_mirrored(2, "k", purge, b"", 2)
        await stream.flush()
        assert list(stream.store.seqs_for(">", 0)) == left
        await stream.close()
