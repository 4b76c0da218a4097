"""jetlake with the compiled codec and with the pure one (`JETLAKE_NATIVE=0`) serve alike.

The property tests (tests/parser/test_native_codec.py) compare the two codecs op by op;
this runs both inside real servers, so the fallback path the server takes where the
extension is absent stays exercised end to end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Connect
from tests.support.clients import received, sync
from tests.support.servers import start_server

SIZES = (0, 1, 127, 128, 4_095, 65_536, 1024 * 1024 - 100)  # room for headers
PATTERN = bytes(range(256)) * (1024 * 1024 // 256 + 2)


@pytest.mark.parametrize("native", ["1", "0"])
async def test_pipelined_publishes_arrive_whole_on_either_codec(
    native: str, tmp_path: Path, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JETLAKE_NATIVE", native)
    server = start_server("jetlake", tmp_path=tmp_path)
    try:
        pub, sub_nc = await connect(server), await connect(server)
        sub = await sub_nc.subscribe("paths.>")
        await sync(sub_nc)
        sent = []
        for i in range(3_000):
            size = SIZES[i % len(SIZES)] if i % 100 == 0 else i % 300
            payload = PATTERN[i % 256 : i % 256 + size]
            headers = {"N": str(i)} if i % 3 == 0 else None
            await pub.publish(
                f"paths.{i % 7}", payload, reply="r" if i % 5 else "", headers=headers
            )
            sent.append((f"paths.{i % 7}", payload, "r" if i % 5 else "", headers))
        msgs = await received(pub, sub_nc, sub)
        assert [(m.subject, m.data, m.reply, m.headers) for m in msgs] == sent
    finally:
        server.stop()
