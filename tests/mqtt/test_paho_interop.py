"""Eclipse Paho's interoperability suite against both servers, one after the other.

Run with `PAHO_INTEROP_DIR=…/paho.mqtt.testing/interoperability pytest -m suites -s
tests/mqtt/test_paho_interop.py` (docs/compatibility.md). It prints each test's outcome on both
servers side by side, and fails when jetlake fails a test the reference passes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.mqtt.conftest import mqtt_port
from tests.support.paho_interop import ENV, SCRIPT, run_suite
from tests.support.servers import KINDS, ServerError, start_server

pytestmark = pytest.mark.suites

# The suite's subscribe-failure test needs a filter the server refuses: `test/nosubscribe`.
CONFIG = """
authorization {
  users = [{user: paho, password: paho, permissions: {subscribe: {deny: "test.nosubscribe"}}}]
}
no_auth_user: paho
mqtt { port: -1 }
"""
SUITE_TIMEOUT = 300.0


@pytest.mark.timeout(2 * SUITE_TIMEOUT + 60)
def test_paho_interoperability_suite(tmp_path: Path) -> None:
    suite_dir = Path(os.environ.get(ENV, ""))
    assert (suite_dir / SCRIPT).is_file(), (
        f"{ENV} must name paho.mqtt.testing's interoperability/ folder (docs/compatibility.md)"
    )
    results: dict[str, dict[str, str]] = {}
    for kind in KINDS:
        server = start_server(
            kind, "-js", "-sd", str(tmp_path / f"{kind}-store"), config=CONFIG, tmp_path=tmp_path
        )
        try:
            results[kind] = run_suite(
                suite_dir,
                "127.0.0.1",
                mqtt_port(server),
                tmp_path / f"{kind}.suite.log",
                SUITE_TIMEOUT,
            )
        finally:
            try:
                server.stop(expect_code=None)
            except ServerError:
                server.kill()
    ref, jl = results["nats-server"], results["jetlake"]
    names = sorted(ref.keys() | jl.keys())
    print(f"\n{'test':<32} {'nats-server':<12} jetlake   (suite output: {tmp_path}/*.suite.log)")
    for name in names:
        print(f"{name:<32} {ref.get(name, '-'):<12} {jl.get(name, '-')}")
    for kind, outcomes in results.items():
        passed = sum(v == "pass" for v in outcomes.values())
        print(f"{kind}: {passed}/{len(outcomes)} passed")
    behind = [n for n in names if ref.get(n) == "pass" and jl.get(n) != "pass"]
    assert behind == [], f"jetlake fails what the reference passes: {behind}"
