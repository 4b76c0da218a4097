"""The example Grafana dashboard (docs/assets/grafana-dashboard.json) and the monitoring page
against the metrics a real `jetlake serve` exports.

A renamed metric would leave the dashboard's panels empty without any error in Grafana,
so every name it queries must be one the server serves, and every name the server
serves must be on the monitoring page, as must every endpoint it answers.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import nats
import pytest

from ingest.server import monitor
from tests.support.servers import ServerProcess, start_server

DOCS = Path(__file__).resolve().parents[2] / "docs"
DASHBOARD = DOCS / "assets" / "grafana-dashboard.json"
NODE_TOOLS = DOCS.parent / ".venv" / "node"  # scripts/install-node-tools, from the set-up
GRAFANA_TYPES = "@grafana/schema/dist/esm/raw/dashboard/x/Dashboard_types.gen"
METRIC = re.compile(r"\bjetlake_[a-z_]+\b")


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # a collapsed row keeps its panels inside
    return out


def _queried(dashboard: dict[str, Any]) -> set[str]:
    exprs = [t["expr"] for p in _panels(dashboard) for t in p.get("targets", [])]
    variables = dashboard["templating"]["list"]
    exprs += [v["query"]["query"] for v in variables if isinstance(v.get("query"), dict)]
    return {name for expr in exprs for name in METRIC.findall(expr)}


def _lake_metrics() -> set[str]:
    """The lake's names: a server needs a lake, hence a JVM, before it serves them."""
    names = {f"jetlake_lake_lag_{key}" for key, _ in monitor._LAKE_METRICS}
    source = inspect.getsource(monitor.Monitor._metrics)
    literal = {n for n in METRIC.findall(source) if not n.endswith("_")}  # not f-string heads
    names |= {n for n in literal if n.startswith("jetlake_lake_")}
    return names


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Names a JetStream server with one stream serves on /metrics, plus the lake's."""
    tmp = tmp_path_factory.mktemp("metrics")
    server = start_server("jetlake", "-js", "-sd", str(tmp / "js"), "-m", "-1", tmp_path=tmp)
    try:
        body = _scrape(server)
    finally:
        server.stop(expect_code=None)
    served = {line.split()[2] for line in body.splitlines() if line.startswith("# TYPE ")}
    return served | _lake_metrics()


def _scrape(server: ServerProcess) -> str:
    async def add_stream() -> None:
        nc = await nats.connect(server.url)
        await nc.jetstream().add_stream(name="ORDERS", subjects=["orders.>"])
        await nc.jetstream().publish("orders.eu", b"x")
        await nc.close()

    asyncio.run(add_stream())
    with urllib.request.urlopen(f"{server.http_url}/metrics", timeout=10) as response:
        return response.read().decode()


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    dashboard = _dashboard()
    for key in ("title", "uid", "schemaVersion", "panels", "templating"):
        assert key in dashboard, key
    panels = _panels(dashboard)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        assert all(t["expr"] for t in panel["targets"]), panel["title"]
    names = {v["name"] for v in dashboard["templating"]["list"]}
    used = set(re.findall(r"\$\{?(\w+)", json.dumps(panels)))
    assert used - {"__rate_interval", "__interval"} <= names, "undefined template variables"


def test_grafanas_own_dashboard_schema_accepts_the_dashboard(tmp_path: Path) -> None:
    """Grafana's published types for a dashboard's JSON (the package its front end is built
    from), checked by TypeScript with the dashboard as an object literal: a wrong type, a
    missing required field or an unknown key fails here as it would when Grafana loads it.
    The import envelope (`__inputs`, `__requires`: the data source the import screen asks
    for) is read by that screen and is not part of the saved dashboard."""
    tsc = NODE_TOOLS / "node_modules" / "typescript" / "bin" / "tsc"
    assert tsc.is_file(), f"{tsc} missing: run the set-up (make test installs it)"
    saved = {key: value for key, value in _dashboard().items() if not key.startswith("__")}
    check = tmp_path / "dashboard.ts"
    check.write_text(
        f'import type {{ Dashboard }} from "{GRAFANA_TYPES}";\n'
        f"export const dashboard: Dashboard = {json.dumps(saved, indent=1)};\n",
        encoding="utf-8",
    )
    (tmp_path / "node_modules").symlink_to(NODE_TOOLS / "node_modules")
    options = {"strict": True, "noEmit": True, "module": "esnext", "target": "es2022"}
    options |= {"moduleResolution": "bundler", "skipLibCheck": True}
    config = {"compilerOptions": options, "files": [check.name]}
    (tmp_path / "tsconfig.json").write_text(json.dumps(config), encoding="utf-8")
    done = subprocess.run(
        ["node", str(tsc), "-p", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_metric_the_dashboard_queries_is_exported(exported: set[str]) -> None:
    queried = _queried(_dashboard())
    assert queried, "the dashboard queries no jetlake metric"
    assert queried <= exported, f"not exported: {sorted(queried - exported)}"


def test_every_exported_metric_is_on_the_monitoring_page(exported: set[str]) -> None:
    page = (DOCS / "monitoring.md").read_text(encoding="utf-8")
    missing = sorted(name for name in exported if f"`{name}`" not in page)
    assert not missing, f"metrics missing from docs/monitoring.md: {missing}"
    varz = {f"jetlake_varz_{key}" for key, _, _ in monitor.STATS}
    assert varz <= exported


def test_every_endpoint_is_on_the_monitoring_page() -> None:
    source = inspect.getsource(monitor.Monitor.__init__)
    paths = re.findall(r'"(/[a-z]*)": self\._', source)
    assert "/metrics" in paths, "Monitor's routes are no longer in its __init__"
    page = (DOCS / "monitoring.md").read_text(encoding="utf-8")
    missing = [path for path in paths if f"| `{path}`" not in page and f", `{path}`" not in page]
    assert not missing, f"endpoints missing from docs/monitoring.md's table: {missing}"
