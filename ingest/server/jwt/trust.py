"""Operator mode: which account JWTs the server believes, and whether a user's JWT, its
account and its signature over the nonce let a client in.

The chain is operator → account → user. An account JWT counts when the configured
operator (or one of its signing keys) issued it; a user JWT when its account (or one
of the account's signing keys) did, it is not revoked, neither has expired, and the
client signed this connection's nonce with the user's key (unless the JWT is a bearer
token). A user issued by a scoped signing key gets the scope's permissions, its
templates filled in from the user and account.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ingest.server.accounts.settings import AccountLimits, JetStreamLimits
from ingest.server.jwt import claims as jwt
from ingest.server.jwt import nkey
from ingest.server.jwt.claims import Claims, JWTError
from ingest.server.jwt.times import window_end

AccountLookup = Callable[[str], Claims | None]
_SCOPE_FIELDS = ("pub", "sub", "resp", "src", "times", "times_location", "locale")
_SCOPE_LIMITS = ("subs", "data", "payload", "bearer_token", "allowed_connection_types")
_TEMPLATE = re.compile(r"\{\{\s*([a-z-]+)\(\s*([^)]*?)\s*\)\s*\}\}")


@dataclass(frozen=True, slots=True)
class JWTUser:
    """What an authenticated JWT user may do, for `auth.authenticator.Grant`."""

    user: str  # the user's public key
    name: str
    account: str  # the account's public key
    issued_at: int
    pub_allow: tuple[str, ...] = ()
    pub_deny: tuple[str, ...] = ()
    sub_allow: tuple[str, ...] = ()
    sub_deny: tuple[str, ...] = ()
    expires: int = 0  # the earlier of the user's and the account's expiry; 0: never
    account_expires_first: bool = False  # the client is then told the account expired
    max_subscriptions: int = -1  # the user JWT's `subs`; -1: only the account's limit
    max_payload: int = -1  # the user JWT's `payload`
    responses: tuple[int, float] | None = None  # the user JWT's `resp`: max, ttl in seconds


class Operators:
    """The trusted operators' keys, and the rule for which account JWTs they vouch for."""

    def __init__(self, operators: Iterable[Claims]) -> None:
        self.claims = tuple(operators)
        self._keys: set[str] = set()
        for op in self.claims:
            signing = {k for k in jwt.key_list(op.nats) if isinstance(k, str)}
            self._keys |= signing
            if op.nats.get("strict_signing_key_usage"):
                continue
            self._keys.add(op.subject)

    def deletion(self, token: object) -> list[str]:
        """The accounts a full resolver's delete request (a generic JWT an operator key
        signed, listing `accounts`) names; JWTError when no trusted operator signed it."""
        request = jwt.decode(token, "generic")
        if request.issuer not in self._keys | {op.subject for op in self.claims}:
            raise JWTError("delete request is not issued by a trusted operator")
        accounts = request.nats.get("accounts")
        if not isinstance(accounts, list) or not all(isinstance(a, str) for a in accounts):
            raise JWTError("delete request names no accounts")
        return accounts

    def account(self, token: object, now: float) -> Claims:
        """A verified account JWT this server trusts, or JWTError saying why not."""
        account = jwt.decode(token, "account")
        if account.issuer not in self._keys:
            raise JWTError(f"account JWT {account.subject} is not issued by a trusted operator")
        account.check_time(now)
        return account


def account_limits(account: Claims) -> AccountLimits:
    """The limits of an account JWT (`nsc edit account --conns --subscriptions --payload
    --leaf-conns`, and `--js-*`), in the shape an `accounts {}` block's `limits` takes.
    JetStream is on for the account when its memory or disk storage is not 0, or it has
    tiers (`--js-tier`)."""
    limits = account.nats.get("limits")
    limits = limits if isinstance(limits, dict) else {}

    def limit(name: str) -> int:
        value = limits.get(name, -1)
        return value if isinstance(value, int) and not isinstance(value, bool) else -1

    tiered = limits.get("tiered_limits")
    tiered = tiered if isinstance(tiered, dict) else {}
    tiers = tuple(
        (int(name[1:]), _jetstream(tier, limits.get("max_bytes_required")))
        for name, tier in sorted(tiered.items())
        if isinstance(tier, dict) and name[:1] == "R" and name[1:].isdigit()
    )
    jetstream = None
    if limits.get("mem_storage", 0) or limits.get("disk_storage", 0):
        jetstream = _jetstream(limits, None)
    elif tiers:  # the account-wide figures are 0, as the reference reports them
        jetstream = JetStreamLimits(
            max_memory=0, max_file=0, max_streams=0, max_consumers=0, max_ack_pending=0,
            memory_max_stream_bytes=0, disk_max_stream_bytes=0, tiers=tiers,
        )  # fmt: skip
    return AccountLimits(
        max_connections=limit("conn"),
        max_subscriptions=limit("subs"),
        max_payload=limit("payload"),
        max_leafnodes=limit("leaf"),
        jetstream=jetstream,
    )


