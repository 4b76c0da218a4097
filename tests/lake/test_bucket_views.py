"""`kv_<bucket>` and `obj_<bucket>` views against what nats-py's KV and Object Store APIs read.

The client's own reads are the reference: the view must list exactly the keys
`kv.keys()` lists with the values and revisions `kv.get` returns, and the
objects `obs.list()` lists (deleted ones included). Each check runs with the
bucket all in the live tail, all in the lake, and split across both.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from deltalake import DeltaTable
from nats.js import api
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from log.compactor.layout import StreamRef
from tests.conftest import Connect
from tests.lake.conftest import Lake

KvRow = tuple[str, bytes, int, int]
ObjRow = tuple[str, int, int, str, int, bool]


def micros(when: datetime | None) -> int:
    assert when is not None
    return round(when.replace(tzinfo=when.tzinfo or UTC).timestamp() * 1_000_000)


async def kv_expected(js: JetStreamContext, kv: KeyValue, stream: str) -> set[KvRow]:
    """(key, value, revision, created µs) of every live key, as the client reads them."""
    out: set[KvRow] = set()
    for key in await kv.keys():
        entry = await kv.get(key)
        assert entry.value is not None and entry.revision is not None
        stored = await js.get_msg(stream, seq=entry.revision)
        out.add((key, entry.value, entry.revision, micros(stored.time)))
    return out


def kv_view(lake: Lake, bucket: str) -> set[KvRow]:
    rows = lake.sql(f"SELECT key, value, revision, unix_micros(created) AS c FROM kv_{bucket}")
    return {(r.key, bytes(r.value), r.revision, r.c) for r in rows}


async def sealed_and_compacted(lake: Lake, js: JetStreamContext, stream: str) -> None:
    last = (await js.stream_info(stream)).state.last_seq
    await lake.sealed(stream, last)
    lake.compact()


async def test_kv_view_holds_the_live_keys_with_their_latest_values(
    lake: Lake, connect: Connect
) -> None:
    server = lake.start()
    js = (await connect(server)).jetstream()
    kv = await js.create_key_value(bucket="cfg", history=3)
    for key in ("a", "b", "c", "d", "x.y.z"):
        await kv.put(key, b"1")
    await kv.put("a", b"2")  # an update: the older revision stays live (history 3)
    await kv.delete("b")
    await kv.purge("c")  # a rollup: retires c's older revisions from the live log only
    for i in range(2, 6):  # more revisions than history keeps: limits retire d's oldest
        await kv.put("d", b"%d" % i)
    expected = await kv_expected(js, kv, "KV_cfg")
    assert {row[:2] for row in expected} == {("a", b"2"), ("d", b"5"), ("x.y.z", b"1")}
    assert kv_view(lake, "cfg") == expected  # all in the live tail
    await sealed_and_compacted(lake, js, "KV_cfg")
    assert kv_view(lake, "cfg") == expected  # all in the lake, retired revisions included
    await kv.delete("a")
    await kv.put("b", b"back")  # a deleted key put again
    await kv.put("d", b"6")
    expected = await kv_expected(js, kv, "KV_cfg")
    assert {row[:2] for row in expected} == {("b", b"back"), ("d", b"6"), ("x.y.z", b"1")}
    assert kv_view(lake, "cfg") == expected  # lake plus tail
    await sealed_and_compacted(lake, js, "KV_cfg")
    assert kv_view(lake, "cfg") == expected
    # purge_deletes purges each removed key's subject: its markers go, and with them every
    # older revision the lake kept, so none of them can become the key's latest row again.
    await kv.purge_deletes(olderthan=-1)
    assert kv_view(lake, "cfg") == expected
    await sealed_and_compacted(lake, js, "KV_cfg")
    assert kv_view(lake, "cfg") == expected
    table = StreamRef.load(lake.stream_dir("KV_cfg")).table_path(lake.lake_dir)
    left = DeltaTable(str(table)).to_pyarrow_table(columns=["subject"]).column("subject")
    assert set(left.to_pylist()) == {"$KV.cfg.b", "$KV.cfg.d", "$KV.cfg.x.y.z"}


async def obj_expected(js: JetStreamContext, obs: ObjectStore, bucket: str) -> set[ObjRow]:
    """(name, size, chunks, digest, modified µs, deleted) of every object, as the client lists."""
    out: set[ObjRow] = set()
    for info in await obs.list():
        token = base64.urlsafe_b64encode(info.name.encode()).decode()
        meta = await js.get_msg(f"OBJ_{bucket}", subject=f"$O.{bucket}.M.{token}")
        row = (info.name, info.size or 0, info.chunks or 0, info.digest or "")
        out.add((*row, micros(meta.time), bool(info.deleted)))
    return out


def obj_view(lake: Lake, bucket: str) -> set[ObjRow]:
    rows = lake.sql(
        f"SELECT name, size, chunks, digest, unix_micros(modified) AS m, deleted FROM obj_{bucket}"
    )
    return {(r.name, r.size, r.chunks, r.digest, r.m, r.deleted) for r in rows}


async def test_obj_view_lists_each_object_with_its_latest_metadata(
    lake: Lake, connect: Connect
) -> None:
    server = lake.start()
    js = (await connect(server)).jetstream()
    obs = await js.create_object_store("files")
    small_chunks = api.ObjectMeta(options=api.ObjectMetaOptions(max_chunk_size=1024))
    await obs.put("small", b"hello")
    await obs.put("big", bytes(range(256)) * 20, meta=small_chunks)  # 5120 bytes: 5 chunks
    await obs.put("gone", b"bye")
    await obs.put("small", b"hello again")  # a new version replaces the metadata
    await obs.update_meta("big", api.ObjectMeta(name="big", description="resized"))
    await obs.delete("gone")
    expected = await obj_expected(js, obs, "files")
    by_name = {row[0]: row for row in expected}
    assert by_name.keys() == {"small", "big", "gone"}
    assert by_name["big"][1:3] == (5120, 5) and by_name["small"][1:3] == (11, 1)
    assert by_name["gone"][5] and not by_name["big"][5]
    assert obj_view(lake, "files") == expected  # all in the live tail
    await sealed_and_compacted(lake, js, "OBJ_files")
    assert obj_view(lake, "files") == expected  # all in the lake
    await obs.put("gone", b"back")  # a deleted name put again, after compaction
    await obs.delete("small")
    expected = await obj_expected(js, obs, "files")
    assert {row[0] for row in expected if row[5]} == {"small"}
    assert obj_view(lake, "files") == expected  # lake plus tail
    await sealed_and_compacted(lake, js, "OBJ_files")
    assert obj_view(lake, "files") == expected
