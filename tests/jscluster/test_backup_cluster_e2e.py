"""A replicated stream's backup in a cluster, the reference and jetlake side by side: the
stream's leader answers the snapshot and streams it to a client on any server. A restore
in a cluster is the reference's alone for now: jetlake refuses it (`10062`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.jetstream.test_backup_e2e import snapshot
from tests.jscluster.support import js_cluster
from tests.support.servers import enabled_kinds

pytestmark = [pytest.mark.timeout(120), pytest.mark.parametrize("kind", enabled_kinds())]


async def test_the_leader_answers_a_snapshot(kind: str, tmp_path: Path) -> None:
    async with js_cluster(kind, tmp_path, timeout=5) as c:
        await c.add_stream("R", ["r.>"])
        for i in range(50):
            await c.js.publish("r.x", b"%d" % i * 100)
        doc, receiver = await snapshot(c.nc, "R", chunk_size=1024)
        assert doc["state"]["messages"] == 50
        assert receiver.end.result().headers == {"Status": "204"}
        assert len(receiver.chunks) > 1
        if kind == "jetlake":
            body = json.dumps({"config": {"name": "R2"}}).encode()
            reply = await c.nc.request("$JS.API.STREAM.RESTORE.R2", body, timeout=5)
            assert json.loads(reply.data)["error"]["err_code"] == 10062
