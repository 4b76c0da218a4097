"""Config reload on a running server: re-read the file, judge the change, swap it in.

Everything that can fail (reading and validating the file, the plan, loading
certificates, the accounts the new file describes) happens before the first
assignment, so a refused or broken reload leaves the server as it was. The auth
objects are rebuilt with the constructors the server starts with (`Authenticator`,
`Accounts`, `SubjectMapper`, `Sharing`), so whatever they learn to read from the
options reloads with them. Live accounts keep their subscriptions and JetStream:
what the fresh ones were configured with is copied onto them. Then every client
is judged as the reference does: one whose user is gone or moved to another
account is closed; one whose credentials no longer pass gets
'Authorization Violation'; one that kept its user loses, with the reference's
-ERR, each subscription its new permissions refuse.
"""

from __future__ import annotations

import inspect
import logging
import os
import ssl
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ingest.parser.conf import ConfigError
from ingest.server.accounts.limits import MAX_SUBSCRIPTIONS
from ingest.server.accounts.registry import Account, Accounts
from ingest.server.auth.authenticator import AUTH_VIOLATION, Authenticator, AuthError
from ingest.server.flags import FlagError
from ingest.server.leafnode.contexts import Contexts, build_contexts
from ingest.server.leafnode.reload import remote_changes
from ingest.server.logs import setup_logging
from ingest.server.mappings import SubjectMapper
from ingest.server.options import parse_serve_args
from ingest.server.reload import pins
from ingest.server.reload.plan import Plan, ReloadRefused, plan
from ingest.server.sublist import Sublist
from ingest.server.tls import make_server_context, route_contexts

if TYPE_CHECKING:
    from ingest.server.client import Client
    from ingest.server.server import Server
    from ingest.server.settings import Options

log = logging.getLogger("jetlake")

NO_CONFIG_FILE = "can only reload config when a file is provided using -c or --config"
MAX_CONNECTIONS = "maximum connections exceeded"


@dataclass(slots=True)
class _Prepared:
    """What the new settings need built before anything is swapped."""

    opts: Options
    plan: Plan
    tls: ssl.SSLContext | None
    route_tls: tuple[ssl.SSLContext, ssl.SSLContext] | None
    mqtt_tls: ssl.SSLContext | None
    leaf_tls: Contexts  # the leafnode listener's and remotes', read anew
    accounts: Accounts


def reload_config(server: Server, argv: list[str]) -> bool:
    """SIGHUP: the command line re-read with its config file, as at start (flags still
    win over the file). Logs the outcome; False when the old configuration stays."""
    log.info('Trapped "hangup" signal')
    return reload_refusal(server, argv) is None


def reload_refusal(server: Server, argv: list[str]) -> str | None:
    """A reload however asked (SIGHUP, the system account's `…RELOAD`): why the old
    configuration stays, or None once the new one applies."""
    try:
        prepared = _prepare(server, argv)
    except (ConfigError, FlagError, ReloadRefused, OSError, ValueError, ssl.SSLError) as exc:
        log.error("Failed to reload server configuration: %s", exc)
        return str(exc)
    _apply(server, prepared)
    return None


def _prepare(server: Server, argv: list[str]) -> _Prepared:
    if not server.opts.config_file:
        raise ReloadRefused(NO_CONFIG_FILE)
    opts = parse_serve_args(argv)
    changes = plan(server.opts, opts)
    tls = make_server_context(opts.tls) if opts.tls is not None else None
    route_tls = route_contexts(opts.cluster.tls) if opts.cluster is not None else None
    mqtt_tls = opts.mqtt.tls if opts.mqtt is not None else None
    mqtt_context = make_server_context(mqtt_tls) if mqtt_tls is not None else None
    leaf_tls = build_contexts(opts.leafnodes) if opts.leafnodes is not None else {}
    if changes.preloads and server.resolver is not None:
        server.resolver.check_preloads(opts.resolver_preload)
    fresh = Accounts(opts, Sublist(), jetstream=opts.jetstream.enabled)
    for account in fresh:
        live = server.accounts.get(account.name)
        enabled = live.jetstream_enabled if live is not None else False
        if enabled != account.jetstream_enabled and not _switchable(server, account):
            raise ReloadRefused(
                f"config reload not supported for jetstream of account {account.name}"
            )
    return _Prepared(opts, changes, tls, route_tls, mqtt_context, leaf_tls, fresh)


