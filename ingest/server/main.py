"""`jetlake serve`: parse nats-server style flags and config, run until a signal.

SIGTERM/SIGINT shut down gracefully (flush, close, exit 0); SIGUSR2 enters
lame-duck mode; SIGHUP reloads the config file (`ingest/server/reload`).
`--signal <command>[=<pid>]` sends one of those signals to a running server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING

from ingest.server.accounts.conns import ClusterConns
from ingest.server.accounts.events import AccountEvents
from ingest.server.accounts.requests import AccountRequests
from ingest.server.accounts.system_imports import SystemImports
from ingest.server.cluster.system_account import SystemAccount
from ingest.server.logs import setup_logging
from ingest.server.options import ConfigError, FlagError, Options, parse_serve_args
from ingest.server.reload import SignalError, reload_config, reload_refusal, send_signal
from ingest.server.server import Server
from ingest.server.system import SystemServices
from ingest.server.version import JETLAKE_VERSION, VERSION

if TYPE_CHECKING:
    from ingest.server.jetstream.cluster.usage import UsageExchange
    from ingest.server.sql_service import SqlServiceProcess

log = logging.getLogger("jetlake")


def _event_loop_policy() -> None:
    """uvloop when installed: it halves per-message loop overhead."""
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def _serve(opts: Options, argv: list[str]) -> int:
    server = Server(opts)
    loop = asyncio.get_running_loop()
    log.info("Starting jetlake (nats-server compatible %s)", VERSION)
    log.info("  Version:  %s", JETLAKE_VERSION)
    log.info("  Server ID: %s", server.server_id)
    if opts.config_file:
        log.info("Using configuration file: %s (%s)", opts.config_file, opts.config_digest)
    if opts.pid_file:
        with open(opts.pid_file, "w") as f:
            f.write(str(os.getpid()))
    lake = sql = None
    if opts.jetstream.enabled and opts.lake.enabled:
        from ingest.server.lake import LakeSupervisor

        lake = LakeSupervisor(opts.lake)
    monitor = None
    if opts.http_port is not None:
        from ingest.server.monitor import Monitor

        monitor = Monitor(server, opts.http_host, opts.http_port, lake=lake)
    account_js = None
    usage: UsageExchange | None = None  # the cluster's JetStream usage exchange
    if opts.jetstream.enabled:
        from ingest.server.accounts.jetstream import AccountJetStreams
        from ingest.server.jetstream import JetStream

        _arrow_memory_pool()
        clustered = opts.cluster is not None
        if clustered:
            from ingest.server.jetstream.cluster.messaging import Announced
        if server.accounts.global_account.jetstream_enabled:
            server.jetstream = JetStream(
                opts.jetstream,
                Announced(server, server.announce) if clustered else server,
                server_id=server.server_id,
                server_name=server.server_name,
                **({"store_opener": lake.open_store} if lake is not None else {}),
            )
        account_js = AccountJetStreams(
            server,
            lambda account, messaging: JetStream(
                opts.jetstream,
                Announced(messaging, server.announce) if clustered else messaging,
                server_id=server.server_id,
                server_name=server.server_name,
                account=account.name,
                **({"store_opener": lake.open_store} if lake is not None else {}),
            ),
        )
    # The client port first: tools poll /varz and connect as soon as it answers.
    await server.start()
    if opts.cluster is not None:
        from ingest.server.cluster.mesh import Cluster

        server.cluster = Cluster(server, opts.cluster)
        await server.cluster.start()
    if opts.leafnodes is not None:
        from ingest.server.leafnode.manager import Leafnodes

        server.leafnodes = Leafnodes(server, opts.leafnodes)
        await server.leafnodes.start()
    if account_js is not None and server.cluster is not None:
        from ingest.server.jetstream.cluster.controller import cluster_engines

        if not server.cluster.config.routes:
            raise ValueError(
                "Can't start JetStream: JetStream cluster requires configured routes "
                "or solicited leafnode for the system account"
            )
        server.jetstream_cluster = cluster_engines(server, account_js.engines())
    if any(account.imports for account in opts.accounts):
        from ingest.server.accounts.sharing import Sharing

        server.sharing = Sharing(server, opts.accounts)
        server.sharing.start()
    system = SystemServices(server)
    system.start()
    account_events = AccountEvents(server, system)
    account_events.start()
    counts = ClusterConns(server, system, account_events)
    counts.start()
    SystemImports(server).start()
    if server.resolver is not None:
        server.resolver.start(server, system)
    if monitor is not None:
        await monitor.start()
    if opts.jetstream.enabled and opts.jetstream.domain:
        from ingest.server.jetstream.domain import serve_domain

        serve_domain(server, opts.jetstream.domain)
    if server.jetstream is not None:
        await server.jetstream.start()
    if lake is not None:  # with or without the global account's JetStream: every account's
        sql = _sql_service(opts, server.port, logins=server.auth.required)
    if account_js is not None:
        server.account_jetstreams = account_js
        await account_js.start()
        from ingest.server.jetstream.current import CurrentCopies

        CurrentCopies(server).start()  # what a SQL service beside this server asks
        if server.resolver is not None:
            server.resolver.jetstreams = account_js
        if server.jetstream_cluster is not None:
            # Here, not at the top: the jetstream package loads pyarrow, which a server
            # without JetStream never needs before it listens.
            from ingest.server.jetstream.cluster.usage import UsageExchange

            await server.jetstream_cluster.start()
            usage = UsageExchange(server)
            usage.start()
        if lake is not None:  # every account's streams
            from ingest.server.settings import store_base

            lake.start(store_base(opts.jetstream.store_dir), account_js.engines)
    documents = monitor
    if documents is None:  # without an HTTP port $SYS answers still need the documents
        from ingest.server.monitor import Monitor

        documents = Monitor(server, None, 0)
    requests = AccountRequests(server, documents, counts)
    documents.serve("/accountz", requests.accountz_page)
    documents.serve("/accstatz", requests.accstatz_page)
    reload = functools.partial(reload_refusal, server, argv)
    SystemAccount(server, system, documents, requests, reload).start()
    mqtt = None
    if opts.mqtt is not None:
        from ingest.server.mqtt.listener import MQTTListener

        server.mqtt = mqtt = MQTTListener(server, opts.mqtt)
        await mqtt.start()
    if opts.websocket is not None:  # after MQTT: it carries MQTT too
        from ingest.server.websocket.listener import WebSocketListener

        server.websocket = WebSocketListener(server, opts.websocket)
        await server.websocket.start()

    async def shutdown() -> None:
        if mqtt is not None:  # first: sessions hand unacknowledged messages back to JetStream
            mqtt.stop()
        if server.websocket is not None:
            server.websocket.stop()
        if usage is not None:
            usage.stop()
        if server.jetstream_cluster is not None:
            await server.jetstream_cluster.stop()
        if server.resolver is not None:
            server.resolver.stop()
        await server.shutdown()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: loop.create_task(shutdown()))
    loop.add_signal_handler(signal.SIGUSR2, lambda: loop.create_task(server.enter_lame_duck()))
    loop.add_signal_handler(signal.SIGHUP, lambda: reload_config(server, argv))
    loop.add_signal_handler(signal.SIGUSR1, lambda: setup_logging(server.opts))  # log rotation
    # Messages churn many short-lived objects; the default gen-0 threshold (700)
    # ran collections thousands of times a second, each walking the long-lived
    # heap (indexes, caches). Freeze what start-up built and collect less often.
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    log.info("Server is ready")
    await server.wait_closed()
    if account_js is not None:
        await account_js.stop()
    if mqtt is not None:
        mqtt.stop()
    if sql is not None:
        await sql.stop()
    if lake is not None:
        await lake.stop()
    if monitor is not None:
        await monitor.stop()
    log.info("Server Exiting..")
    if opts.pid_file:
        with contextlib.suppress(OSError):
            os.unlink(opts.pid_file)
    return 0


def _sql_service(opts: Options, port: int, *, logins: bool) -> SqlServiceProcess | None:
    """The SQL service over this server's store and lake (`lake { sql }`), started: every
    account's streams, so it starts whether or not the global account has JetStream; with
    `logins` (this server takes logins) its Connect and JDBC clients log in here too."""
    from ingest.server.settings import store_base
    from ingest.server.sql_service import sql_service
    from log.compactor.layout import default_lake_dir
    from log.compactor.location import Lake

    store = store_base(opts.jetstream.store_dir)
    lake = Lake.at(opts.lake.dir or default_lake_dir(store), opts.lake.s3)
    host = opts.host if opts.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    found = sql_service(
        opts.lake.sql,
        store_dir=store,
        lake_root=lake.root,
        spark_master=opts.lake.spark_master,
        client_url=f"nats://{host}:{port}",
        env=lake.child_env(),
        logins=logins,
    )
    if found is not None:
        found.start()
    return found


USAGE = """Usage: jetlake serve [options]

