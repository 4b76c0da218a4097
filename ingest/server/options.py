"""Options of `jetlake serve`: nats-server's flags and config file, merged.

Operators switch servers without rewriting their files or scripts, so a key
means here what it means to nats-server: same aliases, same defaults, the same
quirks where a file depends on them (a bare `2m` is two million, an integer
duration counts seconds and earns a warning, `port: 0` is the default port and
`-1` a free one). Keys the reference knows but jetlake does not implement are
refused rather than silently ignored.

Pipeline: config file -> field dict -> explicit flags override -> defaults
filled in -> frozen `Options`. Wording of errors follows the reference so that
scripts grepping its messages keep working.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from typing import Any

from ingest.parser.conf import ConfigError, Loader, parse_file
from ingest.server.accounts.settings import DEFAULT_SYSTEM_ACCOUNT
from ingest.server.auth.config import check_operator_mode
from ingest.server.auth.listener import check_no_auth_user, server_users
from ingest.server.cluster.settings import (
    ClusterConfig,
    RouteURLError,
    parse_route_list,
    parse_route_url,
)
from ingest.server.config_file import apply_table, bind_port, blank_fields, monitor_port
from ingest.server.flags import FlagError, parse_flags
from ingest.server.gofmt import go_duration
from ingest.server.leafnode.config_section import check_leafnode_accounts
from ingest.server.mqtt.validate import check_mqtt_options
from ingest.server.settings import (
    JetStreamConfig,
    LakeConfig,
    Options,
    Permissions,
    SubjectPermission,
    TLSConfig,
    User,
    parse_duration,
)
from ingest.server.websocket.validate import check_websocket_options

__all__ = [
    "ConfigError",
    "FlagError",
    "JetStreamConfig",
    "LakeConfig",
    "Options",
    "Permissions",
    "SubjectPermission",
    "TLSConfig",
    "User",
    "load_config",
    "parse_duration",
    "parse_serve_args",
    "validate_options",
]


def _finish(out: dict[str, Any]) -> Options:
    """Fill the defaults that depend on other settings, then freeze."""
    fields = dict(out)
    fields["jetstream"] = JetStreamConfig(**fields["jetstream"])
    fields["lake"] = LakeConfig(**fields["lake"])
    fields["warnings"] = tuple(fields["warnings"])
    tls: TLSConfig | None = fields.get("tls")
    if "auth_timeout" not in fields and tls is not None:
        fields["auth_timeout"] = tls.timeout + 1.0
    return Options(**fields)


def load_config(path: str, *, loader: Loader | None = None) -> Options:
    """Options from a config file alone, as `nats-server -c path -t` judges it."""
    out = blank_fields()
    apply_table(parse_file(path, loader=loader), path, out)
    return _finish(out)


def _apply_flags(flags: dict[str, Any], out: dict[str, Any]) -> None:
    """Explicit flags win over the file, as the reference re-reads them after it."""
    renames = {"user": "username", "pass": "password", "auth": "auth_token", "log": "logfile"}
    for name, value in flags.items():
        if name == "port":
            out["port"] = bind_port(value)
        elif name == "http_port":
            out["http_port"] = monitor_port(value)
        elif name in ("host", "server_name", "debug", "trace", "pid_file", "busy_poll"):
            out[name] = value
        elif name in renames:
            out[renames[name]] = value
        elif name == "jetstream":
            out["jetstream"] = {**out["jetstream"], "enabled": value}
        elif name == "store_dir":
            out["jetstream"] = {**out["jetstream"], "store_dir": value}
        elif name == "lake":
            out["lake"] = {**out["lake"], "enabled": value}
        elif name in ("lake_dir", "spark_master"):  # either one asks for the lake
            key = "dir" if name == "lake_dir" else name
            out["lake"] = {**out["lake"], "enabled": True, key: value}
    _apply_tls_flags(flags, out)
    _apply_cluster_flags(flags, out)


def _apply_cluster_flags(flags: dict[str, Any], out: dict[str, Any]) -> None:
    """`--cluster URL` opens the route listener; the other cluster flags amend it."""
    names = ("cluster", "routes", "cluster_name", "no_advertise", "connect_retries")
    if not any(name in flags for name in names):
        return
    fields: dict[str, Any] = {}
    try:
        if "cluster" in flags:
            listen = parse_route_url(flags["cluster"], listen=True)
            # As on the reference, the URL's credentials replace the file's, absent or not.
            fields.update(host=listen.host, port=listen.port)
            fields.update(username=listen.user, password=listen.password)
        if "routes" in flags:
            fields["routes"] = parse_route_list(flags["routes"])
    except RouteURLError as exc:
        raise ConfigError(str(exc)) from None
    if "cluster_name" in flags:
        fields["name"] = flags["cluster_name"]
    fields.update({k: flags[k] for k in ("no_advertise", "connect_retries") if k in flags})
    if out.get("cluster") is None and "cluster" not in flags:
        if fields.get("routes"):
            raise ConfigError("solicited routes require cluster capabilities, e.g. --cluster")
        return
    out["cluster"] = dataclasses.replace(out.get("cluster") or ClusterConfig(), **fields)


def _apply_tls_flags(flags: dict[str, Any], out: dict[str, Any]) -> None:
    if flags.get("tls") is False:
        out["tls"] = None  # `-tls=false` switches off TLS from the file
        return
    if not any(name.startswith("tls") for name in flags):
        return
    if not flags.get("tlscert"):
        raise ConfigError("TLS Server certificate must be present and valid")
    if not flags.get("tlskey"):
        raise ConfigError("TLS Server private key must be present and valid")
    out["tls"] = TLSConfig(
        cert_file=flags["tlscert"],
        key_file=flags["tlskey"],
        ca_file=flags.get("tlscacert"),
        verify=bool(flags.get("tlsverify")),
    )


def parse_serve_args(argv: list[str], *, loader: Loader | None = None) -> Options:
    """Flags and config file merged and validated, ready to start a server.

    Raises `FlagError` for what the reference answers with its usage text and
    `ConfigError` for a config or a combination it refuses to start with.
    """
    parsed = parse_flags(argv)
    if parsed.show_help or parsed.show_version:
        return Options(show_help=parsed.show_help, show_version=parsed.show_version)
    if parsed.signal:  # sent before any config file is read, as the reference does
        return Options(signal=parsed.signal)
    out = blank_fields()
    if parsed.config_file:
        apply_table(parse_file(parsed.config_file, loader=loader), parsed.config_file, out)
    elif parsed.check_config:
        raise ConfigError("must specify [-c, --config] option to check configuration file syntax")
    if parsed.check_config:
        if out["warnings"]:  # `-t` treats warnings as failures
            raise ConfigError("\n".join(out["warnings"]))
        return dataclasses.replace(_finish(out), check_config=True)
    _apply_flags(parsed.values, out)
    options = _finish(out)
    validate_options(options)
    return options


# -- start-time checks ------------------------------------------------------------

_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    labels = host.rstrip(".").split(".")
    if not host or len(host) > 253 or labels[-1].isdigit():
        return False  # an all-numeric top label is a mistyped IPv4 address
    return all(_HOST_LABEL.fullmatch(label) for label in labels)


def _go(seconds: float) -> str:
    return go_duration(round(seconds * 1e9))


def _check_accounts(opts: Options) -> None:
    """What the accounts section alone cannot see: users named in authorization after it,
    and a system account no section defines."""
    names = {user.user for user in opts.users}
    for account in opts.accounts:
        for user in account.users:
            if user.user in names:
                raise ConfigError(f'Duplicate user "{user.user}" detected')
    system = opts.system_account
    if system not in (None, DEFAULT_SYSTEM_ACCOUNT) and all(
        account.name != system for account in opts.accounts
    ):
        raise ConfigError("error resolving system account: account missing")


def validate_options(opts: Options) -> None:
    """What the reference refuses when the server is created or starts listening."""
    for label, host in (("host", opts.host), ("http host", opts.http_host)):
        if host is not None and not _valid_host(host):
            raise ConfigError(f'invalid {label} address "{host}"')
    for label, port in (("port", opts.port), ("http port", opts.http_port)):
        if port is not None and not 0 <= port <= 65535:
            raise ConfigError(f"invalid {label} {port}")
    if opts.lame_duck_grace_period >= opts.lame_duck_duration:
        raise ConfigError(
            f"lame duck grace period ({_go(opts.lame_duck_grace_period)}) should be "
            f"strictly lower than lame duck duration ({_go(opts.lame_duck_duration)})"
        )
    if opts.max_payload > opts.max_pending:
        raise ConfigError(
            f"max_payload ({opts.max_payload}) cannot be higher than "
            f"max_pending ({opts.max_pending})"
        )
    if opts.server_name is not None and " " in opts.server_name:
        raise ConfigError("server name cannot contain spaces")
    if opts.busy_poll < 0:
        raise ConfigError(f"busy_poll ({_go(opts.busy_poll)}) cannot be negative")
    if opts.operators:
        check_operator_mode(opts)
    else:
        _check_accounts(opts)
    check_no_auth_user(opts.no_auth_user, server_users(opts))
    check_mqtt_options(opts)
    check_leafnode_accounts(opts)
    check_websocket_options(opts)
    if opts.jetstream.enabled and opts.cluster is not None:
        if not opts.server_name:
            raise ConfigError("jetstream cluster requires `server_name` to be set")
        if not opts.cluster.name:
            raise ConfigError("jetstream cluster requires `cluster.name` to be set")
