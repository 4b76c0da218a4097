"""The `leafnodes { … }` section of a config file, read with the reference's keys."""

from __future__ import annotations

import dataclasses
import os
from functools import partial
from typing import Any

from ingest.parser.conf import ConfigError, Table
from ingest.server.accounts.settings import DEFAULT_SYSTEM_ACCOUNT, GLOBAL_ACCOUNT
from ingest.server.cluster.config_section import (
    TLSReader,
    listener_section,
    single_user_authorization,
    url_list,
)
from ingest.server.cluster.settings import RouteURL
from ingest.server.compression import OFF, S2_AUTO, Compression, normalise
from ingest.server.config_reader import Section
from ingest.server.gofmt import NS, go_type, go_value
from ingest.server.leafnode.settings import LeafnodeConfig, LeafUser, RemoteLeaf
from ingest.server.settings import TLSConfig, parse_duration


def read_leafnodes(top: Section, key: str, *, tls: TLSReader) -> LeafnodeConfig:
    """`tls` reads a `tls {}` block as the top level's does."""
    tls = _files_checked(tls)
    fields = listener_section(top, key, tls, partial(_leafnodes_key, tls=tls))
    if fields.get("tls") is not None and "auth_timeout" not in fields:
        # The reference gives a TLS handshake its whole timeout before the login's.
        fields["auth_timeout"] = fields["tls"].timeout + 1.0
    return dataclasses.replace(LeafnodeConfig(), **fields)


def _leafnodes_key(section: Section, key: str, *, tls: TLSReader) -> dict[str, Any] | None:
    """The leafnodes block's keys beyond every listener's, as fields; None for another."""
    lowered = key.lower()
    if lowered in ("authorization", "authentication"):
        return _authorization(section, key)
    if lowered == "remotes":
        return {"remotes": _remotes(section, key, tls)}
    if lowered in ("reconnect", "reconnect_delay", "reconnect_interval"):
        return {"reconnect": _seconds(section, key)}
    if lowered == "advertise":
        return {"advertise": section.string(key)}
    if lowered == "no_advertise":
        return {"no_advertise": section.boolean(key)}
    if lowered == "compression":
        return {"compression": read_compression(section, key)}
    return None


def _seconds(section: Section, key: str) -> float:
    """An integer of seconds or a duration string, as the reference reads `reconnect`."""
    if isinstance(section.table[key], int):
        return float(section.integer(key))
    return section.timeout(key, "leafnode reconnect")


def _authorization(parent: Section, key: str) -> dict[str, Any]:
    return single_user_authorization(parent, key, token=False, more=_authorization_more)


def _authorization_more(section: Section, key: str) -> dict[str, Any] | None:
    """A leafnode block's keys beyond a single user's: the account a link binds to and
    a list of users."""
    lowered = key.lower()
    if lowered == "account":
        return {"account": section.string(key)}
    if lowered == "users":
        return {"users": _users(section, key)}
    return None


def _users(parent: Section, key: str) -> tuple[LeafUser, ...]:
    users = []
    for section in parent.maps(key, "users", "user", go_value):
        fields: dict[str, Any] = {}
        for name in section.table:
            lowered = name.lower()
            if lowered in ("user", "username"):
                fields["user"] = section.string(name)
            elif lowered in ("pass", "password"):
                fields["password"] = section.string(name)
            elif lowered == "account":
                fields["account"] = section.string(name)
            else:
                section.unknown(name)
        if "user" not in fields:
            raise parent.error(key, "User entry requires a user")
        users.append(LeafUser(**fields))
    return tuple(users)


def _remotes(parent: Section, key: str, tls: TLSReader) -> tuple[RemoteLeaf, ...]:
    return tuple(_remote(s, tls) for s in parent.maps(key, "remotes", "remote leafnode"))


