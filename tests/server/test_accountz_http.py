"""`/accountz` and `/accstatz` over HTTP, beside the system account's ACCOUNTZ and STATZ.

Named accounts beside a system account, a client of APP connected; each kind answers
the same names with the same keys, and an unknown account is refused with a 400.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats
import pytest

from tests.support.servers import enabled_kinds, start_server

pytestmark = [pytest.mark.timeout(60)]

CONFIG = """
accounts {
  APP { users: [{user: app, password: app}] }
  SYS { users: [{user: sys, password: sys}] }
}
system_account: SYS
"""


async def get(port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def shape(doc: Any) -> Any:
    """The keys of a document, nested, without the values."""
    if isinstance(doc, dict):
        return {key: shape(value) for key, value in doc.items()}
    if isinstance(doc, list):
        return [shape(doc[0])] if doc else []
    return None


async def answers(kind: str, tmp_path: Path) -> dict[str, Any]:
    server = start_server(kind, "-m", "-1", config=CONFIG, tmp_path=tmp_path, name=kind)
    try:
        assert server.http_port is not None
        nc = await nats.connect(server.url, user="app", password="app")
        try:
            out: dict[str, Any] = {}
            for path in ("/accountz", "/accountz?acc=APP", "/accstatz", "/accstatz?unused=1"):
                status, body = await get(server.http_port, path)
                assert status == 200, (kind, path, body)
                out[path] = json.loads(body)
            out["unknown"] = await get(server.http_port, "/accountz?acc=NOPE")
            return out
        finally:
            await nc.close()
    finally:
        await server.stop_async()


async def test_accountz_and_accstatz_answer_as_the_reference(tmp_path: Path) -> None:
    got = {kind: await answers(kind, tmp_path / kind) for kind in enabled_kinds()}
    for kind, out in got.items():
        assert out["/accountz"]["system_account"] == "SYS", kind
        assert {"APP", "SYS"} <= set(out["/accountz"]["accounts"]), kind
        assert out["/accountz?acc=APP"]["account_detail"]["account_name"] == "APP", kind
        assert [a["acc"] for a in out["/accstatz"]["account_statz"]] == ["APP"], kind
        named = {a["acc"] for a in out["/accstatz?unused=1"]["account_statz"]}
        assert {"APP", "SYS"} <= named, kind
        status, body = out["unknown"]
        assert status == 400 and b"NOPE" in body, (kind, status, body)
    if len(got) == 2:
        ref, ours = got["nats-server"], got["jetlake"]
        for path in ("/accountz?acc=APP", "/accstatz"):
            assert shape(ours[path]) == shape(ref[path]), path
