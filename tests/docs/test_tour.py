"""The five-minute tour, run as written against a real `jetlake serve` with its lake.

A newcomer copies these blocks first, so they are executed rather than trusted: every
shell and Python block of the README's tour and of docs/getting-started.md's, in the
page's order, the shell ones in bash and the Python one in the venv's interpreter, with
the `nats` CLI, nats-py and `jetlake sql` pointed at one server as `make serve` starts
it (JetStream and the lake, its SQL service on free ports). The one line left out is the
PATH line, which the test sets itself; the compactor stays off (`compact_interval: 0`),
one JVM fewer, as the SQL answers are the same either side of a compaction (the lake
tests hold that).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sql.test_service_e2e import START_DEADLINE, _wait_for_service, start_with_service
from tests.support.cluster import free_port
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.timeout(START_DEADLINE + 180)  # the first page pays the JVM's start
ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
WAIT = Path(__file__).with_name("wait_for_interest.py")
BLOCK = re.compile(r"^```(sh|python)\n(.*?)^```", re.MULTILINE | re.DOTALL)
TOURS = {
    "README.md": "## A five-minute tour",
    "docs/getting-started.md": "## A tour",
}
SKIPPED = "export PATH="


def _tour_blocks(page: str, heading: str, monitor: str) -> list[tuple[str, str]]:
    """The tour's blocks in the page's order, as ("sh", script) or ("python", program).
    A subscriber started in the background is waited for (on `monitor`'s /connz) before
    the next line."""
    text = (ROOT / page).read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    section = text[start : end if end != -1 else len(text)]
    blocks: list[tuple[str, str]] = []
    for kind, body in BLOCK.findall(section):
        if kind == "python":
            blocks.append((kind, body))
            continue
        shell: list[str] = []
        for line in body.splitlines():
            if line.strip() and not line.startswith(SKIPPED):
                shell.append(line)
                command = shlex.split(line.split("#")[0])
                if command[:2] == ["nats", "sub"] and command[-1] == "&":
                    shell.append(shlex.join([sys.executable, str(WAIT), monitor, command[2]]))
        if shell:
            blocks.append((kind, "\n".join(shell)))
    return blocks


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    """`make serve` in a fresh folder, and that folder: the tour's `./data` is the store."""
    tmp = tmp_path_factory.mktemp("tour")
    store = tmp / "data"
    listen = f"127.0.0.1:{free_port()}"
    conf = f'lake {{ compact_interval: 0, sql {{ listen: "{listen}", jdbc: false }} }}\n'
    started = start_with_service("-js", "-sd", str(store), "-m", "-1", config=conf, tmp_path=tmp)
    try:
        _wait_for_service(started, store)  # as a reader waits for `make serve` to be ready
        yield started, tmp
    finally:
        started.stop(expect_code=None)


@pytest.mark.parametrize("page", sorted(TOURS))
def test_the_tour_runs_as_written(page: str, served: tuple[ServerProcess, Path]) -> None:
    server, cwd = served
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "NATS_URL": server.url}
    blocks = _tour_blocks(page, TOURS[page], server.http_url)
    assert [kind for kind, _ in blocks].count("python") == 1, f"{page}: tour blocks not found"
    outputs = []
    try:
        for kind, body in blocks:
            if kind == "python":
                program = body.replace("nats://127.0.0.1:4222", server.url)
                outputs.append(_run([sys.executable, "-c", program], cwd, env))
            else:
                outputs.append(_run(["bash", "-ec", body], cwd, env))
    finally:  # the next page starts from an empty server, as a reader's would
        _run(["bash", "-c", "nats stream rm -f ORDERS; nats kv del -f config"], cwd, env)
    out = "\n".join(outputs)
    assert 'Received on "orders.eu"' in out and "hello" in out
    assert "stored as ORDERS 12" in out and "b'eu'" in out
    assert "jetlake sql: querying the SQL service" in out, "jetlake sql did not ask the service"
    assert "starting a local Spark session" not in out
    # `jetlake sql`'s and `jetlake inspect`'s count by subject, then the KV view's row
    assert len(re.findall(r"orders\.eu\s+11\b", out)) == 2, out
    assert len(re.findall(r"orders\.us\s+1\b", out)) == 2, out
    assert re.search(r"region\s+eu\s+1\b", out), out


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{argv[:2]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr
