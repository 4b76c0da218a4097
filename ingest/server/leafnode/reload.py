"""What a config reload may change in `leafnodes {}`: its remotes, as on the reference.

A remote is known by its URLs, local account and credentials file (the
reference's remote name); one whose name is gone is removed (its link closed,
not redialled), one with a new name is dialled. Anything else that differs,
on the block or on a remote that stays, needs a restart, refused in the
reference's words. Pure: two configs in, the changes out.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from ingest.server.gofmt import go_value
from ingest.server.leafnode.settings import LeafnodeConfig, RemoteLeaf


class LeafReloadRefused(ValueError):
    """A leafnodes change the running server cannot take; the message is the reference's
    (after 'config reload not supported for LeafNode: ')."""


@dataclass(frozen=True, slots=True)
class RemoteChanges:
    removed: tuple[RemoteLeaf, ...] = ()
    added: tuple[RemoteLeaf, ...] = ()

    @property
    def notices(self) -> tuple[str, ...]:
        return tuple(f"Reloaded: LeafNode Remote {safe_name(r)} removed" for r in self.removed)


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
    """The remotes to drop and to dial; LeafReloadRefused for any other change."""
    for field in dataclasses.fields(before):
        if field.name == "remotes":
            continue
        old, new = getattr(before, field.name), getattr(after, field.name)
        if old != new:
            old, new = go_value(old), go_value(new)
            raise LeafReloadRefused(f'field "{_go_field(field.name)}": old={old}, new={new}')
    old_by_name = {remote_name(r): r for r in before.remotes}
    new_by_name = {remote_name(r): r for r in after.remotes}
    for name, remote in new_by_name.items():
        kept = old_by_name.get(name)
        if kept is not None and kept != remote:
            field = next(
                f.name
                for f in dataclasses.fields(remote)
                if getattr(kept, f.name) != getattr(remote, f.name)
            )
            old, new = go_value(getattr(kept, field)), go_value(getattr(remote, field))
            raise LeafReloadRefused(
                f'remote {safe_name(remote)}: field "{_go_field(field)}": old={old}, new={new}'
            )
    return RemoteChanges(
        removed=tuple(r for n, r in old_by_name.items() if n not in new_by_name),
        added=tuple(r for n, r in new_by_name.items() if n not in old_by_name),
    )


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
