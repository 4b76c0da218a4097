"""An account JWT's exports and imports, read into the shapes config-file accounts use,
and the activation tokens of private exports checked.

`nsc add export --private` marks an export `token_req`: an importer needs an activation
token (`nsc generate activation`) the exporting account, or one of its signing keys,
signed for it. A pushed JWT whose tokens are malformed, name another importer, exporter,
kind or subject is refused whole, in the reference's words (`invalid_imports`). A
well-formed token that does not verify (a key the exporter never made a signing key, an
expired or revoked token) leaves only its import out (`shares`), as on the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ingest.parser.subjects import is_subset
from ingest.server.accounts.settings import (
    DEFAULT_RESPONSE_THRESHOLD,
    HEADERS_SAMPLING,
    SINGLETON,
    Export,
    Import,
    Latency,
)
from ingest.server.jwt import claims as jwt
from ingest.server.jwt.claims import Claims, JWTError

_NANOS = 1e9
_RESPONSE_TYPES = {"singleton": SINGLETON, "stream": "Stream", "chunked": "Chunked"}


@dataclass(frozen=True, slots=True)
class Share:
    """One import that may be served: the exporting account's key and both ends."""

    exporter: str
    imp: Import
    export: Export


@dataclass(frozen=True, slots=True)
class _JWTExport:
    export: Export
    token_req: bool
    revocations: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _JWTImport:
    imp: Import
    kind: str  # "service" or "stream", the JWT's words
    remote: str  # the exported subject the import names (what a token must cover)
    token: str


def _list(nats: dict[str, Any], field: str) -> list[dict[str, Any]]:
    return [item for item in jwt.key_list(nats, field) if isinstance(item, dict)]


def _exports(account: Claims) -> list[_JWTExport]:
    found = []
    for doc in _list(account.nats, "exports"):
        subject, kind = doc.get("subject"), doc.get("type")
        if not isinstance(subject, str) or kind not in ("service", "stream"):
            continue
        values: dict[str, Any] = {"service": kind == "service", "subject": subject}
        response = _RESPONSE_TYPES.get(str(doc.get("response_type", "")).lower())
        if response is not None:
            values["response_type"] = response
        threshold = doc.get("response_threshold")
        values["response_threshold"] = (
            threshold / _NANOS
            if isinstance(threshold, int) and threshold > 0
            else DEFAULT_RESPONSE_THRESHOLD
        )
        latency = doc.get("service_latency")
        if isinstance(latency, dict) and isinstance(latency.get("results"), str):
            sampling = latency.get("sampling", 100)  # nsc writes "headers" for 0
            values["latency"] = Latency(
                sampling=sampling if isinstance(sampling, int) else HEADERS_SAMPLING,
                subject=latency["results"],
            )
        position = doc.get("account_token_position")
        if isinstance(position, int) and position > 0:
            values["account_token_position"] = position
        revocations = doc.get("revocations")
        found.append(
            _JWTExport(
                Export(**values),
                bool(doc.get("token_req")),
                revocations if isinstance(revocations, dict) else {},
            )
        )
    return found


def _imports(account: Claims) -> list[_JWTImport]:
    """The imports as config-file `Import`s: a service's `local_subject` is the subject
    requested in the importer (`to` in a config), a stream's maps the exported subjects
    (`to`); a stream's old `to` is its prefix, a service's its exported subject."""
    found = []
    for doc in _list(account.nats, "imports"):
        subject, exporter, kind = doc.get("subject"), doc.get("account"), doc.get("type")
        if not isinstance(subject, str) or not isinstance(exporter, str):
            continue
        if kind not in ("service", "stream"):
            continue
        local = doc.get("local_subject") if isinstance(doc.get("local_subject"), str) else ""
        old_to = doc.get("to") if isinstance(doc.get("to"), str) else ""
        remote = subject
        if kind == "service":
            if not local and old_to:
                remote, local = old_to, subject
            imp = Import(service=True, account=exporter, subject=remote, to=local)
        elif local:
            imp = Import(service=False, account=exporter, subject=subject, to=local)
        else:
            imp = Import(service=False, account=exporter, subject=subject, prefix=old_to)
        token = doc.get("token") if isinstance(doc.get("token"), str) else ""
        found.append(_JWTImport(imp, kind, remote, token))
    return found


