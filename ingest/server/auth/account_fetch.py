"""Fetching the JWT of an account this server does not hold, when a user of it logs in.

The full and cache resolvers ask the other servers of the cluster
(`$SYS.REQ.ACCOUNT.<id>.CLAIMS.LOOKUP`); the URL resolver asks an account server over
HTTP (`<url><id>`). As on the reference, the login waits for the fetch, bounded by the
resolver's `timeout` (an HTTP fetch by 1.9 s), and is refused with `Authorization
Violation` when nothing usable came; the warnings say why. Logins of one account
share a single fetch.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING

from ingest.server.gofmt import go_duration
from ingest.server.jwt import claims as jwt
from ingest.server.jwt import nkey
from ingest.server.jwt.claims import JWTError
from ingest.server.tls import make_client_context

if TYPE_CHECKING:
    from ingest.server.server import Server
    from ingest.server.settings import TLSConfig

log = logging.getLogger("jetlake")

HTTP_TIMEOUT = 1.9  # the reference's DEFAULT_ACCOUNT_FETCH_TIMEOUT, fixed for URL resolvers
_SLOW = 1.0  # a fetch slower than this is a warning, as on the reference
# Straight to the account server: the reference's HTTP client takes no proxy either.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class FetchError(Exception):
    """Why no JWT came, in the reference's words."""


def account_of(connect: dict[str, object]) -> str | None:
    """The account a CONNECT's user JWT belongs to; None when it carries no readable one
    (authentication then refuses it as usual)."""
    try:
        user = jwt.decode(connect.get("jwt"), "user")
    except JWTError:
        return None
    account = user.nats.get("issuer_account") or user.issuer
    return account if nkey.is_public(account, nkey.ACCOUNT) else None


class _Lookup:
    """One lookup sent to the cluster: the first JWT answered wins; an empty answer (the
    answerer holds none) counts only once every server expected has answered empty."""

    def __init__(self, expected: int) -> None:
        self.remaining = expected
        self.done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def answer(self, data: bytes) -> None:
        if self.done.done():
            return
        self.remaining -= 1
        if data or self.remaining <= 0:
            self.done.set_result(data)


class Fetcher:
    """Runs the fetches of one resolver. `take` verifies and keeps a fetched JWT (raising
    JWTError when it is not trusted)."""

    def __init__(
        self,
        take: Callable[[str, str], None],
        *,
        url: str | None,
        timeout: float,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self._take = take
        self.url = url
        self.tls = tls
        self.timeout = HTTP_TIMEOUT if url else timeout
        self._flights: dict[str, asyncio.Future[None]] = {}
        self._lookups: dict[str, _Lookup] = {}
        self._numbers = itertools.count(1)
        self._server: Server | None = None
        self._inbox = ""
        self._answers_own = False  # this server's own lookup handler answers too

    def start(self, server: Server, *, answers_own: bool) -> None:
        """Listen for the cluster's answers (a URL resolver needs no cluster)."""
        self._server, self._answers_own = server, answers_own
        if self.url is None:
            self._inbox = f"_INBOX.{server.server_id}.fetch."
            system = server.accounts.system_account
            server.announce(server.subscribe(self._inbox + "*", self._answered, account=system))

    def fetch(self, account: str, *, quiet: bool = False) -> asyncio.Future[None]:
        """The fetch of `account`, started now or joined; it never raises (a failure is
        logged, and the login that waited on it is then refused as for an unknown
        account). A `quiet` one (the system account's at start) logs only in debug."""
        flight = self._flights.get(account)
        if flight is None:
            flight = asyncio.ensure_future(self._run(account, log.debug if quiet else log.warning))
            self._flights[account] = flight
            flight.add_done_callback(lambda _: self._flights.pop(account, None))
        return flight

    async def _run(self, account: str, warn: Callable[..., None]) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            token = await (self._http(account) if self.url else self._ask_cluster(account))
            failure: FetchError | None = None
        except FetchError as exc:
            failure = exc
        elapsed = loop.time() - started
        took = go_duration(round(elapsed * 1e9))
        if elapsed >= _SLOW:  # >=: asyncio may wake a timer a little early
            warn("Account [%s] fetch took %s", account, took)
        else:
            log.debug("Account [%s] fetch took %s", account, took)
        if failure is not None:
            warn("Account fetch failed: %s", failure)
            return
        try:
            self._take(token, account)
        except JWTError as exc:  # the reference says no more than the login's refusal
            log.debug("Account JWT lookup error: account validation failed (%s)", exc)
        except OSError as exc:
            log.error("Account [%s] fetched but not stored: %s", account, exc)

    # ---- from the other servers of the cluster -------------------------------------------

    async def _ask_cluster(self, account: str) -> str:
        server = self._server
        if server is None:
            raise FetchError("eventing shut down")
        cluster = server.cluster
        peers = len(cluster.routes) if cluster is not None else 0
        lookup = _Lookup(peers + (1 if self._answers_own else 0))
        token = str(next(self._numbers))
        self._lookups[token] = lookup
        subject = f"$SYS.REQ.ACCOUNT.{account}.CLAIMS.LOOKUP"
        try:
            system = server.accounts.system_account
            server.publish(subject, self._inbox + token, None, b"", account=system)
            data = await asyncio.wait_for(lookup.done, self.timeout)
        except TimeoutError:
            raise FetchError("fetching jwt timed out") from None
        finally:
            del self._lookups[token]
        if not data:
            raise FetchError("account jwt not found")
        return data.decode("utf-8", "replace").strip()

    def _answered(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        lookup = self._lookups.get(subject.rpartition(".")[2])
        if lookup is not None:
            lookup.answer(data)

    # ---- from an account server over HTTP ------------------------------------------------

    async def _http(self, account: str) -> str:
        assert self.url is not None
        return await asyncio.to_thread(get, self.url + account, self.timeout, self.tls)


def client_tls(config: TLSConfig | None) -> ssl.SSLContext | None:
    """`resolver_tls`: the certificate shown to an `https` account server, and the CA it
    is checked against (else the system's). FetchError naming the key when its files do
    not load."""
    if config is None:
        return None
    try:
        return make_client_context(config)
    except (OSError, ValueError, ssl.SSLError) as exc:
        raise FetchError(f"resolver_tls: {exc}") from None


def get(url: str, timeout: float = HTTP_TIMEOUT, tls: ssl.SSLContext | None = None) -> str:
    """The body an account server answers for `url`; FetchError in the reference's words
    when it answers anything but 200 or cannot be reached. At start the base URL is
    asked this way: nobody home, no start."""
    shown = f'"{redact(url)}"'
    try:
        opener = _OPENER
        if tls is not None:
            opener = urllib.request.build_opener(
                urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=tls)
            )
        with opener.open(url, timeout=timeout) as answer:
            body: bytes = answer.read()
    except urllib.error.HTTPError as exc:
        raise FetchError(f"could not fetch <{shown}>: {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        why = _why(exc, url)
        raise FetchError(f"could not fetch <{shown}>: Get {shown}: {why}") from None
    return body.decode("utf-8", "replace").strip()


def _why(exc: Exception, url: str) -> str:
    """Go's words for the common transport failures."""
    cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(cause, TimeoutError):
        return "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    if isinstance(cause, ConnectionRefusedError):
        parts = urllib.parse.urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return f"dial tcp {parts.hostname}:{port}: connect: connection refused"
    return str(cause)


def redact(url: str) -> str:
    """The URL with its password hidden, as the reference logs it."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username}:xxxxx@{host}"))
