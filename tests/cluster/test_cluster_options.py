"""Cluster flags and the `cluster {}` section, read as the reference reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.server.cluster.settings import RouteURL
from ingest.server.options import ConfigError, parse_serve_args


def test_flags() -> None:
    opts = parse_serve_args(
        [
            "--cluster",
            "nats://127.0.0.1:-1",
            "--routes",
            "nats://127.0.0.1:5, nats://u:p%40ss@h:6",
            "--cluster_name",
            "C",
            "--no_advertise",
            "--connect_retries",
            "4",
        ]
    )
    cluster = opts.cluster
    assert cluster is not None
    assert (cluster.host, cluster.port, cluster.name) == ("127.0.0.1", 0, "C")
    assert cluster.routes == (
        RouteURL(host="127.0.0.1", port=5),
        RouteURL(host="h", port=6, user="u", password="p@ss"),
    )
    assert cluster.no_advertise and cluster.connect_retries == 4


def test_cluster_listen_is_an_alias_and_no_cluster_without_flags() -> None:
    opts = parse_serve_args(["--cluster_listen", "nats://0.0.0.0:7000"])
    assert opts.cluster is not None and opts.cluster.port == 7000
    assert parse_serve_args([]).cluster is None


def test_routes_need_a_cluster() -> None:
    with pytest.raises(ConfigError, match="solicited routes require cluster capabilities"):
        parse_serve_args(["--routes", "nats://127.0.0.1:5"])


@pytest.mark.parametrize("body", ["pool_size: -1", 'name: X, routes: ["nats://127.0.0.1:4248"]'])
def test_a_cluster_block_without_a_port_opens_no_cluster(tmp_path: Path, body: str) -> None:
    """As the reference: no route listener and no route dialled without a port."""
    conf = tmp_path / "c.conf"
    conf.write_text(f"cluster {{ {body} }}\n")
    assert parse_serve_args(["-c", str(conf)]).cluster is None


def test_config_section_and_flags_over_it(tmp_path: Path) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text(
        "cluster {\n  name: x\n  listen: 127.0.0.1:7001\n  routes: [nats://a:1, nats://b:2]\n"
        "  authorization { user: ru, password: rp, timeout: 3 }\n"
        "  no_advertise: true\n  connect_retries: 2\n  pool_size: 3\n}\n"
    )
    cluster = parse_serve_args(["-c", str(conf)]).cluster
    assert cluster is not None
    assert (cluster.name, cluster.host, cluster.port) == ("x", "127.0.0.1", 7001)
    assert [r.hostport for r in cluster.routes] == ["a:1", "b:2"]
    assert (cluster.username, cluster.password, cluster.auth_timeout) == ("ru", "rp", 3.0)
    assert cluster.no_advertise and cluster.connect_retries == 2 and cluster.pool_size == 3
    cluster = parse_serve_args(["-c", str(conf), "--cluster_name", "y"]).cluster
    assert cluster is not None and cluster.name == "y" and cluster.port == 7001


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("port: 7000\nbogus: 1", 'unknown field "bogus"'),
        ('port: 7000\nroutes: ["nats://127.0.0.1:-7"]', "error parsing route url"),
        ('port: 7000\nname: "a b"', "cluster name cannot contain spaces"),
        ("port: 7000\nauthorization { token: t }", "does not support tokens"),
        ("port: 7000\nauthorization { users: [] }", "does not allow multiple users"),
        ("port: 7000\ntls { bogus: x }", 'error parsing tls config, unknown field "bogus"'),
    ],
)
def test_config_errors(tmp_path: Path, body: str, error: str) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text("cluster {\n" + body + "\n}\n")
    with pytest.raises(ConfigError, match=error):
        parse_serve_args(["-c", str(conf)])
