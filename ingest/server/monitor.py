"""The monitoring HTTP server of `jetlake serve -m PORT`.

Dashboards, the Prometheus exporter and deployment scripts poll nats-server's
endpoints and parse its JSON, so field names, types (durations in nanoseconds
where the reference writes integers, Go duration strings where it writes
strings) and error texts follow the reference. Fields are only emitted when
jetlake can fill them truthfully; an invented zero misleads an operator more
than a missing key.
The HTTP plumbing (bounds, timeouts, parsing) lives in `httpd`; this module is
only the endpoints.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ingest.server.accounts.traffic import NAMES as CLIENT_FIGURES
from ingest.server.cluster.monitoring import routez, varz_cluster
from ingest.server.cluster.ports import RequestError
from ingest.server.cluster.settings import hostport
from ingest.server.connz import ASCENDING, DESCENDING, Conn, conn_info, sub_detail, sublist_stats
from ingest.server.gofmt import NS, number, timestamp, uptime
from ingest.server.httpd import (
    JSON,
    TEXT,
    Handler,
    HttpError,
    HttpServer,
    Request,
    Response,
    bool_arg,
    int_arg,
)
from ingest.server.jsz import (
    account_detail,
    account_views,
    combined,
    jetstream_view,
    raft_groups,
)
from ingest.server.monitor_options import query
from ingest.server.procstats import CpuMeter, rss
from ingest.server.version import JETLAKE_VERSION, VERSION

if TYPE_CHECKING:
    from ingest.server.lake import LakeSupervisor
    from ingest.server.server import Server

log = logging.getLogger("jetlake")

DEFAULT_LIST_SIZE = 1024  # the reference's default connz/subsz page

PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"

# The values /varz and /metrics share: (key, Prometheus type, help text).
STATS: tuple[tuple[str, str, str], ...] = (
    ("in_msgs", "counter", "Messages received from clients and internal publishers"),
    ("out_msgs", "counter", "Messages delivered to subscribers"),
    ("in_bytes", "counter", "Payload and header bytes received"),
    ("out_bytes", "counter", "Payload and header bytes delivered"),
    ("connections", "gauge", "Client connections open now"),
    ("total_connections", "counter", "Client connections accepted since start"),
    ("subscriptions", "gauge", "Subscriptions in the subject trie"),
    ("in_client_msgs", "counter", "Messages received from clients"),
    ("out_client_msgs", "counter", "Messages delivered to clients"),
    ("in_client_bytes", "counter", "Payload and header bytes received from clients"),
    ("out_client_bytes", "counter", "Payload and header bytes delivered to clients"),
    ("slow_consumers", "counter", "Connections cut off as slow consumers"),
    ("stale_connections", "counter", "Connections cut off for unanswered PINGs"),
    ("stalled_clients", "counter", "Times a publisher waited for a slow subscriber"),
    ("mem", "gauge", "Resident set size of the process in bytes"),
    ("cpu", "gauge", "CPU use of the process in percent since the previous sample"),
    ("uptime_seconds", "gauge", "Seconds since the server started"),
)


_LAKE_REJECTS = "Records of a typed stream in its rejects tables (undecodable or invalid)"
_LAKE_METRICS = (
    ("messages", "Sequences the stream has that its Delta table does not have yet"),
    ("seconds", "Age of the oldest message not yet in the stream's Delta table"),
)


# ---- query parameters ------------------------------------------------------------------------


def _page(req: Request) -> tuple[int, int]:
    offset, limit = max(int_arg(req, "offset"), 0), int_arg(req, "limit")
    return offset, limit if limit > 0 else DEFAULT_LIST_SIZE


# ---- the monitor -----------------------------------------------------------------------------


class Monitor:
    """Serves the reference's monitoring endpoints for one Server."""

    def __init__(
        self, server: Server, host: str | None, port: int, *, lake: LakeSupervisor | None = None
    ) -> None:
        self.server = server
        self.lake = lake
        self.host = host if host is not None else server.opts.host
        self.port = port
        self.http_req_stats: dict[str, int] = {}
        self._cpu = CpuMeter(server.start_time)
        self._http = HttpServer(self._dispatch, self.host, port, name="http monitor")
        self._routes: dict[str, Handler] = {
            "/": self._index,
            "/varz": self._varz,
            "/connz": self._connz,
            "/subsz": self._subsz,
            "/subscriptionsz": self._subsz,
            "/jsz": self._jsz,
            "/healthz": self._healthz,
            "/routez": self._routez,
            "/raftz": self._raftz,
            "/leafz": self._leafz,
            "/gatewayz": self._none,
            "/ipqueuesz": self._ipqueuesz,
            "/stacksz": self._stacksz,
            "/metrics": self._metrics,
        }

    def serve(self, path: str, page: Callable[[Request], Any]) -> None:
        """An endpoint whose document another part of the server makes (an account's,
        which the system account answers over NATS too); `page` raises HttpError for a
        request it refuses."""

        async def handler(req: Request) -> Response:
            return _json(page(req))

        self._routes[path] = handler

    @property
    def _tasks(self) -> set[asyncio.Task[Any]]:
        """The connections being served, so tests can wait for them to drain."""
        return self._http.tasks

    async def start(self) -> None:
        await self._http.start()
        self.port = self._http.port
        log.info("Starting http monitor on %s", hostport(self.host, self.port))

    async def stop(self) -> None:
        await self._http.stop()

    # ---- routing -------------------------------------------------------------------------

    async def _dispatch(self, req: Request) -> Response:
        handler = self._routes.get(req.path)
        if handler is None:
            return Response(404, b"404 page not found\n", TEXT)
        if req.method not in ("GET", "HEAD"):
            return Response(405, b"Method Not Allowed\n", TEXT, {"Allow": "GET, HEAD"})
        self.http_req_stats[req.path] = self.http_req_stats.get(req.path, 0) + 1
        try:
            return await handler(req)
        except HttpError:
            raise
        except Exception:
            log.exception("http monitor: %s failed", req.path)
            return Response(500, b"internal error\n", TEXT)

    # ---- shared values -------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """The one source of the counters /varz, STATSZ and /metrics publish."""
        s = self.server
        return {
            "in_msgs": s.in_msgs,
            "out_msgs": s.out_msgs,
            "in_bytes": s.in_bytes,
            "out_bytes": s.out_bytes,
            **s.client_traffic.totals(),
            "connections": len(s.clients),
            "total_connections": s.total_connections,
            "subscriptions": s.sublist.count,
            **s.trouble.figures(),
            "mem": rss(),
            "cpu": self._cpu.sample(),
            "uptime_seconds": max(time.time() - s.start_time, 0.0),
        }

    def _envelope(self) -> dict[str, Any]:
        return {"server_id": self.server.server_id, "now": timestamp(time.time())}

    async def jetstream_varz(self) -> dict[str, Any] | None:
        """/varz's JetStream block, with the meta group's in a cluster (None: no account
        has JetStream)."""
        js = await jetstream_view(self.server)
        if js is None:
            return None
        block = js.varz()
        if self.server.jetstream_cluster is not None:
            block["meta"] = self.server.jetstream_cluster.meta_info()
        return block

    async def document(self, path: str, options: dict[str, Any]) -> Any:
        """An endpoint's JSON document for the system account's `$SYS.REQ.SERVER.…` requests,
        whose JSON options are the endpoint's query parameters."""
        try:
            response = await self._routes[path](Request("GET", path, query(path, options)))
        except HttpError as e:  # a bad option: the reference answers with the error
            raise RequestError(str(e), code=e.status) from None
        return json.loads(response.body)

    # ---- endpoints -----------------------------------------------------------------------

    async def _index(self, req: Request) -> Response:
        links = "".join(f'<a href="{p}">{p[1:]}</a>\n' for p in self._routes if p != "/")
        body = f'<html lang="en"><body><h1>jetlake</h1>\n{links}</body></html>\n'
        return Response(200, body.encode(), "text/html; charset=utf-8")

    async def _healthz(self, req: Request) -> Response:
        bool_arg(req, "js-enabled-only")
        bool_arg(req, "js-server-only")
        engines = [a.jetstream for a in self.server.accounts if a.jetstream is not None]
        if self.server.opts.jetstream.enabled and self.server.jetstream is None and not engines:
            body = {"status": "unavailable", "status_code": 503, "error": "JetStream not enabled"}
            return _json(body, status=503, indent=None)
        return _json({"status": "ok"}, indent=None)

    async def _varz(self, req: Request) -> Response:
        s, o = self.server, self.server.opts
        st = self.stats()
        js = await self.jetstream_varz()
        tls_timeout = o.tls.timeout if o.tls is not None else 2.0
        v: dict[str, Any] = {
            "server_id": s.server_id,
            "server_name": s.server_name,
            "version": VERSION,
            "proto": 1,
            "go": "jetlake " + JETLAKE_VERSION,  # as in INFO
            "host": o.host,
            "port": s.port,
        }
        if o.server_tags:
            v["tags"] = list(o.server_tags)
        if s.auth.required:
            v["auth_required"] = True
        if s.tls_context is not None and o.tls is not None:
            v["tls_required"] = True
            v["tls_verify"] = bool(o.tls.verify)
        v.update(
            max_connections=o.max_connections,
            ping_interval=int(o.ping_interval * NS),
            ping_max=o.ping_max,
            http_host=self.host,
            http_port=self.port,
            http_base_path="",
            https_port=0,
            auth_timeout=number(o.auth_timeout),
            max_control_line=o.max_control_line,
            max_payload=o.max_payload,
            max_pending=o.max_pending,
            cluster={} if s.cluster is None else varz_cluster(s.cluster),
            gateway={},
            leaf={} if s.leafnodes is None else s.leafnodes.varz(),
            mqtt={} if s.mqtt is None else s.mqtt.varz(),
            websocket={} if s.websocket is None else s.websocket.varz(),
            jetstream=js or {},
            tls_timeout=number(tls_timeout),
            **({"connect_urls": s.client_urls()} if s.client_urls() else {}),
            write_deadline=int(o.write_deadline * NS),
            start=timestamp(s.start_time),
            now=timestamp(time.time()),
            uptime=uptime(st["uptime_seconds"]),
            mem=st["mem"],
            cores=os.cpu_count() or 1,
            gomaxprocs=os.cpu_count() or 1,
            cpu=st["cpu"],
            connections=st["connections"],
            total_connections=st["total_connections"],
            routes=0 if s.cluster is None else len(s.cluster.routes),
            remotes=0 if s.cluster is None else len(s.cluster.routes),
            leafnodes=0 if s.leafnodes is None else s.leafnodes.leafz()["leafnodes"],
        )
        traffic = ("in_msgs", "in_bytes", "out_msgs", "out_bytes", *CLIENT_FIGURES)
        v.update({k: st[k] for k in traffic})
        v.update(
            slow_consumers=st["slow_consumers"],
            stale_connections=st["stale_connections"],
            stalled_clients=st["stalled_clients"],
            subscriptions=st["subscriptions"],
            http_req_stats=dict(self.http_req_stats),
            config_load_time=timestamp(s.config_load_time),
            config_digest=o.config_digest,
            system_account=s.accounts.system_account.name,
            slow_consumer_stats=st["slow_consumer_stats"],
            stale_connection_stats=st["stale_connection_stats"],
        )
        return _json(v)

    async def _connz(self, req: Request) -> Response:
        s = self.server
        now = time.time()
        sort = req.arg("sort") or "cid"
        auth = bool_arg(req, "auth")
        subs = "detail" if req.arg("subs") == "detail" else ("1" if bool_arg(req, "subs") else "")
        offset, limit = _page(req)
        cid = int_arg(req, "cid")
        state = req.arg("state") or "open"
        if state not in ("open", "closed", "any", "all"):
            raise HttpError(400, f"Error decoding state for {state}")
        if sort not in ASCENDING and sort not in DESCENDING:
            raise HttpError(400, f"invalid sorting option: {sort}")
        if sort in ("stop", "reason") and state == "open":
            raise HttpError(400, f"sort by {sort} only valid on closed connections")
        conns: list[Conn] = []
        if state != "closed":
            conns.extend(Conn(c) for c in list(s.clients.values()))
            if s.mqtt is not None:
                conns.extend(Conn(c) for c in list(s.mqtt.connections.values()))
        if state != "open":
            for rec in list(s.closed_clients):
                conns.append(Conn(rec["client"], float(rec["stop"]), str(rec["reason"])))
        if req.arg("acc"):  # one account's; an unknown one's page is empty, as the reference's
            account = s.accounts.get(req.arg("acc"))
            if account is None:
                out = {"server_id": "", "now": timestamp(now), "num_connections": 0, "total": 0}
                return _json({**out, "offset": offset, "limit": limit, "connections": None})
            conns = [c for c in conns if c.client.account is account]
        if cid > 0:
            conns = [c for c in conns if c.client.cid == cid]
            offset, limit = 0, 1
        if sort in ASCENDING:
            conns.sort(key=lambda c: ASCENDING[sort](c, now))
        else:
            conns.sort(key=lambda c: DESCENDING[sort](c, now), reverse=True)
        page = conns[offset : offset + limit]
        out = self._envelope()
        out.update(num_connections=len(page), total=len(conns), offset=offset, limit=limit)
        out["connections"] = [conn_info(c, now, subs, auth) for c in page]
        return _json(out)

    async def _subsz(self, req: Request) -> Response:
        sublist: Any = self.server.sublist
        clients = list(self.server.clients.values())
        if req.arg("acc"):  # one account's trie (an unknown account's is empty)
            account = self.server.accounts.get(req.arg("acc"))
            sublist = account.sublist if account is not None else None
            clients = [c for c in clients if c.account is account]
        detail = bool_arg(req, "subs")
        offset, limit = _page(req)
        out = self._envelope()
        out.update(sublist_stats(sublist))
        subs: list[dict[str, Any]] = []
        if detail:  # client subscriptions; internal ones (JetStream's) are not enumerable
            for client in clients:
                subs += [sub_detail(sub, client.cid, account=True) for sub in client.subs.values()]
        out.update(total=len(subs), offset=offset, limit=limit)
        if subs:
            out["subscriptions_list"] = subs[offset : offset + limit]
        return _json(out)

    async def _jsz(self, req: Request) -> Response:
        options = {name: bool_arg(req, name) for name in ("streams", "consumers", "config", "raft")}
        # each engine read once for both uses
        accounts = await account_views(
            self.server, consumers=options["consumers"], config=options["config"]
        )
        js = combined([view for _, view in accounts], raft_groups(self.server))
        if js is None:
            out: dict[str, Any] = {
                "memory": 0,
                "storage": 0,
                "reserved_memory": 0,
                "reserved_storage": 0,
                "accounts": 0,
                "ha_assets": 0,
                "api": {"level": 0, "total": 0, "errors": 0},
            }
            out.update(self._envelope())
            out.update(disabled=True, config={"max_memory": 0, "max_storage": 0})
            out.update(streams=0, consumers=0, messages=0, bytes=0, total=0)
            return _json(out)
        out = dict(js.stats)
        out.update(self._envelope())
        out["config"] = js.config
        if js.limits is not None:
            out["limits"] = js.limits
        out.update(js.totals())
        if self.server.jetstream_cluster is not None:
            out["meta_cluster"] = self.server.jetstream_cluster.meta_info()
        if options["streams"] or options["consumers"] or bool_arg(req, "accounts"):
            out["account_details"] = [account_detail(n, view, options) for n, view in accounts]
        out["total"] = int(js.stats.get("accounts", 1 if js.streams else 0))
        if self.lake is not None:  # jetlake's own: the reference has no lake
            out["lake"] = self.lake.status()
        return _json(out)

    async def _routez(self, req: Request) -> Response:
        if self.server.cluster is None:
            return await self._none(req)
        return _json(routez(self.server.cluster, subs=bool_arg(req, "subs")))

    async def _raftz(self, req: Request) -> Response:
        """The Raft groups on this server, by account; `acc` (default: the system
        account) and `group` narrow them. A server with none is a 404, as on the
        reference; over NATS, an answer without `data`."""
        groups = self.raftz(req.arg("acc") or None, req.arg("group") or None)
        if groups is None:
            raise HttpError(404, "No Raft nodes registered")
        return _json(groups)

    def raftz(self, account: str | None, group: str | None) -> dict[str, Any] | None:
        cluster = self.server.jetstream_cluster
        return cluster.raftz(account, group) if cluster is not None else None

    async def _ipqueuesz(self, req: Request) -> Response:
        """The reference's internal queues: jetlake has none to list."""
        return _json({})

    async def _stacksz(self, req: Request) -> Response:
        """Every thread's stack and every task's on the event loop: the reference's
        goroutine dump, for a server that hangs or spins (read without a debugger)."""
        out = io.StringIO()
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            out.write(f"thread {ident} [{names.get(ident, '?')}]:\n")
            out.writelines(traceback.format_stack(frame))
            out.write("\n")
        for task in asyncio.all_tasks():
            task.print_stack(file=out)
            out.write("\n")
        return Response(200, out.getvalue().encode(), TEXT)

    async def _leafz(self, req: Request) -> Response:
        leafnodes = self.server.leafnodes
        if leafnodes is None:
            return await self._none(req)
        out = self._envelope()
        out.update(leafnodes.leafz(subs=bool_arg(req, "subs"), account=req.arg("acc") or None))
        return _json(out)

    async def _none(self, req: Request) -> Response:
        """Routes, leaf nodes, gateways: jetlake has none; exporters still poll for them."""
        out = self._envelope()
        if req.path == "/routez":
            out = {"server_id": self.server.server_id, "server_name": self.server.server_name}
            out.update(now=timestamp(time.time()), num_routes=0, routes=[])
        elif req.path == "/leafz":
            out.update(leafnodes=0, leafs=[])
        else:
            out.update(outbound_gateways={}, inbound_gateways={})
        return _json(out)

    async def _metrics(self, req: Request) -> Response:
        st = self.stats()
        sid = _label(self.server.server_id)
        lines: list[str] = []
        for key, kind, text in STATS:
            name = f"jetlake_varz_{key}"
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            lines.append(f'{name}{{server_id="{sid}"}} {_sample(st[key])}')
        js = await jetstream_view(self.server)
        if js is not None and js.streams:
            for key, text in (("messages", "Messages stored"), ("bytes", "Bytes stored")):
                name = f"jetlake_stream_{key}"
                lines += [f"# HELP {name} {text} in the stream", f"# TYPE {name} gauge"]
                for stream in js.streams:
                    value = int(js.state(stream).get(key, 0))
                    label = _label(str(stream.get("name", "")))
                    lines.append(f'{name}{{server_id="{sid}",stream="{label}"}} {value}')
        if self.lake is not None and self.lake.lags:
            for key, text in _LAKE_METRICS:
                name = f"jetlake_lake_lag_{key}"
                lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
                for lag in self.lake.lags.values():
                    value = lag.messages if key == "messages" else lag.seconds
                    label = _label(lag.stream)
                    lines.append(f'{name}{{server_id="{sid}",stream="{label}"}} {_sample(value)}')
            typed = {s: self.lake.typing(s) for s in self.lake.lags}
            typed = {s: t for s, t in typed.items() if t}
            if typed:
                name = "jetlake_lake_rejects"
                lines += [f"# HELP {name} {_LAKE_REJECTS}", f"# TYPE {name} gauge"]
                for stream, typing in typed.items():
                    value = int(typing.get("rejects", 0))
                    lines.append(f'{name}{{server_id="{sid}",stream="{_label(stream)}"}} {value}')
        return Response(200, ("\n".join(lines) + "\n").encode(), PROMETHEUS)


# ---- helpers ---------------------------------------------------------------------------------


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample(value: float) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


def _json(body: Any, *, status: int = 200, indent: int | None = 2) -> Response:
    text = json.dumps(body, indent=indent, ensure_ascii=False, separators=_SEPARATORS[indent])
    return Response(status, text.encode(), JSON, {"Access-Control-Allow-Origin": "*"})


_SEPARATORS: dict[int | None, tuple[str, str]] = {None: (",", ":"), 2: (",", ": ")}
