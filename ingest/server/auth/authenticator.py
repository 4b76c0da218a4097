"""Who may connect, and what each connection may publish and subscribe to.

Decisions are made once per CONNECT; the resulting `Grant` caches publish
verdicts per subject so the hot path pays one dict lookup.
"""

from __future__ import annotations

import hmac
import time
from dataclasses import dataclass, field
from typing import Protocol

from ingest.parser.subjects import subject_matches, subjects_overlap
from ingest.server.accounts.settings import GLOBAL_ACCOUNT
from ingest.server.jwt import nkey, trust
from ingest.server.jwt.claims import JWTError
from ingest.server.jwt.store import AccountStore
from ingest.server.responses import Responses

AUTH_VIOLATION = "Authorization Violation"
STANDARD = "STANDARD"  # connection types a user's `allowed_connection_types` names
MQTT = "MQTT"


class AuthError(Exception):
    """Credentials were missing or wrong; the client gets -ERR 'Authorization Violation'.

    `who` names the credentials tried, for the log line, as the reference writes it;
    `detail` says what was wrong with a JWT, which the reference logs only in debug."""

    def __init__(self, message: str, who: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.who = who
        self.detail = detail


class _SubjectPermission(Protocol):
    allow: tuple[str, ...]
    deny: tuple[str, ...]


class _Permissions(Protocol):
    publish: _SubjectPermission | None
    subscribe: _SubjectPermission | None


class _User(Protocol):
    user: str
    password: str | None
    nkey: str | None
    permissions: _Permissions | None
    allowed_connection_types: frozenset[str]


class _AccountConfig(Protocol):
    name: str
    users: tuple[_User, ...]


class _AuthOptions(Protocol):
    auth_token: str | None
    username: str | None
    password: str | None
    users: tuple[_User, ...]
    no_auth_user: str | None
    accounts: tuple[_AccountConfig, ...]


_CACHE_LIMIT = 1024


@dataclass(slots=True)
class Grant:
    """Permissions of one authenticated connection."""

    user: str = ""
    account: str = GLOBAL_ACCOUNT
    pub_allow: tuple[str, ...] = ()
    pub_deny: tuple[str, ...] = ()
    sub_allow: tuple[str, ...] = ()
    sub_deny: tuple[str, ...] = ()
    expires: int = 0  # a JWT user's expiry, Unix seconds; 0: never
    issued_at: int = 0  # a JWT user's `iat`, which revocations compare with
    expiry_error: str = "User Authentication Expired"  # or the account's, if it ends first
    max_subscriptions: int = -1  # a JWT user's own limits; -1: the account's only
    max_payload: int = -1
    responses: Responses | None = None  # a JWT user's `resp`
    _pub_cache: dict[bytes, bool] = field(default_factory=dict)

    @property
    def restricted(self) -> bool:
        rules = self.pub_allow or self.pub_deny or self.sub_allow or self.sub_deny
        return bool(rules) or self.responses is not None

    def can_publish(self, subject: bytes) -> bool:
        verdict = self._pub_cache.get(subject)
        if verdict is None:
            text = subject.decode("utf-8", "surrogateescape")
            # Response permissions without an allow list allow nothing else.
            verdict = (self.responses is None or bool(self.pub_allow)) and _allowed(
                text, self.pub_allow, self.pub_deny
            )
            if len(self._pub_cache) >= _CACHE_LIMIT:
                self._pub_cache.clear()
            self._pub_cache[subject] = verdict
        if not verdict and self.responses is not None:
            return self.responses.allows(subject)
        return verdict

    def can_subscribe(self, subject: str) -> bool:
        """The reference matches the subscription's subject against allow and deny as if its
        wildcards were plain tokens: `>` falls under an allowed `*`, `a.*` under `a.>`."""
        if self.sub_allow and not any(subject_matches(a, subject) for a in self.sub_allow):
            return False
        return not any(subject_matches(d, subject) for d in self.sub_deny)

    def filters_delivery(self, subject: str) -> bool:
        """True when a subscription may see messages a deny rule must hold back, or
        whose reply subjects response permissions must note."""
        if self.responses is not None:
            return True
        return any(subjects_overlap(subject, d) for d in self.sub_deny)

    def can_receive(self, subject: str) -> bool:
        return _allowed(subject, (), self.sub_deny)


def _allowed(subject: str, allow: tuple[str, ...], deny: tuple[str, ...]) -> bool:
    if allow and not any(subject_matches(a, subject) for a in allow):
        return False
    return not any(subject_matches(d, subject) for d in deny)


def _same(given: object, expected: str) -> bool:
    return isinstance(given, str) and hmac.compare_digest(given.encode(), expected.encode())


def _admits(user: _User, connection_type: str) -> bool:
    """A user restricted to some kinds of connection is refused on the others."""
    allowed = user.allowed_connection_types
    return not allowed or connection_type in allowed


def _grant_for(user: _User, account: str) -> Grant:
    perms = user.permissions
    if perms is None:
        return Grant(user=user.user, account=account)
    pub, sub = perms.publish, perms.subscribe
    return Grant(
        user=user.user,
        account=account,
        pub_allow=pub.allow if pub else (),
        pub_deny=pub.deny if pub else (),
        sub_allow=sub.allow if sub else (),
        sub_deny=sub.deny if sub else (),
        responses=Responses(*perms.responses) if perms.responses is not None else None,
    )


class Authenticator:
    """Checks CONNECT credentials against token, single user, the users list, nkeys, or
    (operator mode) the user JWT and the account JWT the store holds for it."""

    def __init__(self, opts: _AuthOptions, store: AccountStore | None = None) -> None:
        self._token = opts.auth_token
        # Each user name is bound to one account (the config refuses duplicates); nkey
        # users are found by key only, so they never log in by name.
        self._users: dict[str, tuple[_User, str]] = {}
        self._nkeys: dict[str, tuple[_User, str]] = {}
        bound = [(u, GLOBAL_ACCOUNT) for u in opts.users]
        bound += [(u, account.name) for account in opts.accounts for u in account.users]
        for user, account in bound:
            (self._nkeys if user.nkey else self._users)[user.user] = (user, account)
        self._single = (opts.username, opts.password) if opts.username else None
        self._no_auth_user = opts.no_auth_user
        self.store = store

    @property
    def required(self) -> bool:
        return bool(self._token or self._users or self._nkeys or self._single or self.store)

    @property
    def nonce_required(self) -> bool:
        """The INFO carries a nonce for clients to sign when nkeys or JWTs may log in."""
        return bool(self._nkeys or self.store)

    def listed_account(self, connect: dict[str, object]) -> str | None:
        """The account of the listed user or nkey a CONNECT names; None when no list has
        it (a config reload closes such a connection, as the reference does)."""
        key, name = connect.get("nkey"), connect.get("user")
        found = None
        if isinstance(key, str) and key:
            found = self._nkeys.get(key)
        elif isinstance(name, str):
            found = self._users.get(name)
        return found[1] if found is not None else None

    def authenticate(
        self,
        connect: dict[str, object],
        connection_type: str = STANDARD,
        nonce: str = "",
        host: str = "",
    ) -> Grant:
        """The grant for a CONNECT's credentials arriving over `connection_type` from
        `host`, after an INFO that carried `nonce`."""
        if not self.required:
            return Grant()
        if self.store is not None and connect.get("jwt"):
            return self._jwt(connect, connection_type, nonce, host)
        key = connect.get("nkey")
        if key:
            found = self._nkeys.get(key) if isinstance(key, str) else None
            if found is None or not _admits(found[0], connection_type):
                raise AuthError(AUTH_VIOLATION, f"Nkey {_quote(key)}")
            if not nkey.verify_nonce(key, nkey.USER, nonce, connect.get("sig")):
                raise AuthError(AUTH_VIOLATION, f"Nkey {_quote(key)}")
            return _grant_for(*found)
        name = connect.get("user")
        who = f"User {_quote(name)}" if name else ""
        if self._token is not None:
            if _same(connect.get("auth_token"), self._token):
                return Grant()
            raise AuthError(AUTH_VIOLATION, who)
        if not name and self._no_auth_user and not connect.get("pass"):
            bound = self._users.get(self._no_auth_user) or self._nkeys.get(self._no_auth_user)
            if bound is not None and _admits(bound[0], connection_type):
                return _grant_for(*bound)
        if self._single is not None:
            user_name, password = self._single
            if _same(name, user_name) and _same(connect.get("pass"), password or ""):
                return Grant(user=user_name)
        if isinstance(name, str) and name in self._users:
            user, account = self._users[name]
            if _same(connect.get("pass"), user.password or "") and _admits(user, connection_type):
                return _grant_for(user, account)
        raise AuthError(AUTH_VIOLATION, who)

    def _jwt(
        self, connect: dict[str, object], connection_type: str, nonce: str, host: str
    ) -> Grant:
        assert self.store is not None
        now = time.time()
        try:
            found = trust.authenticate(connect, nonce, self.store.get, now, connection_type, host)
        except JWTError as exc:
            raise AuthError(AUTH_VIOLATION, detail=str(exc)) from exc
        return Grant(
            user=found.user,
            account=found.account,
            pub_allow=found.pub_allow,
            pub_deny=found.pub_deny,
            sub_allow=found.sub_allow,
            sub_deny=found.sub_deny,
            expires=found.expires,
            issued_at=found.issued_at,
            max_subscriptions=found.max_subscriptions,
            max_payload=found.max_payload,
            responses=Responses(*found.responses) if found.responses is not None else None,
            expiry_error=(
                "Account Authentication Expired"
                if found.account_expires_first
                else "User Authentication Expired"
            ),
        )


def _quote(value: object) -> str:
    """Go's %q of a string, which the reference's log lines use."""
    text = str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
