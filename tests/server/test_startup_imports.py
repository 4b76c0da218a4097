"""`jetlake serve` starts without the lake's heavy libraries.

Client suites (nats.py's among them) stop and restart a server inside a test and give it a
second or so: pyarrow and numpy alone doubled the server's start-up time, so the modules a
server loads before it listens must leave them to the first lake or JetStream use.
"""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pyarrow", "numpy", "deltalake", "pyspark", "duckdb")


def test_server_modules_import_no_lake_library() -> None:
    probe = (
        "import sys, ingest.server.main, ingest.server.server, ingest.server.config_file;"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "", f"imported at start-up: {out.stdout.strip()}"
