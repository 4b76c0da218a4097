"""The edge rows (leafnode, WebSocket, MQTT over WebSocket, MQTT on a cluster) run end
to end on both servers.

Small counts: these show each row still produces a figure on both sides (servers
start, clients connect, every message arrives), not how fast it is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import run, websocket, workloads
from benchmarks.model import Incomplete


def _bench(tmp_path: Path, only: str, count: int) -> list[dict[str, object]]:
    out = tmp_path / "bench.json"
    assert run.main(["--only", only, "--count", str(count), "--json", str(out)]) == 0
    return json.loads(out.read_text())["results"]


def test_leafnode_and_websocket_rows_measure_both_servers(tmp_path: Path) -> None:
    results = _bench(tmp_path, "natscli-leafnode,natscli-websocket", 2_000)
    assert [r["workload"] for r in results] == ["natscli-leafnode", "natscli-websocket"]
    for row in results:
        assert (row["ref_status"], row["jetlake_status"]) == ("ok", "ok"), row
        assert row["ref"] > 0 and row["jetlake"] > 0


@pytest.mark.soak  # a JetStream server a side; MQTT over WebSocket: tests/websocket
def test_mqtt_over_websocket_row_measures_both_servers(tmp_path: Path) -> None:
    [row_qos0, row_qos1] = _bench(tmp_path, "mqtt-websocket", 200)
    for row in (row_qos0, row_qos1):
        assert (row["ref_status"], row["jetlake_status"]) == ("ok", "ok"), row
        assert row["ref"] > 0 and row["jetlake"] > 0


@pytest.mark.soak
def test_mqtt_cluster_row_measures_both_servers(tmp_path: Path) -> None:
    [row] = _bench(tmp_path, "cluster-mqtt", 500)
    assert (row["ref_status"], row["jetlake_status"]) == ("ok", "ok"), row


def test_edge_rows_are_in_their_groups() -> None:
    assert {"natscli-leafnode", "natscli-websocket"} <= {
        w.name for w in workloads.select(["natscli"])
    }
    assert "cluster-mqtt" in {w.name for w in workloads.select(["cluster"])}
    assert {w.name for w in workloads.select(["mqtt"])} == {"mqtt", "mqtt-websocket"}
    assert "mqtt-websocket" not in {w.name for w in workloads.select(["js"])}


def test_websocket_url_is_read_from_the_listener_line(tmp_path: Path) -> None:
    log = tmp_path / "ws.log"
    log.write_text(
        "[1] [INF] Listening for websocket clients on ws://127.0.0.1:45715\n"
        "[1] [INF] Listening for client connections on 127.0.0.1:38003\n"
    )
    assert websocket.websocket_url(log) == "ws://127.0.0.1:45715"


def test_a_log_without_a_websocket_listener_names_the_file(tmp_path: Path) -> None:
    log = tmp_path / "ws.log"
    log.write_text("[1] [INF] Server is ready\n")
    with pytest.raises(Incomplete, match=r"ws\.log names no websocket listener"):
        websocket.websocket_url(log)
