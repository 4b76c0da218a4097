"""NATS JWTs: decoded, their signature checked against their issuer, their times read.

A token is `header.claims.signature`, each base64url without padding; the signature is
the issuer's ed25519 signature of `header.claims`. Which key may issue which kind of
claim (an operator's key an account, an account's key a user) is checked here; whether
that issuer is trusted is `trust`'s question.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from ingest.server.jwt import nkey

_ALGORITHMS = ("ed25519-nkey", "ed25519")  # v2, and v1 tokens old operators still hold
# "generic": an operator's signed request, such as the full resolver's delete request.
_ISSUERS = {
    "operator": nkey.OPERATOR,
    "account": nkey.OPERATOR,
    "user": nkey.ACCOUNT,
    "generic": nkey.OPERATOR,
    "activation": nkey.ACCOUNT,  # an exporting account's grant of a private export
}
_SUBJECTS = {
    "operator": nkey.OPERATOR,
    "account": nkey.ACCOUNT,
    "user": nkey.USER,
    "activation": nkey.ACCOUNT,
}


class JWTError(ValueError):
    """A token that is malformed, wrongly signed, of the wrong kind, or out of its time."""


@dataclass(frozen=True, slots=True)
class Claims:
    """One verified token: who issued it, about whom, valid when, and its `nats` section."""

    token: str
    kind: str
    issuer: str
    subject: str
    name: str
    issued_at: int
    expires: int  # 0: never
    not_before: int
    nats: dict[str, Any]

    def expired(self, now: float) -> bool:
        return bool(self.expires) and now >= self.expires

    def payload(self) -> dict[str, Any]:
        """Every claim of the token, as an account's INFO shows it (`decoded_jwt`)."""
        return _json(self.token.split(".")[1])

    def check_time(self, now: float) -> None:
        if self.expired(now):
            raise JWTError(f"{self.kind} JWT {self.subject} has expired")
        if self.not_before and now < self.not_before:
            raise JWTError(f"{self.kind} JWT {self.subject} is not yet valid")


def _b64(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError) as exc:
        raise JWTError("JWT is not base64url") from exc


def _json(part: str) -> dict[str, Any]:
    try:
        value = json.loads(_b64(part))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise JWTError("JWT part is not JSON") from exc
    if not isinstance(value, dict):
        raise JWTError("JWT part is not a JSON object")
    return value


def _int(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool):
        raise JWTError(f"JWT field {key!r} is not a number")
    return value


def decode(token: object, kind: str) -> Claims:
    """The claims of `token`, which must be a `kind` JWT signed by a key that may issue it."""
    if not isinstance(token, str) or token.count(".") != 2:
        raise JWTError("expected a JWT of three parts")
    token = token.strip()
    header_part, body_part, sig_part = token.split(".")
    header = _json(header_part)
    if header.get("typ", "JWT").upper() != "JWT" or header.get("alg") not in _ALGORITHMS:
        raise JWTError(f"unsupported JWT header {header}")
    body = _json(body_part)
    nats = body.get("nats")
    if not isinstance(nats, dict):
        nats = {}
    found = nats.get("type", body.get("type"))
    if found != kind and not (kind == "generic" and found is None):
        raise JWTError(f"expected a {kind} JWT, got {found!r}")
    issuer, subject = body.get("iss"), body.get("sub")
    if kind in _SUBJECTS and not nkey.is_public(subject, _SUBJECTS[kind]):
        raise JWTError(f"{kind} JWT subject {subject!r} is no {kind} public key")
    if not nkey.is_public(issuer, _ISSUERS[kind]):
        raise JWTError(f"{kind} JWT issuer {issuer!r} may not issue it")
    assert isinstance(issuer, str)
    subject = subject if isinstance(subject, str) else ""
    # v2 signs header and claims; v1 (`ed25519`, still in old operators' files) the claims.
    v1 = header.get("alg") == "ed25519"
    signed = (body_part if v1 else f"{header_part}.{body_part}").encode()
    if not nkey.verify(issuer, _ISSUERS[kind], signed, _b64(sig_part)):
        raise JWTError(f"{kind} JWT {subject} has an invalid signature")
    name = body.get("name", "")
    return Claims(
        token=token,
        kind=kind,
        issuer=issuer,
        subject=subject,
        name=name if isinstance(name, str) else "",
        issued_at=_int(body, "iat"),
        expires=_int(body, "exp"),
        not_before=_int(body, "nbf"),
        nats=nats,
    )


def peek_subject(token: str) -> str:
    """The `sub` of a token, unverified: only to find the JWT it would replace."""
    try:
        subject = _json(token.split(".")[1]).get("sub")
    except (IndexError, JWTError):
        return ""
    return subject if isinstance(subject, str) else ""


def key_list(nats: dict[str, Any], field: str = "signing_keys") -> list[Any]:
    value = nats.get(field)
    return value if isinstance(value, list) else []