def _jetstream(limits: dict[str, Any], required: object) -> JetStreamLimits:
    """JetStream limits of an account JWT, or of one of its tiers."""

    def limit(name: str) -> int:
        value = limits.get(name, -1)
        return value if isinstance(value, int) and not isinstance(value, bool) else -1

    return JetStreamLimits(
        max_memory=limit("mem_storage"),
        max_file=limit("disk_storage"),
        max_streams=limit("streams"),
        max_consumers=limit("consumer"),
        max_ack_pending=limit("max_ack_pending"),
        max_bytes_required=bool(limits.get("max_bytes_required", required)),
        memory_max_stream_bytes=limit("mem_max_stream_bytes"),
        disk_max_stream_bytes=limit("disk_max_stream_bytes"),
    )


def revoked(account: Claims, user: str, issued_at: int) -> bool:
    """A revocation covers every JWT of the user (or of all users, `*`) issued up to it."""
    revocations = account.nats.get("revocations")
    if not isinstance(revocations, dict):
        return False
    return any(
        isinstance(at, int) and at >= issued_at
        for at in (revocations.get("*"), revocations.get(user))
    )


def _signer(account: Claims, issuer: str) -> dict[str, Any] | bool | None:
    """False: `issuer` may not sign users; None: an unscoped key; else the scope."""
    if issuer == account.subject:
        return None
    for key in jwt.key_list(account.nats):
        if key == issuer:
            return None
        if isinstance(key, dict) and key.get("key") == issuer:
            return key if key.get("kind") == "user_scope" else None
    return False


def _rule(section: object) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not isinstance(section, dict):
        return (), ()
    allow, deny = section.get("allow") or [], section.get("deny") or []
    if not isinstance(allow, list) or not isinstance(deny, list):
        raise JWTError("JWT permissions are not lists of subjects")
    return tuple(str(s) for s in allow), tuple(str(s) for s in deny)


def _tags(claims: Claims) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for tag in jwt.key_list(claims.nats, "tags"):
        key, sep, value = str(tag).partition(":")
        if sep:
            found.setdefault(key.strip().lower(), []).append(value.strip())
    return found


def _fill(template: dict[str, Any], user: Claims, account: Claims) -> dict[str, Any]:
    """A scope's permissions with `{{name()}}`, `{{subject()}}`, `{{account-name()}}`,
    `{{account-subject()}}`, `{{tag(k)}}` and `{{account-tag(k)}}` replaced; a subject
    with a tag the user lacks is refused, as the reference does."""
    user_tags, account_tags = _tags(user), _tags(account)

    def expand(subject: str) -> list[str]:
        results = [subject]
        for match in _TEMPLATE.finditer(subject):
            fn, arg = match.group(1), match.group(2).strip("\"' ")
            fixed = {
                "name": [user.name],
                "subject": [user.subject],
                "account-name": [account.name],
                "account-subject": [account.subject],
            }
            values = fixed.get(fn) or (user_tags if fn == "tag" else account_tags).get(arg.lower())
            if not values:
                raise JWTError(f"template {match.group(0)} has no value for user {user.subject}")
            results = [r.replace(match.group(0), v, 1) for r in results for v in values]
        return results

    def section(name: str) -> dict[str, list[str]]:
        allow, deny = _rule(template.get(name))
        return {
            "allow": [s for a in allow for s in expand(a)],
            "deny": [s for d in deny for s in expand(d)],
        }

    return {**template, "pub": section("pub"), "sub": section("sub")}