Server Options:
    -a, --addr, --net <host>         Bind to host address (default: 0.0.0.0)
    -p, --port <port>                Use port for clients (default: 4222, -1 for any)
    -n, --name, --server_name <name> Server name (default: server ID)
    -m, --http_port <port>           Use port for http monitoring (-1 for any)
    -c, --config <file>              Configuration file
    -t                               Test configuration and exit
    -P, --pid <file>                 File to store PID
    -sl, --signal <signal>[=<pid>]   Send signal to jetlake process (ldm, stop, quit, term,
                                     reopen, reload); <pid> is a PID or a PID file's path
        --busy_poll <duration>       Longest poll before sleeping (jetlake; default 200us, 0: off)
    -h, --help                       Show this message
    -v, --version                    Show version

Logging Options:
    -l, --log <file>                 File to redirect log output
    -D, --debug                      Enable debugging output
    -V, --trace                      Trace the raw protocol
    -DV                              Debug and trace

Cluster Options:
        --routes <rurl-1, rurl-2>    Routes to solicit and connect
        --cluster <cluster-url>      Cluster URL for solicited routes
        --cluster_listen <url>       Same as --cluster
        --cluster_name <string>      Cluster name (default: generated)
        --no_advertise <bool>        Do not advertise known cluster information to clients
        --connect_retries <number>   For implicit routes, number of connect retries

