"""`nats stream backup` and `nats stream restore` round trip on both servers: the stream
comes back with its messages, gaps and consumers. Each server restores only its own
backups (jetlake's archive is its own), so the two runs are checked alike, not crossed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.test_nats_cli import cli
from tests.support.servers import ServerProcess


async def _json(server: ServerProcess, *args: str) -> dict[str, object]:
    code, out = await cli(server.url, *args, "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert isinstance(doc, dict)
    return doc


async def test_backup_and_restore_round_trip(
    js_server: ServerProcess,
    tmp_path: Path,
) -> None:
    server, url = js_server, js_server.url
    assert (await cli(url, "stream", "add", "ORD", "--subjects", "ord.>", "--defaults"))[0] == 0
    for i in range(40):
        assert (await cli(url, "pub", f"ord.{i % 4}", f"order {i}" * 50))[0] == 0
    assert (await cli(url, "stream", "rmm", "ORD", "5", "-f"))[0] == 0
    assert (await cli(url, "consumer", "add", "ORD", "C1", "--pull", "--defaults"))[0] == 0
    assert (await cli(url, "consumer", "next", "ORD", "C1", "--count", "3"))[0] == 0
    before = await _json(server, "stream", "info", "ORD")
    consumer = await _json(server, "consumer", "info", "ORD", "C1")

    folder = tmp_path / "backup"
    code, out = await cli(
        url, "stream", "backup", "ORD", str(folder), "--consumers", "--no-progress"
    )
    assert code == 0, out
    assert "Received" in out and '"ORD"' in out
    assert json.loads((folder / "backup.json").read_text())["config"]["name"] == "ORD"
    assert (folder / "stream.tar.s2").stat().st_size > 0

    code, out = await cli(url, "stream", "restore", str(folder), "--no-progress")
    assert code != 0 and 'Stream "ORD" already exist' in out
    assert (await cli(url, "stream", "rm", "ORD", "-f"))[0] == 0
    code, out = await cli(url, "stream", "restore", str(folder), "--no-progress")
    assert code == 0, out
    assert 'Restored stream "ORD"' in out

    after = await _json(server, "stream", "info", "ORD")
    for key in ("messages", "bytes", "first_seq", "last_seq", "num_deleted", "consumer_count"):
        assert after["state"][key] == before["state"][key], key  # type: ignore[index]
    restored = await _json(server, "consumer", "info", "ORD", "C1")
    for key in ("delivered", "num_ack_pending", "num_pending"):
        want, got = consumer[key], restored[key]
        if isinstance(want, dict) and isinstance(got, dict):
            want, got = want["stream_seq"], got["stream_seq"]
        assert got == want, key