def authenticate(
    connect: dict[str, Any],
    nonce: str,
    lookup: AccountLookup,
    now: float,
    connection_type: str,
    host: str = "",
) -> JWTUser:
    """The user a CONNECT's `jwt` and `sig` prove, or JWTError saying why not."""
    user = jwt.decode(connect.get("jwt"), "user")
    user.check_time(now)
    issuer_account = user.nats.get("issuer_account") or user.issuer
    if not nkey.is_public(issuer_account, nkey.ACCOUNT):
        raise JWTError(f"user JWT {user.subject} names no valid issuer account")
    account = lookup(issuer_account)
    if account is None:
        raise JWTError(f"account {issuer_account} of user {user.subject} is not known")
    account.check_time(now)
    scope = _signer(account, user.issuer)
    if scope is False:
        raise JWTError(f"user JWT {user.subject} issuer is not known")
    limits = user.nats
    if isinstance(scope, dict):
        if any(limits.get(f) for f in _SCOPE_FIELDS + _SCOPE_LIMITS):
            raise JWTError("scoped users require no permissions or limits set")
        template = scope.get("template")
        limits = _fill(template if isinstance(template, dict) else {}, user, account)
    if revoked(account, user.subject, user.issued_at):
        raise JWTError(f"user {user.subject} has been revoked")
    if not limits.get("bearer_token") and not nkey.verify_nonce(
        user.subject, nkey.USER, nonce, connect.get("sig")
    ):
        raise JWTError(f"signature of user {user.subject} does not verify the nonce")
    if not _from_allowed_network(limits.get("src"), host):
        raise JWTError(f"user {user.subject} may not connect from {host or 'here'}")
    allowed = limits.get("allowed_connection_types") or []
    if allowed and connection_type not in {str(t).upper() for t in allowed}:
        raise JWTError(f"user {user.subject} may not connect as {connection_type}")
    pub, sub = _rule(limits.get("pub")), _rule(limits.get("sub"))
    if not any(pub + sub):
        defaults = account.nats.get("default_permissions") or {}
        pub, sub = _rule(defaults.get("pub")), _rule(defaults.get("sub"))
    window = window_end(limits, now)
    if window is None:
        raise JWTError(f"user {user.subject} is outside its connect times")
    # The user's own end is the earlier of its expiry and its window's end.
    user_ends = min((t for t in (user.expires, int(window)) if t), default=0)
    ends = [t for t in (user_ends, account.expires) if t]
    account_first = bool(account.expires) and (not user_ends or account.expires < user_ends)
    return JWTUser(
        user=user.subject,
        name=user.name,
        account=account.subject,
        issued_at=user.issued_at,
        pub_allow=pub[0],
        pub_deny=pub[1],
        sub_allow=sub[0],
        sub_deny=sub[1],
        expires=min(ends) if ends else 0,
        account_expires_first=account_first,
        max_subscriptions=_limit(limits, "subs"),
        max_payload=_limit(limits, "payload"),
        responses=_responses(limits.get("resp")),
    )


def _responses(resp: object) -> tuple[int, float] | None:
    """`resp: {max, ttl}` (ttl in nanoseconds); 0 or missing take the defaults."""
    if not isinstance(resp, dict):
        return None
    most, ttl = resp.get("max", 0), resp.get("ttl", 0)
    return (
        most if isinstance(most, int) else 0,
        ttl / 1e9 if isinstance(ttl, int | float) else 0.0,
    )


def _from_allowed_network(src: object, host: str) -> bool:
    """A user JWT's `src` (CIDR blocks, a list or one comma-separated string) admits
    only clients from those networks; an unknown client address is not admitted."""
    if not src:
        return True
    blocks = src.split(",") if isinstance(src, str) else src
    if not isinstance(blocks, list):
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    for block in blocks:
        try:
            if address in ipaddress.ip_network(str(block).strip(), strict=False):
                return True
        except ValueError:
            continue
    return False


def _limit(limits: dict[str, Any], name: str) -> int:
    """A user limit; a missing one (or a scope template's 0) is no limit."""
    value = limits.get(name, -1)
    valid = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if valid else -1
