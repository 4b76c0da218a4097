"""What a config reload may change in `leafnodes {}`, as on the reference: its remotes,
the TLS and compression of the listener and of each remote that stays.

A remote is known by its URLs, local account and credentials file (the
reference's remote name); one whose name is gone is removed (its link closed,
not redialled), one with a new name is dialled, one that stays takes its new
`tls` (for its next handshake) and `compression` (applied to its live link).
Anything else that differs, on the block or on a remote that stays, needs a
restart, refused in the reference's words. Pure: two configs in, the changes out.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from ingest.server.compression import Compression
from ingest.server.gofmt import go_duration, go_value
from ingest.server.leafnode.settings import LeafnodeConfig, RemoteLeaf
from ingest.server.tls_settings import DEFAULT_TLS_TIMEOUT, TLSConfig


class LeafReloadRefused(ValueError):
    """A leafnodes change the running server cannot take; the message is the reference's
    (after 'config reload not supported for LeafNode: ')."""


# What may differ on the block, and on a remote that stays, without a restart.
_RELOADABLE = ("remotes", "tls", "compression")
_REMOTE_RELOADABLE = ("tls", "compression")


@dataclass(frozen=True, slots=True)
class RemoteChanges:
    removed: tuple[RemoteLeaf, ...] = ()
    added: tuple[RemoteLeaf, ...] = ()
    kept: tuple[tuple[RemoteLeaf, RemoteLeaf], ...] = ()  # (old, new) of a changed remote
    compression: Compression | None = None  # the listener's, when it changed

    @property
    def notices(self) -> tuple[str, ...]:
        """The reference's lines: the listener's compression first, then each remote's."""
        out = []
        if self.compression is not None:
            mode = go_compression(self.compression)
            out.append(f"Reloaded: LeafNode Compression value is: {mode}")
        out += [f"Reloaded: LeafNode Remote {safe_name(r)} removed" for r in self.removed]
        out += [
            f"Reloaded: LeafNode Remote {safe_name(new)} Compression value is: "
            + go_compression(new.compression)
            for old, new in self.kept
            if old.compression != new.compression
        ]
        return tuple(out)


def go_compression(compression: Compression) -> str:
    """The reference prints its CompressionOpts struct: `{mode [thresholds]}`."""
    thresholds = " ".join(go_duration(t) for t in compression.rtt_thresholds)
    return f"{{{compression.mode} [{thresholds}]}}"


def remote_name(remote: RemoteLeaf, *, redacted: bool = False) -> str:
    """The reference's name of a remote: `urls=[…], account="…"[, credentials="…"]`."""
    urls = [_url(url, redacted=redacted) for url in remote.urls]
    name = f"urls=[{' '.join(json.dumps(u) for u in urls)}], account={json.dumps(remote.account)}"
    if remote.credentials:
        name += f", credentials={json.dumps(remote.credentials)}"
    return name


def safe_name(remote: RemoteLeaf) -> str:
    """The name as logged: passwords in URLs hidden."""
    return remote_name(remote, redacted=True)


def _url(url: Any, *, redacted: bool) -> str:
    if redacted and url.password:
        return f"{url.scheme}://{url.user}:xxxxx@{url.hostport}"
    return str(url)


def remote_changes(before: LeafnodeConfig, after: LeafnodeConfig) -> RemoteChanges:
    """The remotes to drop, to dial and to update; LeafReloadRefused for any other change."""
    for field in dataclasses.fields(before):
        old, new = getattr(before, field.name), getattr(after, field.name)
        if field.name == "tls":
            _check_listener_tls(old, new)
        elif field.name not in _RELOADABLE and old != new:
            old, new = go_value(old), go_value(new)
            raise LeafReloadRefused(f'field "{_go_field(field.name)}": old={old}, new={new}')
    old_by_name = {remote_name(r): r for r in before.remotes}
    new_by_name = {remote_name(r): r for r in after.remotes}
    for name, remote in new_by_name.items():
        kept = old_by_name.get(name)
        if kept is None:
            continue
        field = next(
            (
                f.name
                for f in dataclasses.fields(remote)
                if f.name not in _REMOTE_RELOADABLE
                and getattr(kept, f.name) != getattr(remote, f.name)
            ),
            None,
        )
        if field is not None:
            old, new = go_value(getattr(kept, field)), go_value(getattr(remote, field))
            raise LeafReloadRefused(
                f'remote {safe_name(remote)}: field "{_go_field(field)}": old={old}, new={new}'
            )
    return RemoteChanges(
        removed=tuple(r for n, r in old_by_name.items() if n not in new_by_name),
        added=tuple(r for n, r in new_by_name.items() if n not in old_by_name),
        kept=tuple(
            (old_by_name[n], r)
            for n, r in new_by_name.items()
            if n in old_by_name and old_by_name[n] != r
        ),
        compression=after.compression if before.compression != after.compression else None,
    )


def _check_listener_tls(before: TLSConfig | None, after: TLSConfig | None) -> None:
    """The reference reloads the listener's certificates (its TLS config) alone: its
    timeout and pinned_certs are fields of their own, whose change needs a restart."""
    old = before.timeout if before else DEFAULT_TLS_TIMEOUT
    new = after.timeout if after else DEFAULT_TLS_TIMEOUT
    if old != new:
        raise LeafReloadRefused(f'field "TLSTimeout": old={go_value(old)}, new={go_value(new)}')
    old_pins = before.pinned_certs if before else None
    new_pins = after.pinned_certs if after else None
    if old_pins != new_pins:
        raise LeafReloadRefused(
            f'field "TLSPinnedCerts": old={_go_set(old_pins)}, new={_go_set(new_pins)}'
        )


def _go_set(pins: frozenset[str] | None) -> str:
    """A set as the reference's map prints it: `map[key:{} …]`, keys sorted."""
    return "map[" + " ".join(f"{pin}:{{}}" for pin in sorted(pins or ())) + "]"


_GO_FIELDS = {
    "host": "Host",
    "port": "Port",
    "username": "Username",
    "password": "Password",
    "account": "Account",
    "users": "Users",
    "auth_timeout": "AuthTimeout",
    "advertise": "Advertise",
    "no_advertise": "NoAdvertise",
    "reconnect": "ReconnectInterval",
    "tls": "TLSConfig",
    "compression": "Compression",
    "urls": "URLs",
    "credentials": "Credentials",
    "hub": "Hub",
    "deny_imports": "DenyImports",
    "deny_exports": "DenyExports",
}


def _go_field(name: str) -> str:
    """The reference's Go field name, which its message quotes."""
    return _GO_FIELDS.get(name, name)
