"""`/jsz` against both servers after the same JetStream use: the same totals, field by field.

What differs by design is left out and listed: the API level (jetlake's own),
`config.max_memory`/`max_storage` (the reference reports 75% of the machine's
memory and disk; jetlake enforces no such default and says -1), `config.strict`
and `limits` (reference-only), and the sync interval (each server's default).
"""

from __future__ import annotations

from pathlib import Path

import nats.js.errors
import pytest

from tests.conftest import Connect, MakeServer
from tests.support.http import get_json


async def test_jsz_totals_match_the_reference(
    make_server: MakeServer, tmp_path: Path, connect: Connect
) -> None:
    server = make_server("-js", "-sd", str(tmp_path / "store"), "-m", "-1")
    nc = await connect(server)
    js = nc.jetstream()
    await js.add_stream(name="F", subjects=["f.>"])
    await js.add_stream(name="M", subjects=["m.>"], storage="memory")
    for _ in range(3):
        await js.publish("f.a", b"x" * 100)
    for _ in range(2):
        await js.publish("m.a", b"y" * 10, headers={"H": "v"})
    await js.add_consumer("F", durable_name="D")
    with pytest.raises(nats.js.errors.NotFoundError):
        await js.stream_info("NOPE")
    jsz = await get_json(f"http://127.0.0.1:{server.http_port}/jsz")
    totals = {k: jsz[k] for k in ("streams", "consumers", "messages", "bytes", "memory", "storage")}
    assert totals == {
        "streams": 2,
        "consumers": 1,
        "messages": 5,
        "bytes": 493,
        "memory": 94,
        "storage": 399,
    }
    assert (jsz["api"]["total"], jsz["api"]["errors"]) == (4, 1)
    assert jsz["api"]["level"] == 5
    assert (jsz["accounts"], jsz["ha_assets"], jsz["total"]) == (1, 0, 1)
    assert jsz["config"]["store_dir"] == str(tmp_path / "store" / "jetstream")
    # consumers=1 lists each stream's consumers (and implies streams); config=1 adds the
    # streams' and consumers' configs, which are left out without it
    url = f"http://127.0.0.1:{server.http_port}/jsz?consumers=1"
    [bare] = (await get_json(url))["account_details"]
    f = next(s for s in bare["stream_detail"] if s["name"] == "F")
    assert [c["name"] for c in f["consumer_detail"]] == ["D"]
    assert f["consumer_detail"][0]["num_pending"] == 3
    assert "config" not in f and "config" not in f["consumer_detail"][0]
    varz = await get_json(f"http://127.0.0.1:{server.http_port}/varz")
    assert f["cluster"] == {"leader": varz["server_name"]}
    [full] = (await get_json(url + "&config=1"))["account_details"]
    f = next(s for s in full["stream_detail"] if s["name"] == "F")
    assert f["config"]["subjects"] == ["f.>"]
    assert f["consumer_detail"][0]["config"]["durable_name"] == "D"