def _apply(server: Server, prepared: _Prepared) -> None:
    opts, changes = prepared.opts, prepared.plan
    before, server.opts = server.opts, opts
    for notice in changes.notices:
        log.info("%s", notice)
    server.tls_context = prepared.tls  # certificates are read again even when unchanged
    if changes.logging:
        setup_logging(opts)
    if changes.pid_file and opts.pid_file:
        with open(opts.pid_file, "w") as f:
            f.write(str(os.getpid()))
    if server.cluster is not None and opts.cluster is not None:
        if changes.routes:
            server.cluster.reroute(opts.cluster.routes)
        server.cluster.config = opts.cluster
        server.cluster.tls_contexts = prepared.route_tls
        if changes.cluster:
            for route in list(server.cluster.connections):
                route.recheck_authorization()
    pins.recheck(server, before, opts)
    if changes.auth:
        _swap_auth(server, prepared)
    if changes.mqtt and server.mqtt is not None:  # read as each consumer is made
        server.mqtt.reload(opts.mqtt, prepared.mqtt_tls)
    leaf_before, leaf_after = before.leafnodes, opts.leafnodes
    if server.leafnodes and leaf_before and leaf_after:  # certificates read again always
        remotes = remote_changes(leaf_before, leaf_after)
        server.leafnodes.reload(leaf_after, remotes, prepared.leaf_tls)
    if changes.jetstream_limits:  # what /jsz and cluster placement read
        for account in server.accounts:
            if account.jetstream is not None:
                account.jetstream.config = opts.jetstream
    removed: list[str] = []
    if changes.preloads and server.resolver is not None:
        removed = server.resolver.reload_preloads(before.resolver_preload, opts.resolver_preload)
    _fall_within_max_connections(server, opts.max_connections)
    for client in list(server.clients.values()):
        if client.closed:
            continue
        if client.authenticated and (changes.auth or client.account.name in removed):
            _recheck(server, client)
        elif changes.logging:
            client.regrant(client.grant)  # tracing decides the fast path too
    if changes.auth and server.mqtt is not None:
        server.mqtt.recheck()
    server.config_load_time = time.time()
    log.info("Reloaded server configuration (%s)", server.opts.config_digest)


def _switchable(server: Server, account: Account) -> bool:
    """A named account's JetStream goes on or off, on a single server or in a cluster
    (its replicas here join or leave their groups); the global account's engine is
    built at start only."""
    return (
        account.name != server.accounts.global_account.name
        and server.account_jetstreams is not None
    )


def _fall_within_max_connections(server: Server, limit: int) -> None:
    """A lowered `max_connections` closes clients until the server is within it, as the
    reference does (which ones is not chosen: the most recent here)."""
    excess = list(server.clients.values())[max(0, limit) :]
    for client in excess:
        client.cut_off(MAX_CONNECTIONS, "Max Connections Exceeded")
    if excess:
        log.info("Closed %d connections to fall within max_connections", len(excess))


def _swap_auth(server: Server, prepared: _Prepared) -> None:
    opts = prepared.opts
    server.auth = Authenticator(opts, server.resolver.store if server.resolver else None)
    server.mapper = SubjectMapper(opts.mappings) if opts.mappings else None
    engines = server.account_jetstreams
    for fresh in prepared.accounts:
        live = server.accounts.get(fresh.name) or server.accounts.ensure(fresh.name)
        _configure(live, fresh)
        if engines is not None and fresh.jetstream_enabled and live.jetstream is None:
            engines.enable(live)  # its streams on disk come back with it
        elif engines is not None and not fresh.jetstream_enabled and live.jetstream is not None:
            engines.disable(live)
        elif live.jetstream is not None:
            live.jetstream.limits = live.limits.jetstream
    sharing = server.sharing
    if sharing is not None:
        sharing.stop()
        server.sharing = None
    if any(account.imports for account in opts.accounts):
        from ingest.server.accounts.sharing import Sharing

        server.sharing = Sharing(server, opts.accounts)
        server.sharing.start()


def _configure(live: Account, fresh: Account) -> None:
    """Give a live account what its fresh twin was constructed with (every keyword of
    `Account`), keeping its subscriptions, connections and JetStream."""
    for name, parameter in inspect.signature(Account).parameters.items():
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and hasattr(fresh, name):
            setattr(live, name, getattr(fresh, name))


def _recheck(server: Server, client: Client) -> None:
    connect = client.connect_options
    named = (connect.get("nkey") or connect.get("user")) and not connect.get("jwt")
    if named and server.auth.listed_account(connect) != client.account.name:
        client.close_with("Client Closed")  # its user is gone or moved: it reconnects
        return
    try:
        grant = server.auth.authenticate(connect, nonce=client.nonce)
    except AuthError as exc:
        who = f" - {exc.who}" if exc.who else ""
        log.error("%s - authentication error%s", _where(client), who)
        client.cut_off(AUTH_VIOLATION, "Authentication Failure")
        return
    if grant.account != client.account.name:
        client.close_with("Client Closed")
        return
    for sub in list(client.subs.values()):
        if grant.restricted and not grant.can_subscribe(sub.subject):
            _drop(client, sub, grant.user)
    client.regrant(grant)
    limit = client.account.limits.max_subscriptions
    if 0 <= limit <= len(client.subs):  # the reference's rule when an account's limits change
        client.cut_off(MAX_SUBSCRIPTIONS, "Maximum Subscriptions Exceeded")


def _drop(client: Client, sub: Any, user: str) -> None:
    client.drop_sub(sub)
    sid = sub.sid.decode("utf-8", "replace")
    queue = f' using queue "{sub.queue}"' if sub.queue else ""
    client.send_err(
        f'Permissions Violation for Subscription to "{sub.subject}"{queue} (sid "{sid}")'
    )
    log.info(
        'Removed sub "%s"%s (sid "%s") for User "%s" - not authorized',
        sub.subject,
        queue,
        sid,
        user,
    )


def _where(client: Client) -> str:
    return f"{client.host}:{client.port} - cid:{client.cid}"