def _remote(section: Section, tls: TLSReader) -> RemoteLeaf:
    fields: dict[str, Any] = {}
    for name in section.table:
        lowered = name.lower()
        if lowered in ("url", "urls"):
            fields["urls"] = _urls(section, name)
            if _tls_scheme(section.table[name]):
                fields.setdefault("tls", TLSConfig())  # the system's roots, no certificate
        elif lowered in ("account", "local"):
            fields["account"] = section.string(name)
        elif lowered in ("credentials", "creds"):
            fields["credentials"] = section.string(name)
        elif lowered == "hub":
            fields["hub"] = section.boolean(name)
        elif lowered in ("deny_imports", "deny_import"):
            fields["deny_imports"] = section.subjects(name, queue=False)
        elif lowered in ("deny_exports", "deny_export"):
            fields["deny_exports"] = section.subjects(name, queue=False)
        elif lowered == "tls":
            fields["tls"] = tls(section, name)
        elif lowered == "compression":
            fields["compression"] = read_compression(section, name)
        else:
            section.unknown(name)
    return RemoteLeaf(**fields)  # without a URL it is never dialled, as on the reference


def read_compression(section: Section, key: str, *, on: str = S2_AUTO) -> Compression:
    """`compression: <mode>`, `: true|false` (`on` or off), or `{ mode, rtt_thresholds
    [..] }`, with the reference's errors; a block without a mode is `on`."""
    value = section.table[key]
    thresholds: tuple[int, ...] = ()
    if isinstance(value, bool):
        mode = on if value else OFF
    elif isinstance(value, str):
        mode = value
    elif isinstance(value, Table):
        mode, thresholds = _compression_block(section.section(key))
    else:
        reason = f'field "{key}" should be a boolean or a structure, got {go_type(value)}'
        raise section.error(key, reason)
    try:
        return normalise(mode or on, thresholds, on=on)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _compression_block(section: Section) -> tuple[str, tuple[int, ...]]:
    mode, thresholds = "", []
    for name in section.table:
        lowered = name.lower()
        if lowered == "mode":
            mode = section.string(name)
        elif lowered in ("rtt_thresholds", "thresholds", "rtts", "rtt"):
            items = section.table[name]
            for item in items if isinstance(items, list) else [items]:
                try:
                    thresholds.append(round(parse_duration(str(item)) * NS))
                except ValueError as exc:
                    raise section.error(name, str(exc)) from None
        else:
            section.unknown(name)
    return mode, tuple(thresholds)


def _urls(section: Section, key: str) -> tuple[RouteURL, ...]:
    return url_list(
        section,
        key,
        not_a_string=lambda item: f"Expected remote leafnode url to be a string, got {item!r}",
        named="leafnode url",
    )


def _files_checked(tls: TLSReader) -> TLSReader:
    """As the reference, a certificate or key file that cannot be opened fails the parse
    at its `tls` key, at start and at a reload alike."""

    def read(section: Any, name: str) -> Any:
        config = tls(section, name)
        for path in (config.cert_file, config.key_file):
            if path and not os.path.isfile(path):
                reason = f"open {path}: no such file or directory"
                raise section.error(name, f"error parsing X509 certificate/key pair: {reason}")
        return config

    return read


def _tls_scheme(value: object) -> bool:
    """A tls:// URL asks for TLS without a `tls {}` block, as on the reference."""
    items = value if isinstance(value, list) else [value]
    return any(isinstance(i, str) and i.strip().lower().startswith("tls://") for i in items)


def check_leafnode_accounts(opts: Any) -> None:
    """As the reference at start: every account a leafnode setting binds links to exists
    (the global account always does, the system account unless another is named)."""
    leafnodes = opts.leafnodes
    if leafnodes is None or getattr(opts, "operators", ()):
        return
    known = {GLOBAL_ACCOUNT, opts.system_account or DEFAULT_SYSTEM_ACCOUNT}
    known |= {account.name for account in opts.accounts}
    named = [(leafnodes.account, "authorization")]
    named += [(user.account, "authorization") for user in leafnodes.users]
    named += [(remote.account, "remote") for remote in leafnodes.remotes]
    for name, where in named:
        if name and name not in known:
            raise ConfigError(f'cannot find local account "{name}" specified in leafnode {where}')
