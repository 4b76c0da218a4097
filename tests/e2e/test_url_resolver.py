"""The URL resolver, differentially: the server fetches `<url><account>` from an HTTP
account server (here a tiny one serving what nsc issued) when a user of an account it
has not seen logs in, keeps what it got, and refuses a login the server cannot answer
with the reference's error and warning."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import Connect, MakeServer
from tests.e2e.test_operator_mode import AUTH_VIOLATION, _login, _seed_of, _sign
from tests.support.nsc import Nsc, encode_jwt
from tests.support.raw import Outcome, RawClient
from tests.support.servers import server_command
from tests.support.tls import Pki

PREFIX = "/jwt/v1/accounts/"


class AccountServer:
    """Serves the JWTs it is given under PREFIX, 404 for the others; counts the GETs."""

    def __init__(self, jwts: dict[str, str], tls: ssl.SSLContext | None = None) -> None:
        self.jwts = jwts
        self.gets: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                account = self.path.removeprefix(PREFIX)
                owner.gets.append(account)
                token = owner.jwts.get(account, "" if self.path == PREFIX else None)
                if token is None:
                    self.send_error(404)
                    return
                body = token.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}{PREFIX}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def nsc(tmp_path: Path) -> Nsc:
    nsc = Nsc(tmp_path / "nsc")
    nsc.operator()
    for account, user in (("B", "alice"), ("N", "nobody"), ("E", "erin")):
        nsc.run("add", "account", account)
        nsc.run("add", "user", "-a", account, user)
    nsc.run("add", "user", "-a", "B", "mallory")
    return nsc


@pytest.fixture
def accounts(nsc: Nsc) -> Iterator[AccountServer]:
    served = {nsc.public("account", name): nsc.account_jwt(name) for name in ("SYS", "B")}
    server = AccountServer(served)
    yield server
    server.close()


def _reissued(nsc: Nsc, account: str, **changes: object) -> str:
    """The account's JWT issued again now by the same operator key, with `changes`."""
    payload = nsc.account_jwt(account).split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    jti = base64.b32encode(os.urandom(10)).decode()
    claims.update(changes, jti=jti, iat=int(time.time()))
    return encode_jwt(claims, nsc.seed(claims["iss"]))


def _user(nsc: Nsc, account: str, user: str) -> tuple[str, bytes]:
    return nsc.user_jwt(account, user), _seed_of(nsc.creds(account, user))


