"""The five-minute tour, run as written against a real `jetlake serve`.

A newcomer copies these blocks first, so they are executed rather than trusted: the
shell blocks of the README's tour and of docs/getting-started.md run in bash, the
Python block in the venv's interpreter, with the `nats` CLI and nats-py pointed at a
server on a free port. `jetlake sql` lines are left out (each starts a JVM; the lake
tests run Spark over the same views) and so is the PATH line the test sets itself.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.servers import start_server

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
WAIT = Path(__file__).with_name("wait_for_interest.py")
BLOCK = re.compile(r"^```(sh|python)\n(.*?)^```", re.MULTILINE | re.DOTALL)
TOURS = {
    "README.md": "## A five-minute tour",
    "docs/getting-started.md": "## A tour",
}
SKIPPED = ("jetlake sql ", "export PATH=")


def _tour_blocks(page: str, heading: str, monitor: str) -> tuple[str, str]:
    """The tour's shell lines as one script, and its Python program. A subscriber started
    in the background is waited for (on `monitor`'s /connz) before the next line."""
    text = (ROOT / page).read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    section = text[start : end if end != -1 else len(text)]
    shell: list[str] = []
    python = ""
    for kind, body in BLOCK.findall(section):
        if kind == "python":
            python = body
            continue
        for line in body.splitlines():
            if line.strip() and not line.startswith(SKIPPED):
                shell.append(line)
                command = shlex.split(line.split("#")[0])
                if command[:2] == ["nats", "sub"] and command[-1] == "&":
                    shell.append(shlex.join([sys.executable, str(WAIT), monitor, command[2]]))
    return "\n".join(shell), python


@pytest.mark.parametrize("page", sorted(TOURS))
def test_the_tour_runs_as_written(page: str, tmp_path: Path) -> None:
    server = start_server(
        "jetlake", "-js", "-sd", str(tmp_path / "data"), "-m", "-1", tmp_path=tmp_path
    )
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "NATS_URL": server.url}
    try:
        shell, python = _tour_blocks(page, TOURS[page], server.http_url)
        assert shell and python, f"{page}: tour blocks not found"
        before, _, after = shell.partition("jetlake inspect")
        out = _run(["bash", "-ec", before], tmp_path, env)
        assert 'Received on "orders.eu"' in out and "hello" in out
        assert "Messages: 11" in _run(["nats", "stream", "info", "ORDERS"], tmp_path, env)
        program = python.replace("nats://127.0.0.1:4222", server.url)
        out = _run([sys.executable, "-c", program], tmp_path, env)
        assert "stored as ORDERS 12" in out and "b'eu'" in out
        out = _run(["bash", "-ec", "jetlake inspect" + after], tmp_path, env)
        assert re.search(r"orders\.eu\s+11\b", out) and re.search(r"orders\.us\s+1\b", out)
    finally:
        server.stop(expect_code=None)


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, f"{argv[:2]} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr
