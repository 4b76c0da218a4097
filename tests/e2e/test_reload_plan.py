"""The pure side of a config reload: which changes may be made while running (with the
reference's refusals), and the `--signal` command's answers. No server, no sockets."""

from __future__ import annotations

import dataclasses
import os
import signal
from pathlib import Path

import pytest

from ingest.server.gofmt import friendly_bytes
from ingest.server.options import load_config
from ingest.server.reload import ReloadRefused, SignalError, plan, send_signal
from ingest.server.reload.plan import RELOADS
from ingest.server.settings import Options


def options(tmp_path: Path, text: str) -> Options:
    path = tmp_path / "server.conf"
    path.write_text(text)
    return load_config(str(path))


BASE = """
port: 4222
authorization { users = [ {user: a, password: p, permissions: {publish: ["x"]}} ] }
cluster { name: C, listen: 127.0.0.1:6222, authorization { user: r, password: s } }
jetstream { store_dir: /tmp/js, max_memory_store: 1G }
"""


@pytest.mark.parametrize(
    ("change", "notices", "flag"),
    [
        (('publish: ["x"]', 'publish: ["y"]'), ["Reloaded: authorization users"], "auth"),
        (("port: 4222", "port: 4222\ndebug: true"), ["Reloaded: debug = true"], "logging"),
        (("port: 4222", "port: 4222\nmax_connections: 7"), ["Reloaded: max_connections = 7"], None),
        (
            ("port: 4222", 'port: 4222\nping_interval: "30s"'),
            ["Reloaded: ping_interval = 30s"],
            None,
        ),
        (("password: s", "password: t"), ["Reloaded: cluster"], "cluster"),
        (
            ("listen: 127.0.0.1:6222", 'listen: 127.0.0.1:6222, routes: ["nats://h:6223"]'),
            ["Reloaded: cluster routes"],
            "routes",
        ),
        (
            ("max_memory_store: 1G", "max_memory_store: 2G"),
            ["Reloaded: JetStream max_mem_store = 1.86 GB"],
            "jetstream_limits",
        ),
    ],
)
def test_reloadable_changes(
    tmp_path: Path, change: tuple[str, str], notices: list[str], flag: str | None
) -> None:
    old = options(tmp_path, BASE)
    new = options(tmp_path, BASE.replace(*change))
    found = plan(old, new)
    assert list(found.notices) == notices
    if flag is not None:
        assert getattr(found, flag)


def test_nothing_changed_is_an_empty_plan(tmp_path: Path) -> None:
    assert not plan(options(tmp_path, BASE), options(tmp_path, BASE)).changed


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("port: 4222", "port: 4223"), "config reload not supported for Port: old=4222, new=4223"),
        (
            ("port: 4222", "port: 4222\nserver_name: n"),
            "config reload not supported for ServerName: old=, new=n",
        ),
        (
            ("127.0.0.1:6222", "127.0.0.1:6223"),
            "config reload not supported for cluster port: old=6222, new=6223",
        ),
        (
            ("/tmp/js", "/tmp/other"),
            "config reload not supported for jetstream storage directory",
        ),
        (
            ("max_memory_store: 1G", "max_memory_store: 512M"),
            "config reload not supported for decreasing jetstream max memory and store",
        ),
        (("name: C", "name: D"), "config reload not supported for cluster name: old=C, new=D"),
    ],
)
def test_changes_a_running_server_refuses(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    old = options(tmp_path, BASE)
    new = options(tmp_path, BASE.replace(*change))
    with pytest.raises(ReloadRefused) as refused:
        plan(old, new)
    assert str(refused.value) == message


def test_the_first_refused_field_is_the_references_first(tmp_path: Path) -> None:
    """Both changed: the reference's struct names ServerName before Port."""
    old = options(tmp_path, BASE)
    new = options(tmp_path, BASE.replace("port: 4222", "port: 4223\nserver_name: n"))
    with pytest.raises(ReloadRefused, match="ServerName"):
        plan(old, new)


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("reload=abc", "invalid pid: abc"),
        ("reload=1=2", "invalid signal parameters: [2]"),
        ("bogus=1", 'unknown signal "bogus"'),
        ("reload=999999999", 'signal "reload" 999999999: no such process'),
    ],
)
def test_signal_command_errors(spec: str, error: str) -> None:
    with pytest.raises(SignalError) as failed:
        send_signal(spec)
    assert str(failed.value).strip() == error


def test_signal_command_reads_a_pid_file(tmp_path: Path) -> None:
    """`reload=<file>` signals the pid the file holds (here this test's own, trapped)."""
    got: list[int] = []
    previous = signal.signal(signal.SIGHUP, lambda signum, frame: got.append(signum))
    try:
        pid_file = tmp_path / "jetlake.pid"
        pid_file.write_text(str(os.getpid()))
        send_signal(f"reload={pid_file}")
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert got == [signal.SIGHUP]


# One change of each top-level key the configuration reference marks as reloading.
_RELOADING_EXAMPLES = {
    "accounts": "accounts { A { users = [ {user: b, password: q} ] } }",
    "authorization": "authorization { users = [ {user: a, password: other} ] }",
    "debug": "debug: true",
    "logfile": "logfile: /tmp/jetlake.log",
    "logtime": "logtime: false",
    "logtime_utc": "logtime_utc: true",
    "mappings": 'mappings { "a.>": "b.>" }',
    "max_connections": "max_connections: 5",
    "max_control_line": "max_control_line: 2048",
    "max_payload": "max_payload: 2048",
    "no_auth_user": "authorization { users = [ {user: a, password: p} ] }",
    "pid_file": "pid_file: /tmp/jetlake.pid",
    "ping_interval": 'ping_interval: "1m"',
    "ping_max": "ping_max: 5",
    "server_tags": 'server_tags: ["zone:a"]',
    "tls": 'tls { cert_file: "c.pem", key_file: "k.pem" }',
    "trace": "trace: true",
    "write_deadline": 'write_deadline: "5s"',
}


@pytest.mark.parametrize("key", sorted(RELOADS["top-level"]))
def test_every_key_the_reference_page_marks_as_reloading_reloads(tmp_path: Path, key: str) -> None:
    """The page's `reloads` column is read from the plan's tables: each such key's change
    is planned, not refused (`no_auth_user` may go when its user goes too)."""
    base = "authorization { users = [ {user: a, password: p}, {user: n, password: q} ] }\n"
    old = options(tmp_path, base + ("no_auth_user: n\n" if key == "no_auth_user" else ""))
    if key == "resolver_preload":  # operator mode: a JWT the plan does not read
        new = dataclasses.replace(old, resolver_preload=(("AX", "eyJ.."),))
    else:
        changed = _RELOADING_EXAMPLES[key]
        in_place = key in ("authorization", "no_auth_user")
        new = options(tmp_path, changed if in_place else base + changed)
    assert plan(old, new).changed


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.00 KB"), (1536, "1.50 KB"), (2 * 10**9, "1.86 GB")],
)
def test_sizes_in_notices_read_as_the_references(size: int, text: str) -> None:
    assert friendly_bytes(size) == text
