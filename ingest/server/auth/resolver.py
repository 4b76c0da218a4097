"""The account resolver: where operator mode finds the account JWT of a connecting user,
and how an operator changes accounts while the server runs.

`MEMORY` holds the `resolver_preload` JWTs. `full` also keeps every account JWT as
`<dir>/<account>.jwt`, takes new ones pushed to `$SYS.REQ.CLAIMS.UPDATE` (what `nsc
push` sends) or `$SYS.REQ.ACCOUNT.<id>.CLAIMS.UPDATE`, answers `…CLAIMS.LOOKUP` and
`$SYS.REQ.CLAIMS.LIST`, and with `allow_delete` removes accounts on
`$SYS.REQ.CLAIMS.DELETE`. These subscriptions are announced to the cluster, so every
server of it takes an update pushed to any one; a server that missed one (it was down,
or joined later) asks the cluster for its accounts a second after its routes change and
every `interval`, and looks up each. `$SYS.REQ.CLAIMS.PACK` (the reference's exchange,
answered by one server of the cluster) gets every JWT held. An update applies at once:
the users it revokes are cut off with the reference's error.

`full`, `cache` and `URL` fetch an account they do not hold when a user of it logs in
(`account_fetch`). A `cache` keeps what it fetched, or was pushed for an account it
holds, in `dir`, at most `limit` files for at most `ttl` each; it answers no lookups.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingest.parser.conf import ConfigError
from ingest.server.auth.account_fetch import Fetcher, account_of, client_tls
from ingest.server.jwt import claims as jwt
from ingest.server.jwt import nkey
from ingest.server.jwt.claims import Claims, JWTError
from ingest.server.jwt.exports import invalid_imports
from ingest.server.jwt.settings import CACHE, FULL
from ingest.server.jwt.sharing import JWTImports
from ingest.server.jwt.store import AccountStore
from ingest.server.jwt.trust import Operators, account_limits, revoked

if TYPE_CHECKING:
    from ingest.server.accounts.jetstream import AccountJetStreams
    from ingest.server.accounts.registry import Account, Accounts
    from ingest.server.server import Server
    from ingest.server.system import SystemServices

log = logging.getLogger("jetlake")

UPDATE = "$SYS.REQ.CLAIMS.UPDATE"
ACCOUNT_UPDATE = "$SYS.REQ.ACCOUNT.*.CLAIMS.UPDATE"
OLD_UPDATE = "$SYS.ACCOUNT.*.CLAIMS.UPDATE"  # what an account server publishes
LOOKUP = "$SYS.REQ.ACCOUNT.*.CLAIMS.LOOKUP"
LIST = "$SYS.REQ.CLAIMS.LIST"
DELETE = "$SYS.REQ.CLAIMS.DELETE"
PACK = "$SYS.REQ.CLAIMS.PACK"
REVOKED = ("User Authentication Revoked", "Authentication Revoked")
_SETTLE = 1.0  # seconds after a route change before asking the cluster for its JWTs


class Resolver:
    def __init__(self, opts: Any) -> None:
        self.config = opts.resolver
        self.store = AccountStore(Operators(jwt.decode(t, "operator") for t in opts.operators))
        now = time.time()
        self.dir = Path(self.config.dir) if self.config.stores and self.config.dir else None
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            for path in sorted(self.dir.glob("*.jwt")):
                self._load(path.read_text().strip(), now, str(path))
        for account, token in opts.resolver_preload:
            # The directory's later JWTs take precedence over the preloaded ones.
            if self.store.get(account) is None:
                self._load(token, now, f"resolver_preload {account}")
                if self.dir is not None:
                    _write(self.dir / f"{account}.jwt", token)
        self._server: Server | None = None
        self._system: SystemServices | None = None
        self._inbox = ""  # where answers of the other servers come back, in a cluster
        self.jetstreams: AccountJetStreams | None = None  # set when the server runs JetStream
        self._pending: asyncio.TimerHandle | None = None
        self._periodic: asyncio.TimerHandle | None = None
        self.fetcher: Fetcher | None = None
        self.imports: JWTImports | None = None  # the accounts' imports, once running
        if self.config.fetches:
            timeout = self.config.timeout
            tls = client_tls(opts.resolver_tls) if self.config.url else None
            self.fetcher = Fetcher(self._take, url=self.config.url, timeout=timeout, tls=tls)
        # How the update answers of a cache read, as the reference words them.
        self._cache_word = " cache" if self.config.type == CACHE else ""

    def _load(self, token: str, now: float, where: str) -> None:
        if self._trusted(token, now, where):
            claims = self.store.put(token, now)
            issues = invalid_imports(claims)
            if issues:  # taken all the same at start, as the reference does
                log.warning("Account [%s] has validation issues:", claims.subject)
                for issue in issues:
                    log.warning("  - %s", issue)

    def _trusted(self, token: str, now: float, where: str) -> bool:
        """ConfigError for a JWT the operators do not sign; an expired one is only
        warned about (and not taken), as on the reference."""
        try:
            self.store.operators.account(token, now)
        except JWTError as exc:
            if "expired" not in str(exc):
                raise ConfigError(f"{where}: invalid account JWT: {exc}") from exc
            log.warning("%s: %s", where, exc)
            return False
        return True

    def check_preloads(self, preloads: tuple[tuple[str, str], ...]) -> None:
        """A config reload's `resolver_preload` judged as at start, before anything of it
        is taken: ConfigError naming the account whose JWT is not trusted."""
        now = time.time()
        for account, token in preloads:
            self._trusted(token, now, f"resolver_preload {account}")

    def reload_preloads(
        self, before: tuple[tuple[str, str], ...], preloads: tuple[tuple[str, str], ...]
    ) -> list[str]:
        """A config reload's new or changed preloads are taken as a pushed update is: the
        account's users log in with them, its limits apply, the users it revokes are cut
        off. One older than the JWT held (pushed since) is ignored. The MEMORY resolver
        forgets the accounts no longer preloaded, as the reference's does; they are
        returned so that their users are judged again."""
        now = time.time()
        removed: list[str] = []
        if self.dir is None:
            kept = {account for account, _ in preloads}
            for account in dict.fromkeys(a for a, _ in before if a not in kept):
                if self.store.remove(account):
                    log.info('Reloaded: deleting account [removed]: "%s"', account)
                    removed.append(account)
                    if self.imports is not None:
                        self.imports.changed(account)
        for account, token in preloads:
            held = self.store.get(account)
            if held is not None and held.token == token:
                continue
            try:
                claims = self.store.put(token, now)
            except JWTError as exc:
                log.warning("resolver_preload %s: %s", account, exc)
                continue
            if self.dir is not None:
                _write(self.dir / f"{account}.jwt", token)
            self.apply(claims)
        return removed

    def register(self, accounts: Accounts, *, jetstream: bool) -> None:
        """Make the accounts held known before the server builds JetStream: those whose
        JWT allows it get an engine at start (one pushed later, when it is pushed)."""
        for claims in self.store:
            account = accounts.ensure(claims.subject)
            account.limits = account_limits(claims)
            account.jetstream_enabled = jetstream and account.limits.jetstream is not None

    def start(self, server: Server, system: SystemServices) -> None:
        self._server, self._system = server, system
        server.accounts.every(self._limit)
        full = self.config.type == FULL
        fetch = None
        if self.fetcher is not None:
            self.fetcher.start(server, answers_own=full)
            fetch = self.fetcher.fetch
            system = server.accounts.system_account.name
            # As the reference, the operator's system account is fetched at start.
            if nkey.is_public(system, nkey.ACCOUNT) and self.store.get(system) is None:
                self.fetcher.fetch(system, quiet=True)
        sys_account = server.accounts.system_account
        # Every resolver takes an account's update; MEMORY and URL only for the accounts
        # they hold, as the reference's.
        handlers = [(ACCOUNT_UPDATE, self._update), (OLD_UPDATE, self._update)]
        if self.dir is not None:
            handlers += [(UPDATE, self._update), (LIST, self._list), (DELETE, self._delete)]
        handlers += [(LOOKUP, self._lookup)] if full else []
        for subject, handler in handlers:
            # Cluster-wide, as the reference's: a JWT pushed to one server reaches them all.
            server.announce(server.subscribe(subject, handler, account=sys_account))
        if full:
            # One server of the cluster answers a pack request, as among the reference's.
            pack = server.subscribe(PACK, self._pack, queue="responder", account=sys_account)
            server.announce(pack)
        self.imports = JWTImports(server, self.store, fetch)
        self.imports.all()
        if server.cluster is not None and full:
            self._inbox = f"_INBOX.{server.server_id}.claims."
            inbox = server.subscribe(self._inbox + "*", self._synced, account=sys_account)
            server.announce(inbox)
            server.cluster_listeners.append(self._soon)
            self._every()

    def stop(self) -> None:
        """No more asking the cluster: a shut server's routes are gone."""
        for timer in (self._pending, self._periodic):
            if timer is not None:
                timer.cancel()
        self._pending = self._periodic = None

    # ---- fetching an account at a login ---------------------------------------------------

    def fetching(self, connect: dict[str, object]) -> asyncio.Future[None] | None:
        """The fetch a CONNECT must wait for: its user's account is not held, or its JWT
        has expired (the source may have a newer one), and this resolver can fetch it."""
        if self.fetcher is None or self._server is None:
            return None
        account = account_of(connect)
        held = self.store.get(account) if account is not None else None
        if account is None or (held is not None and not held.expired(time.time())):
            return None
        return self.fetcher.fetch(account)

    def _take(self, token: str, account: str) -> None:
        """Keep a fetched JWT as if it had been pushed (JWTError when not trusted)."""
        self._make_room(account)
        claims = self.store.put(token, time.time(), expected=account)
        self._save(claims.subject, token)
        self.apply(claims)

    def _make_room(self, account: str) -> None:
        """A full resolver's directory holds at most `limit` accounts: one more is
        refused (JWTError), as the reference's store refuses it; a held one may change."""
        limit, directory = self.config.limit, self.dir
        if self.config.type != FULL or not limit or directory is None:
            return
        held = (directory / f"{account}.jwt").exists()
        if not held and sum(1 for _ in directory.glob("*.jwt")) >= limit:
            raise JWTError("jwt store is full")

    def _save(self, account: str, token: str) -> None:
        if self.dir is None:
            return
        _write(self.dir / f"{account}.jwt", token)
        if self.config.type == CACHE:
            self._trim()

    def _trim(self) -> None:
        """A cache's directory keeps the newest `limit` JWTs, none older than `ttl`. The
        accounts stay in use while the server runs, as on the reference; only what a
        restart starts with is bounded."""
        assert self.dir is not None
        files = sorted(self.dir.glob("*.jwt"), key=lambda p: p.stat().st_mtime, reverse=True)
        ttl, now = self.config.ttl, time.time()
        for index, path in enumerate(files):
            if index >= self.config.limit or (ttl and now - path.stat().st_mtime > ttl):
                path.unlink(missing_ok=True)

    # ---- catching up with the other servers of a cluster ---------------------------------

    def _soon(self) -> None:
        """A peer came or went: ask once the routes have told each other their interest."""
        if self._pending is not None:
            self._pending.cancel()
        self._pending = asyncio.get_running_loop().call_later(_SETTLE, self._sync)

    def _every(self) -> None:
        self._sync()
        self._periodic = asyncio.get_running_loop().call_later(self.config.interval, self._every)

    def _sync(self) -> None:
        """Ask the cluster which accounts it holds; each answer is looked up (`_synced`),
        so a server that was down during a push, or joined later, gets the JWTs. A pack
        request goes out too, which a reference server answers with its JWTs."""
        self._pending = None
        server = self._server
        if server is not None and self._inbox:
            system = server.accounts.system_account
            server.publish(LIST, self._inbox + "list", None, b"", account=system)
            server.publish(PACK, self._inbox + "pack", None, self.digest(), account=system)

    def _synced(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        server = self._server
        if server is None:
            return
        system = server.accounts.system_account
        if subject.endswith(".list"):
            try:
                accounts = json.loads(data).get("data") or []
            except (ValueError, AttributeError):
                return
            for account in accounts:
                if isinstance(account, str):
                    lookup = f"$SYS.REQ.ACCOUNT.{account}.CLAIMS.LOOKUP"
                    server.publish(lookup, self._inbox + "jwt", None, b"", account=system)
            return
        if subject.endswith(".pack"):  # `<account>|<jwt>` lines; empty ends the answer
            for line in data.decode("utf-8", "replace").splitlines():
                self._catch_up(line.partition("|")[2].strip())
            return
        self._catch_up(data.decode("utf-8", "replace").strip())

    def _catch_up(self, token: str) -> None:
        held = self.store.get(jwt.peek_subject(token)) if token else None
        if not token or (held is not None and held.token == token):
            return
        try:
            self._make_room(jwt.peek_subject(token))
            claims = self.store.put(token, time.time())
        except JWTError as exc:
            log.debug("resolver catch-up: %s", exc)
            return
        self._save(claims.subject, token)
        self.apply(claims)

    # ---- requests ----------------------------------------------------------------------

    def _update(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        tokens = subject.split(".")
        expected = {6: tokens[3], 5: tokens[2]}.get(len(tokens))
        token = data.decode("utf-8", "replace").strip()
        word = self._cache_word
        decoded = expected
        if not token and not self.config.stores:
            log.error("jwt update error - %s - request body is empty", expected)
            error = {"account": expected, "code": 500}
            error["description"] = "jwt update error - request body is empty"
            self._answer(reply, {"error": error})
            return
        try:
            if token.count(".") != 2:
                raise JWTError("expected 3 chunks")
            claims = jwt.decode(token, "account")
            decoded = expected or claims.subject
            if expected is not None and claims.subject != expected:
                raise JWTError("subject does not match jwt content")
            if self.config.type != FULL and self.store.get(claims.subject) is None:
                # Only a full resolver takes the accounts it does not hold.
                data_out = {"account": claims.subject, "code": 200}
                message = f"jwt update{word} skipped"
                self._answer(reply, {"data": {**data_out, "message": message}})
                return
            issues = invalid_imports(claims)
            if issues:
                self._refuse(reply, claims.subject, f"validation errors: [{' '.join(issues)}]")
                return
            self._make_room(claims.subject)
            claims = self.store.put(token, time.time())
        except JWTError as exc:
            account = decoded or "n/a"
            log.error("jwt update%s resulted in error - %s - %s", word, account, exc)
            error = {"account": account, "code": 500}
            error["description"] = f"jwt update{word} resulted in error - {exc}"
            self._answer(reply, {"error": error})
            return
        self._save(claims.subject, token)
        self.apply(claims)
        data_out = {"account": claims.subject, "code": 200, "message": f"jwt updated{word}"}
        self._answer(reply, {"data": data_out})

    def _refuse(self, reply: str | None, account: str, why: str) -> None:
        log.error("jwt validation failed - %s - %s", account, why)
        error = {"account": account, "code": 500, "description": f"jwt validation failed - {why}"}
        self._answer(reply, {"error": error})

    def _lookup(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        claims = self.store.get(subject.split(".")[3])
        if reply and self._server is not None:
            body = claims.token.encode() if claims is not None else b""
            system = self._server.accounts.system_account
            self._server.publish(reply, None, None, body, account=system)

    def digest(self) -> bytes:
        """The reference's digest of the JWTs held: the XOR of their SHA-256 sums, which
        a pack request carries so that a server holding the same answers nothing."""
        value = 0
        for claims in self.store:
            value ^= int.from_bytes(hashlib.sha256(claims.token.encode()).digest(), "big")
        return value.to_bytes(32, "big")

    def _pack(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        """Every JWT held, one `<account>|<jwt>` per message, then an empty message; only
        the empty one when the asker's digest is ours."""
        server = self._server
        if not reply or server is None:
            return
        system = server.accounts.system_account
        if data != self.digest():
            for claims in sorted(self.store, key=lambda c: c.subject):
                body = f"{claims.subject}|{claims.token}".encode()
                server.publish(reply, None, None, body, account=system)
        server.publish(reply, None, None, b"", account=system)

    def _list(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        """The accounts of `dir`, as the reference lists them (a cache's, once trimmed,
        are fewer than those in use)."""
        assert self.dir is not None
        self._answer(reply, {"data": sorted(p.name[:-4] for p in self.dir.glob("*.jwt"))})

    def _delete(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        """`nsc push --prune`: the accounts are forgotten, their files renamed to
        `.jwt.deleted` (an operator may restore one), their clients disconnected."""
        try:
            if not self.config.allow_delete and self.config.type != CACHE:
                raise JWTError("delete not enabled")
            accounts = self.store.operators.deletion(data.decode("utf-8", "replace").strip())
        except JWTError as exc:
            log.error("delete accounts request by  failed - %s", exc)
            self._answer(reply, {"error": {"code": 500, "description": str(exc)}})
            return
        assert self.dir is not None and self._server is not None
        for account in accounts:
            self.store.remove(account)
            path = self.dir / f"{account}.jwt"
            if self.config.type == CACHE or self.config.hard_delete:
                path.unlink(missing_ok=True)  # a cache deletes outright, as the reference's
            elif path.exists():
                os.replace(path, path.with_name(path.name + ".deleted"))
            for client in list(self._server.clients.values()):
                if client.authenticated and client.grant.account == account:
                    client.cut_off("", "Account Deleted")
            if self._server.mqtt is not None:
                for conn in self._server.mqtt.logged_in(account):
                    conn.cut_off("Account Deleted", "Account Deleted")
            if self.imports is not None:
                self.imports.changed(account)
        message = f"deleted {len(accounts)} accounts"
        self._answer(reply, {"data": {"code": 200, "message": message}})

    def _answer(self, reply: str | None, body: dict[str, Any]) -> None:
        server, system = self._server, self._system
        if not reply or server is None or system is None:
            return
        doc = {"server": system.envelope(), **body}
        data = json.dumps(doc, separators=(",", ":")).encode()
        server.publish(reply, None, None, data, account=server.accounts.system_account)

    # ---- applying an account's new JWT to its connections ------------------------------

    def _limit(self, account: Account) -> None:
        claims = self.store.get(account.name)
        if claims is not None:
            account.limits = account_limits(claims)
            if account.jetstream is not None and account.limits.jetstream is not None:
                account.jetstream.limits = account.limits.jetstream

    def apply(self, claims: Claims) -> None:
        """Take the new JWT's limits and imports; cut off the account's users that it
        revokes."""
        server = self._server
        if server is None:
            return
        account = server.accounts.ensure(claims.subject)
        self._limit(account)
        if self.imports is not None:
            self.imports.changed(claims.subject)
        if account.limits.jetstream is not None and self.jetstreams is not None:
            self.jetstreams.enable(account)
        for client in list(server.clients.values()):
            grant = client.grant
            mine = client.authenticated and grant.account == claims.subject
            if mine and revoked(claims, grant.user, grant.issued_at):
                client.cut_off(*REVOKED)
        if server.mqtt is not None:
            for conn in server.mqtt.logged_in(claims.subject):
                if revoked(claims, conn.grant.user, conn.grant.issued_at):
                    conn.cut_off(REVOKED[0])


def _write(path: Path, token: str) -> None:
    """Replace the file whole, so a crash mid-write never leaves half a JWT behind."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(token)
    os.replace(tmp, path)
