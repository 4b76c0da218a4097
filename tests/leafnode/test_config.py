"""`leafnodes {}` and `jetstream { domain }` as both servers read them: a bad value is
refused at start with the reference's words, a good one read into the settings."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ingest.server.options import load_config
from tests.support.servers import server_command

BAD = {
    "remote account": 'leafnodes { remotes [ { url: "nats://127.0.0.1:7422", account: NOPE } ] }',
    "listener account": (
        "leafnodes { port: -1, authorization { user: a, password: b, account: NOPE } }"
    ),
    "remotes not an array": "leafnodes { remotes: 5 }",
    "remote not a map": "leafnodes { remotes [ 5 ] }",
    "users not an array": "leafnodes { port: -1, authorization { users: 5 } }",
    "user not a map": "leafnodes { port: -1, authorization { users [ 5 ] } }",
    "bad url": 'leafnodes { remotes [ { url: "nats://x:y:z" } ] }',
    "unknown key": "leafnodes { port: -1, bogus: 1 }",
    "domain with a dot": 'jetstream { domain: "a.b" }',
}
# Each case starts two processes (1.5-3 s): one runs by default, the rest under soak.
DEFAULT_RUN = {"remote account"}
_PREFIX = re.compile(r"^(nats-server|jetlake): (\S+:\d+:\d+: )?")


def refusal(kind: str, config: Path) -> str:
    """The last line a server prints when it refuses to start, without who and where."""
    run = subprocess.run(
        [*server_command(kind), "-p", "-1", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode != 0, f"{kind} started with {config.read_text()}"
    return _PREFIX.sub("", (run.stderr or run.stdout).strip().splitlines()[-1])


@pytest.mark.parametrize(
    "case",
    [c if c in DEFAULT_RUN else pytest.param(c, marks=pytest.mark.soak) for c in sorted(BAD)],
)
def test_bad_values_are_refused_as_the_reference_does(tmp_path: Path, case: str) -> None:
    config = tmp_path / "bad.conf"
    config.write_text(BAD[case] + "\n")
    assert refusal("jetlake", config) == refusal("nats-server", config)


def test_a_full_section_is_read(tmp_path: Path) -> None:
    config = tmp_path / "leaf.conf"
    config.write_text(
        "accounts { EDGE { users [ { user: e, password: e } ] } }\n"
        "jetstream { domain: edge }\n"
        "leafnodes {\n"
        "  listen: 127.0.0.1:-1\n"
        "  authorization { user: leaf, password: pw, account: EDGE, timeout: 3 }\n"
        '  reconnect: "2s"\n'
        "  remotes [\n"
        '    { urls: ["nats://u:p@hub:7422", "nats://hub2:7422"], account: EDGE,\n'
        '      hub: true, deny_imports: ["in.>"], deny_exports: "out.x" }\n'
        '    { url: "nats://other:7422" }\n'
        "  ]\n"
        "}\n"
    )
    opts = load_config(str(config))
    assert opts.jetstream.domain == "edge"
    leaf = opts.leafnodes
    assert leaf is not None
    assert (leaf.host, leaf.port, leaf.username, leaf.password) == ("127.0.0.1", 0, "leaf", "pw")
    assert (leaf.account, leaf.auth_timeout, leaf.reconnect) == ("EDGE", 3.0, 2.0)
    first, second = leaf.remotes
    assert [(u.host, u.port, u.user) for u in first.urls] == [
        ("hub", 7422, "u"),
        ("hub2", 7422, None),
    ]
    assert (first.account, first.hub, first.deny_imports, first.deny_exports) == (
        "EDGE",
        True,
        ("in.>",),
        ("out.x",),
    )
    assert (second.account, second.hub, len(second.urls)) == ("$G", False, 1)
