"""The `cluster { … }` section of a config file, read with the reference's keys.

The config-file module hands over its section reader; this module only knows
which keys a cluster has, so the connections' code stays out of option parsing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ingest.server.cluster.settings import ClusterConfig, RouteURL, RouteURLError, parse_route_url
from ingest.server.config_reader import Section

TLSReader = Callable[[Any, str], Any]  # reads a `tls {}` block as the top level's does
KeyReader = Callable[[Section, str], dict[str, Any] | None]  # one key's fields; None: not its
Config = TypeVar("Config")


def read_cluster(top: Section, key: str, *, tls: TLSReader) -> ClusterConfig | None:
    """None without a port (`listen` or `port`): the reference then opens no route
    listener and dials no route, whatever else the block says. `tls` reads a `tls {}`
    block as the top level's does."""
    return optional_listener(top, key, tls, _cluster_key, ClusterConfig)


def _cluster_key(section: Section, key: str) -> dict[str, Any] | None:
    """The cluster block's keys beyond every listener's, as fields; None for another."""
    lowered = key.lower()
    if lowered == "name":
        return {"name": _name(section, key)}
    if lowered == "routes":
        return {"routes": _routes(section, key)}
    if lowered in ("authorization", "authentication"):
        return single_user_authorization(section, key, token=False, refused=_REFUSED)
    if lowered == "no_advertise":
        return {"no_advertise": section.boolean(key)}
    if lowered == "connect_retries":
        return {"connect_retries": section.integer(key)}
    if lowered == "pool_size":
        return {"pool_size": section.integer(key)}
    return None


def listener_section(top: Section, key: str, tls: TLSReader, own: KeyReader) -> dict[str, Any]:
    """The fields of a listening section (cluster, websocket, leafnodes): each key read
    by `listener_fields` or else by the section's `own` reader (None: not its key), and
    refused as unknown by neither."""
    section = top.section(key)
    fields: dict[str, Any] = {}
    for name in section.table:
        found = listener_fields(section, name, tls)
        if found is None:
            found = own(section, name)
        if found is None:
            section.unknown(name)
        else:
            fields.update(found)
    return fields


def optional_listener(
    top: Section,
    key: str,
    tls: TLSReader,
    own: KeyReader,
    kind: Callable[..., Config],
) -> Config | None:
    """A listening section that opens nothing without a port (cluster, websocket), as
    the reference: None then, else its `kind` of config made of the fields
    `listener_section` read (the rest keep their defaults)."""
    fields = listener_section(top, key, tls, own)
    return kind(**fields) if "port" in fields else None


def listener_fields(section: Section, key: str, tls: TLSReader) -> dict[str, Any] | None:
    """The keys every listening section reads alike (listen, host/net, port, tls), as
    fields; None for any other key."""
    lowered = key.lower()
    if lowered == "listen":
        return listen_address(section, key)
    if lowered in ("host", "net"):
        return {"host": section.string(key)}
    if lowered == "port":
        port = section.integer(key)
        return {"port": 0 if port == -1 else port}
    if lowered == "tls":
        return {"tls": tls(section, key)}
    return None


def listen_address(section: Section, key: str) -> dict[str, Any]:
    host, port = section.address(key)
    fields: dict[str, Any] = {"port": 0 if port == -1 else port}
    if host:
        fields["host"] = host
    return fields


def _name(section: Section, key: str) -> str:
    name = section.string(key)
    if " " in name:
        raise section.error(key, "cluster name cannot contain spaces")
    return name


def _routes(section: Section, key: str) -> tuple[RouteURL, ...]:
    return url_list(section, key, not_a_string=lambda item: f'error parsing route url ["{item}"]')


def url_list(
    section: Section,
    key: str,
    *,
    not_a_string: Callable[[object], str],
    named: str = "route url",
) -> tuple[RouteURL, ...]:
    """One URL or a list of them, in route URL syntax (routes, leafnode remotes): an
    item that is no string refused in `not_a_string`'s words, a bad URL in the parser's,
    the URL `named` as the section calls it."""
    value = section.table[key]
    items = value if isinstance(value, list) else [value]
    urls = []
    for item in items:
        if not isinstance(item, str):
            raise section.error(key, not_a_string(item))
        try:
            urls.append(parse_route_url(item))
        except RouteURLError as exc:
            raise section.error(key, str(exc).replace("route url", named)) from None
    return tuple(urls)


_REFUSED = {
    "token": "Cluster authorization does not support tokens",
    "users": "Cluster authorization does not allow multiple users",
}


def single_user_authorization(
    parent: Section,
    key: str,
    *,
    token: bool,
    refused: dict[str, str] | None = None,
    more: Callable[[Any, str], dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """The `authorization {}` of a listener block (cluster, mqtt, websocket, leafnodes):
    user/username, pass/password, timeout, and a token where the block allows one.
    `refused` names keys the reference rejects with a reason of their own instead of
    "unknown field"; `more` reads the block's own further keys (None: not one)."""
    section = parent.section(key)
    fields: dict[str, Any] = {}
    for name in section.table:
        lowered = name.lower()
        if lowered in ("user", "username"):
            fields["username"] = section.string(name)
        elif lowered in ("pass", "password"):
            fields["password"] = section.string(name)
        elif lowered == "timeout":
            fields["auth_timeout"] = section.timeout(name, "authorization config")
        elif lowered == "token" and token:
            fields["token"] = section.string(name)
        elif refused and lowered in refused:
            raise parent.error(key, refused[lowered])
        elif more is not None and (extra := more(section, name)) is not None:
            fields.update(extra)
        else:
            section.unknown(name)
    return fields
