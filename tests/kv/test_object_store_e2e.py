"""nats-py's Object Store against both servers: chunks, metadata rollups, watches.

An object is chunk messages on `$O.<bucket>.C.<nuid>` plus one metadata message
per name on `$O.<bucket>.M.<base64url(name)>` that rolls up its predecessors
(ADR-20); reads ride an ordered push consumer, so a large get exercises flow
control end to end.
"""

from __future__ import annotations

import base64
import hashlib
import random

import pytest
from nats.js import api as jsapi
from nats.js.client import JetStreamContext
from nats.js.errors import NotFoundError, ObjectNotFoundError

from tests.conftest import Connect
from tests.jetstream.test_streams_e2e import api, normalise
from tests.support.servers import ServerProcess

MIB = 1024 * 1024
CHUNK = 128 * 1024


@pytest.fixture
async def js(js_server: ServerProcess, connect: Connect) -> JetStreamContext:
    return (await connect(js_server)).jetstream(timeout=10)


def digest(data: bytes) -> str:
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()


async def test_bucket_is_a_stream_as_the_reference_stores_it(
    js_server: ServerProcess, connect: Connect
) -> None:
    nc = await connect(js_server)
    await nc.jetstream(timeout=5).create_object_store("files", description="d", ttl=3600)
    info = await api(nc, "$JS.API.STREAM.INFO.OBJ_files")
    assert normalise(info["config"]) == {
        "name": "OBJ_files",
        "description": "d",
        "subjects": ["$O.files.C.>", "$O.files.M.>"],
        "retention": "limits",
        "max_consumers": -1,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": 3_600_000_000_000,
        "max_msgs_per_subject": -1,
        "max_msg_size": -1,
        "discard": "new",
        "storage": "file",
        "num_replicas": 1,
        "duplicate_window": 120_000_000_000,
        "compression": "none",
        "allow_direct": True,
        "mirror_direct": False,
        "sealed": False,
        "deny_delete": False,
        "deny_purge": False,
        "allow_rollup_hdrs": True,
        "consumer_limits": {},
        "allow_msg_ttl": False,
        "metadata": {"_nats.req.level": "0"},
    }


async def test_20_mib_object_round_trips_byte_identical(js: JetStreamContext) -> None:
    obs = await js.create_object_store("big")
    data = random.Random(20).randbytes(20 * MIB + 12_345)  # a partial last chunk too
    info = await obs.put("blob.bin", data)
    chunks = -(-len(data) // CHUNK)
    assert (info.size, info.chunks, info.digest) == (len(data), chunks, digest(data))
    result = await obs.get("blob.bin")
    assert result.data == data
    assert (result.info.size, result.info.chunks) == (len(data), chunks)
    status = await obs.status()
    assert (status.bucket, status.sealed) == ("big", False)
    assert status.size > len(data)
    stream = await js.stream_info("OBJ_big")
    assert stream.state.messages == chunks + 1  # the chunks and one metadata message


async def test_info_list_replace_delete(js: JetStreamContext) -> None:
    obs = await js.create_object_store("docs")
    with pytest.raises(NotFoundError):
        await obs.list()
    await obs.put("a.txt", b"alpha")
    await obs.put("b.txt", b"b" * (CHUNK + 1))
    info = await obs.get_info("b.txt")
    assert (info.name, info.bucket, info.size, info.chunks, info.deleted) == (
        "b.txt",
        "docs",
        CHUNK + 1,
        2,
        False,
    )
    assert sorted(i.name for i in await obs.list()) == ["a.txt", "b.txt"]
    await obs.put("b.txt", b"shorter")  # replacing purges the old chunks
    assert (await obs.get("b.txt")).data == b"shorter"
    assert (await js.stream_info("OBJ_docs")).state.messages == 4  # 2 chunks, 2 metadata
    await obs.delete("a.txt")
    with pytest.raises(ObjectNotFoundError):
        await obs.get_info("a.txt")
    deleted = await obs.get_info("a.txt", show_deleted=True)
    assert (deleted.deleted, deleted.size, deleted.chunks) == (True, 0, 0)
    assert [i.name for i in await obs.list(ignore_deletes=True)] == ["b.txt"]
    assert (await js.stream_info("OBJ_docs")).state.messages == 3  # b's chunk, 2 metadata


async def test_update_meta(js: JetStreamContext) -> None:
    """Same name only: nats-py 2.16 refuses renames (it checks the old name is deleted)."""
    obs = await js.create_object_store("meta")
    await obs.put("doc", b"payload")
    await obs.update_meta(
        "doc", jsapi.ObjectMeta(name="doc", description="described", headers={"K": ["v"]})
    )
    info = await obs.get_info("doc")
    assert (info.name, info.description, info.headers, info.size) == (
        "doc",
        "described",
        {"K": ["v"]},
        7,
    )
    assert (await obs.get("doc")).data == b"payload"
    assert (await js.stream_info("OBJ_meta")).state.messages == 2  # the rollup kept one


async def test_watch_sees_puts_meta_updates_deletes(js: JetStreamContext) -> None:
    obs = await js.create_object_store("watched")
    await obs.put("first", b"1")
    watcher = await obs.watch()
    existing = await watcher.updates(timeout=5)
    assert (existing.name, existing.size) == ("first", 1)
    assert await watcher.updates(timeout=5) is None
    await obs.put("second", b"22")
    await obs.update_meta("second", jsapi.ObjectMeta(name="second", description="desc"))
    await obs.delete("first")
    seen = [await watcher.updates(timeout=5) for _ in range(3)]
    assert [(i.name, i.size, i.description, i.deleted) for i in seen] == [
        ("second", 2, None, False),
        ("second", 2, "desc", False),
        ("first", 0, None, True),
    ]
    await watcher.stop()