async def test_logins_fetch_accounts_over_http(
    make_server: MakeServer, nsc: Nsc, accounts: AccountServer, connect: Connect
) -> None:
    system = nsc.public("account", "SYS")
    config = (
        f"operator: {nsc.operator_jwt()}\nsystem_account: {system}\n"
        f'resolver: URL("{accounts.url}")\n'
    )
    server = make_server(config=config)
    b_key, n_key = nsc.public("account", "B"), nsc.public("account", "N")
    alice = _user(nsc, "B", "alice")
    # What the client sends after CONNECT waits for the fetch, and keeps its order.
    async with await RawClient.connect(server.host, server.port) as c:
        fields = {"verbose": False, "jwt": alice[0], "sig": _sign(alice[1], c.info["nonce"])}
        connect_line = b"CONNECT " + json.dumps(fields).encode() + b"\r\n"
        script = connect_line + b"SUB x 1\r\nPUB x 2\r\nhi\r\n"
        assert await c.outcome(script) == Outcome((b"MSG x 1 2",), closed=False)
    # The next login uses the JWT fetched for the first.
    assert await _login(server, *alice) == Outcome((b"+OK",), closed=False)
    assert accounts.gets.count(b_key) == 1

    assert await _login(server, *_user(nsc, "N", "nobody")) == Outcome(
        (AUTH_VIOLATION,), closed=True
    )
    url = f"{accounts.url}{n_key}"
    warning = rf'\[WRN\] Account fetch failed: could not fetch <"{url}">: 404 Not Found'
    await server.wait_for_log_async(warning, 2)

    # An account whose JWT expired is fetched again at the next login.
    e_key, erin = nsc.public("account", "E"), _user(nsc, "E", "erin")
    expires = int(time.time()) + 2
    accounts.jwts[e_key] = _reissued(nsc, "E", exp=expires)
    assert await _login(server, *erin) == Outcome((b"+OK",), closed=False)
    accounts.jwts[e_key] = _reissued(nsc, "E")
    # The reference marks the account expired whole seconds after it fetched it.
    await asyncio.sleep(max(0.0, expires - time.time()) + 1.1)
    assert await _login(server, *erin) == Outcome((b"+OK",), closed=False)
    assert accounts.gets.count(e_key) == 2

    # A JWT of another account than the one asked for is not taken.
    accounts.jwts[n_key] = nsc.account_jwt("B")
    assert await _login(server, *_user(nsc, "N", "nobody")) == Outcome(
        (AUTH_VIOLATION,), closed=True
    )
    del accounts.jwts[n_key]

    # The account server gone: a new account cannot be fetched; B still logs in.
    accounts.close()
    assert await _login(server, *_user(nsc, "N", "nobody")) == Outcome(
        (AUTH_VIOLATION,), closed=True
    )
    refused = rf'could not fetch <"{url}">: Get "{url}": dial tcp 127\.0\.0\.1:\d+: connect: '
    await server.wait_for_log_async(rf"\[WRN\] Account fetch failed: {refused}", 2)
    assert await _login(server, *alice) == Outcome((b"+OK",), closed=False)

    # What an account server publishes when an account changes: the account held takes
    # it (a revoked user is cut off), one not held is skipped.
    sys_nc = await connect(server, user_credentials=str(nsc.creds("SYS", "sys")))
    token, seed = _user(nsc, "B", "mallory")
    async with await RawClient.connect(server.host, server.port) as victim:
        fields = {"verbose": False, "jwt": token, "sig": _sign(seed, victim.info["nonce"])}
        connected = await victim.outcome(b"CONNECT " + json.dumps(fields).encode() + b"\r\n")
        assert connected == Outcome((), closed=False)
        nsc.run("revocations", "add-user", "-a", "B", "-n", "mallory")
        subject = f"$SYS.ACCOUNT.{b_key}.CLAIMS.UPDATE"
        reply = await sys_nc.request(subject, nsc.account_jwt("B").encode(), timeout=2)
        assert json.loads(reply.data)["data"] == {
            "account": b_key,
            "code": 200,
            "message": "jwt updated",
        }
        lines = await victim.read_until(rb"^-ERR", timeout=1.0)
        assert lines[-1] == b"-ERR 'User Authentication Revoked'"
    subject = f"$SYS.ACCOUNT.{n_key}.CLAIMS.UPDATE"
    reply = await sys_nc.request(subject, nsc.account_jwt("N").encode(), timeout=2)
    assert json.loads(reply.data)["data"]["message"] == "jwt update skipped"


def test_no_start_without_the_account_server(
    server_kind: str, nsc: Nsc, accounts: AccountServer, tmp_path: Path
) -> None:
    """As the reference, the server asks the base URL at start and refuses to run when
    nothing answers it."""
    accounts.close()
    config = tmp_path / "url.conf"
    config.write_text(f'operator: {nsc.operator_jwt()}\nresolver: URL("{accounts.url}")\n')
    done = subprocess.run(
        [*server_command(server_kind), "-c", str(config), "-p", "-1"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1
    url = accounts.url
    assert f'could not fetch <"{url}">: Get "{url}": dial tcp 127.0.0.1:' in done.stderr


async def test_an_https_account_server_is_checked_against_resolver_tls(
    make_server: MakeServer, nsc: Nsc, pki: Pki, tmp_path: Path
) -> None:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(pki.server_cert, pki.server_key)
    served = {nsc.public("account", name): nsc.account_jwt(name) for name in ("SYS", "B")}
    accounts = AccountServer(served, tls)
    try:
        base = f'operator: {nsc.operator_jwt()}\nresolver: URL("{accounts.url}")\n'
        server = make_server(config=base + f'resolver_tls {{ ca_file: "{pki.ca_cert}" }}\n')
        alice = _user(nsc, "B", "alice")
        assert await _login(server, *alice) == Outcome((b"+OK",), closed=False)
        # Without the CA the account server is not trusted: no start.
        config = tmp_path / "untrusted.conf"
        config.write_text(base)
        done = subprocess.run(
            [*server_command(server.kind), "-c", str(config), "-p", "-1"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 1
        assert f'could not fetch <"{accounts.url}">' in done.stderr
    finally:
        accounts.close()
