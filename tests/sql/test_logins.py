"""The SQL service's login check (`sql.logins`), the Python half of Connect's and JDBC's
logins: a login is made against a real server, which says where it landed. Against the
reference too: the check asks only what any server answers (`$SYS.REQ.USER.INFO`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sql.logins import NatsLogin
from tests.support.nsc import Nsc
from tests.support.servers import start_server

CONFIG = """
system_account: SYS
accounts {
  SYS { users: [{user: sys, password: sys}] }
  A { users: [{user: a, password: secret}] }
  T { users: [{user: t, password: tt}] }
}
"""


@pytest.mark.parametrize("kind", ["ref", "jl"])
def test_config_users_land_in_their_account_and_a_bad_password_is_refused(
    kind: str, tmp_path: Path
) -> None:
    server = start_server(
        "nats-server" if kind == "ref" else "jetlake", config=CONFIG, tmp_path=tmp_path
    )
    try:
        check = NatsLogin(f"nats://someone:else@127.0.0.1:{server.port}")
        assert check.url == f"nats://127.0.0.1:{server.port}"  # the login brings its own
        assert check.login("a", "secret", None, None, None) == "A"
        assert check.login("sys", "sys", None, None, None) == "*SYS"  # the system: all
        refused = check.login("a", "wrong", None, None, None)
        assert refused.startswith("!the NATS server nats://127.0.0.1:")
        assert "Authorization Violation" in refused, refused
        assert check.login(None, None, None, None, None).startswith("!")  # no login at all
    finally:
        server.stop()


@pytest.mark.parametrize("kind", ["ref", pytest.param("jl", marks=pytest.mark.soak)])
def test_an_operator_mode_user_logs_in_with_its_jwt_and_seed(kind: str, tmp_path: Path) -> None:
    nsc = Nsc(tmp_path / "nsc")
    nsc.operator()
    nsc.run("add", "account", "A")
    nsc.run("add", "user", "-a", "A", "u")
    config = nsc.memory_config()
    server = start_server(
        "nats-server" if kind == "ref" else "jetlake", config=config, tmp_path=tmp_path
    )
    try:
        check = NatsLogin(f"127.0.0.1:{server.port}")
        user_jwt = nsc.user_jwt("A", "u")
        seed = nsc.seed(nsc.public("user", "-a", "A", "-n", "u")).decode()
        assert check.login(None, None, None, user_jwt, seed) == nsc.public("account", "-n", "A")
        other = nsc.seed(nsc.public("account", "-n", "A")).decode()  # not the user's key
        assert check.login(None, None, None, user_jwt, other).startswith("!")
    finally:
        server.stop()
