"""Account JWTs' imports applied to a running server, through the same `Sharing` that
serves config-file imports.

An account's imports are judged again whenever a JWT of it, or of an account it imports
from, arrives (pushed, fetched, preloaded) or goes away, and when an activation token it
uses expires: an import added at run time starts serving, one removed (or whose export
was removed or made private) stops. An exporter not held is fetched, when the resolver
fetches; its arrival completes the imports that named it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ingest.server.jwt.claims import Claims
from ingest.server.jwt.exports import imported_from, shares
from ingest.server.jwt.store import AccountStore

if TYPE_CHECKING:
    from ingest.server.accounts.sharing import Sharing
    from ingest.server.server import Server

log = logging.getLogger("jetlake")


class JWTImports:
    def __init__(
        self, server: Server, store: AccountStore, fetch: Callable[[str], object] | None
    ) -> None:
        self._server = server
        self._store = store
        self._fetch = fetch
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def all(self) -> None:
        """Apply every held account's imports (at start, and after a config reload built
        the config-file imports anew)."""
        for claims in list(self._store):
            self._share(claims)

    def changed(self, account: str) -> None:
        """`account`'s JWT arrived or went: its imports and those from it are judged again."""
        held = self._store.get(account)
        if held is not None:
            self._share(held)
        else:
            self._clear(account)
        for claims in list(self._store):
            if claims.subject != account and account in imported_from(claims):
                self._share(claims)

    def _sharing(self) -> Sharing:
        server = self._server
        if server.sharing is None:
            from ingest.server.accounts.sharing import Sharing

            server.sharing = Sharing(server, ())
        sharing: Sharing = server.sharing
        return sharing

    def _clear(self, account: str) -> None:
        timer = self._timers.pop(account, None)
        if timer is not None:
            timer.cancel()
        live = self._server.accounts.get(account)
        if live is not None and self._server.sharing is not None:
            self._server.sharing.set_imports(live, [])

    def _share(self, importer: Claims) -> None:
        self._clear(importer.subject)
        found, missing, ends, refused = shares(importer, self._store.get, time.time())
        if not found and not missing and not refused:
            return
        accounts = self._server.accounts
        entries = [(accounts.ensure(s.exporter), s.imp, s.export) for s in found]
        self._sharing().set_imports(accounts.ensure(importer.subject), entries)
        for why in refused:
            log.warning("Account %s: %s", importer.subject, why)
        if self._fetch is not None:
            for account in sorted(missing):
                self._fetch(account)
        if ends:
            delay = max(0.0, ends - time.time())
            self._timers[importer.subject] = asyncio.get_running_loop().call_later(
                delay, self.changed, importer.subject
            )
