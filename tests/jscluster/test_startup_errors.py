"""A JetStream cluster's start-up requirements refuse a server as the reference does."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cluster import free_port, route_url
from tests.support.servers import server_command


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--cluster_name", "C"], "jetstream cluster requires `server_name` to be set"),
        (["-n", "A"], "jetstream cluster requires `cluster.name` to be set"),
        (
            ["-n", "A", "--cluster_name", "C"],
            "JetStream cluster requires configured routes or solicited leafnode",
        ),
    ],
)
def test_jetstream_cluster_requirements(
    server_kind: str, tmp_path: Path, flags: list[str], message: str
) -> None:
    listen = route_url(free_port())
    argv = [*server_command(server_kind), "-p", "-1", "-js", "-sd", str(tmp_path)]
    argv += ["--cluster", listen, *flags]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    assert done.returncode == 1
    assert message in done.stderr
