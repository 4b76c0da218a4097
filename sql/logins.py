"""NATS logins for the SQL service's Spark Connect and JDBC doors, checked by logging in.

With `--logins nats://host:port` (what `jetlake serve` passes when it has accounts or
users), a Connect client's bearer token (`sc://localhost:15002/;token=user:password`)
and a JDBC client's user and password are NATS credentials: a user and password, a
token, or a user JWT and its nkey seed. The service checks one by connecting to the NATS
server with it and asking `$SYS.REQ.USER.INFO` where it landed, rather than reading the
server's configuration itself: the server's own rules decide (config users, nkeys,
operator-mode JWTs and revocations, an auth callout), a reload applies at once, and
nothing about accounts is written twice. The JVM side (`sql/views_ext/NatsLogins.java`)
remembers an accepted login for a minute, so a query's many calls cost one check, then
binds the client's session to that account for the plan check (`AccountWalls`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from log.compactor.layout import GLOBAL

if TYPE_CHECKING:
    from nats.aio.client import Client

log = logging.getLogger("jetlake.sql")

# The service's own login for its NATS door, as the server hands it over (argv shows in `ps`).
OWN_LOGIN_ENV = ("JETLAKE_SQL_NATS_USER", "JETLAKE_SQL_NATS_PASSWORD", "JETLAKE_SQL_NATS_TOKEN")
_LOGIN_TIMEOUT = 5.0
SYSTEM_MARK = "*"  # the answer's prefix for the system account (every account's streams)
REFUSED_MARK = "!"


async def whoami(nc: Client) -> tuple[str, bool]:
    """The connection's account, and whether it is the system account (whose services
    `$SYS.REQ.SERVER.PING` reaches only there)."""
    import nats.errors

    try:
        answer = await nc.request("$SYS.REQ.USER.INFO", b"", timeout=_LOGIN_TIMEOUT)
        account = str(json.loads(answer.data)["data"]["account"])
    except (nats.errors.Error, ValueError, KeyError, TypeError) as exc:
        log.warning("sql service: no account from $SYS.REQ.USER.INFO (%s); taking %s", exc, GLOBAL)
        account = GLOBAL
    try:
        await nc.request("$SYS.REQ.SERVER.PING", b"", timeout=1)
        return account, True
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
        return account, False


def bare_url(url: str) -> str:
    """`url` without a user or password in it: a login brings its own."""
    parts = urlsplit(url if "://" in url else f"nats://{url}")
    host = parts.hostname or "127.0.0.1"
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def creds_text(jwt: str, seed: str) -> str:
    """A user JWT and its seed as a `.creds` file holds them (what nats-py reads)."""
    return (
        f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
    )


class NatsLogin:
    """The JVM's `NatsLogins.Checker`: one login to the NATS server per call (py4j's thread)."""

    def __init__(self, url: str) -> None:
        self.url = bare_url(url)

    def login(
        self,
        user: str | None,
        password: str | None,
        token: str | None,
        jwt: str | None,
        seed: str | None,
    ) -> str:
        """ "ACCOUNT", "*ACCOUNT" (the system account) or "!why" (refused)."""
        try:
            account, system = asyncio.run(self._login(user, password, token, jwt, seed))
        except Exception as exc:  # refused, unreachable: the client is told why
            why = str(exc) or type(exc).__name__
            log.info("sql service: a login refused by %s: %s", self.url, why)
            return f"{REFUSED_MARK}the NATS server {self.url} refused the login: {why}"
        return f"{SYSTEM_MARK}{account}" if system else account

    async def _login(
        self,
        user: str | None,
        password: str | None,
        token: str | None,
        jwt: str | None,
        seed: str | None,
    ) -> tuple[str, bool]:
        import nats
        from nats.aio.client import RawCredentials

        refused: list[Exception] = []

        async def error(exc: Exception) -> None:
            refused.append(exc)

        creds = RawCredentials(creds_text(jwt, seed)) if jwt and seed else None
        try:
            nc = await asyncio.wait_for(
                nats.connect(
                    self.url,
                    name="jetlake sql login",
                    user=user or None,
                    password=password or None,
                    token=token or None,
                    user_credentials=creds,
                    allow_reconnect=False,
                    max_reconnect_attempts=0,
                    connect_timeout=_LOGIN_TIMEOUT,
                    error_cb=error,
                ),
                _LOGIN_TIMEOUT * 2,
            )
        except Exception as exc:
            raise (refused[0] if refused else exc) from None
        try:
            return await whoami(nc)
        finally:
            await nc.close()

    class Java:
        implements = ["io.jetlake.sql.NatsLogins$Checker"]