JetStream and Lake Options:
    -js, --jetstream                 Enable JetStream functionality
    -sd, --store_dir <dir>           Set the storage directory
        --lake                       Roll sealed segments into Delta tables (off by default)
        --lake_dir <dir>             Table root (default: <store_dir>/lake); turns the lake on
        --spark_master <url>         Compactor's Spark master (default: local[*]); turns it on

Authorization and TLS Options:
        --user <user>                User required for connections
        --pass <password>            Password required for connections
        --auth <token>               Authorization token required for connections
        --tls                        Enable TLS, do not verify clients (default: false)
        --tlscert <file>             Server certificate file
        --tlskey <file>              Private key for server certificate
        --tlsverify                  Enable TLS, verify client certificates
        --tlscacert <file>           Client certificate CA for verification

Every flag and config key (type, default, reload): docs/reference/configuration.md"""


def main(argv: list[str]) -> int:
    try:
        opts = parse_serve_args(argv)
    except FlagError as exc:
        # The reference prints the flag error, then its usage, and exits 0.
        print(exc, file=sys.stderr)
        print(USAGE)
        return 0
    except ConfigError as exc:
        print(f"jetlake: {exc}", file=sys.stderr)
        return 1
    if opts.show_help:
        print(USAGE)
        return 0
    if opts.show_version:
        print(f"jetlake: v{JETLAKE_VERSION} (nats-server protocol {VERSION})")
        return 0
    if opts.signal:
        try:
            send_signal(opts.signal)
        except SignalError as exc:
            print(f"jetlake: {exc}", file=sys.stderr)
            return 1
        return 0
    if opts.check_config:
        print(f"jetlake: configuration file {opts.config_file} is valid", file=sys.stderr)
        return 0
    if opts.resolver is not None and opts.resolver.url:
        from ingest.server.auth.account_fetch import FetchError, client_tls, get

        try:
            # As the reference: is the account server there?
            get(opts.resolver.url, tls=client_tls(opts.resolver_tls))
        except FetchError as exc:
            print(f"jetlake: {exc}", file=sys.stderr)
            return 1
    setup_logging(opts)
    for warning in opts.warnings:
        log.warning("%s", warning)
    _event_loop_policy()
    try:
        return asyncio.run(_serve(opts, argv))
    except OSError as exc:
        log.critical("Error listening on port: %s, %s", opts.port, exc)
        return 1
    except ValueError as exc:
        log.critical("%s", exc)
        return 1


def _arrow_memory_pool() -> None:
    """jemalloc for Arrow's buffers unless the user chose (ARROW_DEFAULT_MEMORY_POOL).

    pyarrow's default, mimalloc, gave freed memory back to the OS and took it
    again zeroed: with 128 KiB Object Store chunks, half the server's CPU went
    to the kernel clearing pages and a 32 MiB put ran at 100-200 MB/s from run
    to run; with jemalloc, 175-190.
    """
    import pyarrow as pa

    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL") and "jemalloc" in (
        pa.supported_memory_backends()
    ):
        pa.set_memory_pool(pa.jemalloc_memory_pool())