def invalid_imports(account: Claims) -> list[str]:
    """What the reference's validation says of the JWT's activation tokens, one line per
    fault; a JWT with any is refused."""
    issues = []
    for item in _imports(account):
        if not item.token:
            continue
        shown = f'"{item.imp.subject if item.kind == "stream" else item.remote}"'
        try:
            token = jwt.decode(item.token, "activation")
        except JWTError:
            issues.append(f"import {shown} contains an invalid activation token")
            continue
        if item.imp.account not in (token.issuer, token.nats.get("issuer_account")):
            issues.append(f"activation token doesn't match account for import {shown}")
        if token.subject != account.subject:
            issues.append(
                f"activation token doesn't match account it is being included in, {shown}"
            )
        kind = token.nats.get("kind")
        if kind != item.kind:
            issues.append(
                f"mismatch between token import type {kind} and type of import {item.kind}"
            )
        granted = token.nats.get("subject")
        if not isinstance(granted, str) or not is_subset(item.remote, granted):
            issues.append(
                f'activation token import subject "{granted}" doesn\'t match import {shown}'
            )
    return issues


def _activation(item: _JWTImport, export: _JWTExport, exporter: Claims, importer: str) -> Claims:
    """The verified token of a private export's import; JWTError saying why not."""
    token = jwt.decode(item.token, "activation")
    if token.issuer != exporter.subject:
        signing = {k if isinstance(k, str) else k.get("key") for k in jwt.key_list(exporter.nats)}
        if token.nats.get("issuer_account") != exporter.subject or token.issuer not in signing:
            raise JWTError("activation token is not issued by the exporting account")
    if token.subject != importer:
        raise JWTError("activation token is for another account")
    granted = token.nats.get("subject")
    if token.nats.get("kind") != item.kind or not (
        isinstance(granted, str) and is_subset(item.remote, granted)
    ):
        raise JWTError("activation token grants another import")
    for who in (importer, "*"):
        at = export.revocations.get(who)
        if isinstance(at, int) and token.issued_at <= at:
            raise JWTError("activation token is revoked")
    return token


def shares(
    importer: Claims, lookup: Callable[[str], Claims | None], now: float
) -> tuple[list[Share], set[str], int, list[str]]:
    """The imports of `importer` its exporters allow now; the exporters not held (to be
    fetched); the earliest expiry of the tokens used (0: none), when the imports must be
    judged again; and why each refused import was left out."""
    found: list[Share] = []
    missing: set[str] = set()
    refused: list[str] = []
    ends = []
    for item in _imports(importer):
        exporter = lookup(item.imp.account)
        if exporter is None:
            missing.add(item.imp.account)
            continue
        if exporter.subject == importer.subject or exporter.expired(now):
            continue
        export = next(
            (
                e
                for e in _exports(exporter)
                if e.export.service == item.imp.service and is_subset(item.remote, e.export.subject)
            ),
            None,
        )
        why = "not exported" if export is None else ""
        if export is not None and export.export.account_token_position:
            # The reference checks the importer's key at the position alone, no token.
            if not export.export.allows(importer.subject, item.remote):
                why = "not the importer's subject at the account token position"
        elif export is not None and export.token_req:
            try:
                token = _activation(item, export, exporter, importer.subject)
                token.check_time(now)
                if token.expires:
                    ends.append(token.expires)
            except JWTError as exc:
                why = str(exc)
        if export is None or why:
            refused.append(f"{item.kind} import {item.remote!r} of {exporter.subject}: {why}")
            continue
        found.append(Share(exporter.subject, item.imp, export.export))
    return found, missing, min(ends, default=0), refused


def imported_from(account: Claims) -> set[str]:
    """The accounts `account` imports from, whose new JWTs change what it may import."""
    return {item.imp.account for item in _imports(account)}
