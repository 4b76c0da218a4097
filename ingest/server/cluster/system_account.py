"""The system account's services: `$SYS.REQ.SERVER.PING…`, `$SYS.REQ.SERVER.<id>.…` and
`$SYS.REQ.ACCOUNT.…` (their documents in `account_requests`).

Operators run `nats server list`, `nats server report jetstream` and friends as a
system-account user; the CLI publishes one request and gathers the answers of
every server. So each server subscribes in the system account and *announces*
those subscriptions to its routes: a PING published on any server reaches every
server across the mesh (in the system account, as RMSG names it), and each one
answers the requester's inbox, which its own route interest leads back.

Each answer is `{"server": <envelope>, "<data key>": …}`, the envelope as
`SystemServices` builds it, or `{"server": …, "data": null, "error": {code,
description}}`; the documents are the monitoring endpoints' own. IDZ (who answers) and
an account's CONNS (its `account_connections` event) are bare, as on the reference.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ingest.server.cluster.ports import RequestError, Skip
from ingest.server.gofmt import timestamp

if TYPE_CHECKING:
    from ingest.server.cluster.ports import (
        AccountDocuments,
        Documents,
        Envelope,
        SystemHost,
    )

log = logging.getLogger("jetlake")

PING = "$SYS.REQ.SERVER.PING"
STATSZ_EVENT = "$SYS.SERVER.{id}.STATSZ"
# As the reference: the first event soon after start, then ever less often, up to 10 s.
STATSZ_FIRST, STATSZ_EVERY = 0.25, 10.0
_BY_ID = "$SYS.REQ.SERVER.{id}.{kind}"
_ACCOUNT = "$SYS.REQ.ACCOUNT.*.{kind}"
# Asked of one server by id: a client closed, or told its server is going away; the
# configuration file read again.
_ACTIONS = ("KICK", "LDM", "RELOAD")
ACCOUNT_KINDS = ("SUBSZ", "CONNZ", "LEAFZ", "JSZ", "INFO", "STATZ", "CONNS")
PING_STATZ = "$SYS.REQ.ACCOUNT.PING.STATZ"
# Request kind -> (key of the answer's document, monitoring path or None for statsz).
_KINDS: dict[str, tuple[str, str | None]] = {
    "STATSZ": ("statsz", None),
    "VARZ": ("data", "/varz"),
    "CONNZ": ("data", "/connz"),
    "SUBSZ": ("data", "/subsz"),
    "ROUTEZ": ("data", "/routez"),
    "HEALTHZ": ("data", "/healthz"),
    "JSZ": ("data", "/jsz"),
    "IDZ": ("", None),
    "LEAFZ": ("data", "/leafz"),
    "GATEWAYZ": ("data", "/gatewayz"),
    "RAFTZ": ("data", None),
    "ACCOUNTZ": ("data", None),
    "IPQUEUESZ": ("data", "/ipqueuesz"),
}
# Filters a PING may carry (the reference's event filter options) -> envelope field.
_FILTERS = {"server_name": "name", "cluster": "cluster", "host": "host"}

Answer = Callable[[dict[str, Any]], Awaitable[Any]]


class SystemAccount:
    def __init__(
        self,
        server: SystemHost,
        system: Envelope,
        monitor: Documents,
        accounts: AccountDocuments,
        reload: Callable[[], str | None],
    ) -> None:
        self._server = server
        self._system = system
        self._monitor = monitor
        self._accounts = accounts
        self._reload = reload  # why a reload was refused, None once applied
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        server = self._server
        account = server.accounts.system_account
        subjects = {PING: "STATSZ"}
        for kind in _KINDS:
            subjects[f"{PING}.{kind}"] = kind
            subjects[_BY_ID.format(id=server.server_id, kind=kind)] = kind
        for kind in _ACTIONS:
            subjects[_BY_ID.format(id=server.server_id, kind=kind)] = kind
        for kind in ACCOUNT_KINDS:
            subjects[_ACCOUNT.format(kind=kind)] = "ACCOUNT." + kind
        subjects[PING_STATZ] = "ACCOUNTS.STATZ"
        for subject, kind in subjects.items():
            sub = server.subscribe(subject, self._handler(kind), account=account)
            server.announce(sub)
        task = asyncio.get_running_loop().create_task(self._statsz_events())
        self._tasks.add(task)

    async def _statsz_events(self) -> None:
        """What `nats server` watchers and the JetStream meta leader (placement by free
        storage) read of each server, unasked."""
        server, delay = self._server, STATSZ_FIRST
        subject = STATSZ_EVENT.format(id=server.server_id)
        while True:
            await asyncio.sleep(delay)
            delay = min(delay * 2, STATSZ_EVERY)
            body = {"server": self._system.envelope(), "statsz": await self.statsz()}
            data = json.dumps(body, separators=(",", ":")).encode()
            server.publish(subject, None, None, data, account=server.accounts.system_account)

    def _handler(self, kind: str) -> Callable[[str, str | None, bytes | None, bytes], None]:
        def on_request(subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
            if not reply:
                return
            if kind == "IDZ":  # takes no options
                data = b""
            try:
                options = json.loads(data) if data.strip() else {}
                if not isinstance(options, dict):
                    raise ValueError(f"options must be a JSON object, not {data[:32]!r}")
            except ValueError as e:  # refused as the reference refuses it (CONNS: unanswered)
                if kind != "ACCOUNT.CONNS":
                    error = {"code": 400, "description": f"invalid JSON options: {e}"}
                    self._send(reply, {"server": self._system.envelope(), "error": error})
                return
            if kind == "ACCOUNT.CONNS":  # no filters: a bare event where the account has clients
                name = subject.split(".")[3]
                if options.get("acc", name) == name:
                    self._accounts.conns(name, reply)
                return
            if kind != "IDZ" and not self._selected(options):
                return
            task = asyncio.get_running_loop().create_task(
                self._answer(kind, subject, reply, options)
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        return on_request

    def _selected(self, options: dict[str, Any]) -> bool:
        """Whether this server answers a PING that names servers (substring unless exact)."""
        envelope = {"name": self._server.server_name, "host": self._server.opts.host}
        if self._server.cluster is not None:
            envelope["cluster"] = self._server.cluster.name
        exact = bool(options.get("exact_match"))
        for option, field in _FILTERS.items():
            wanted = options.get(option)
            if isinstance(wanted, str) and wanted:
                value = envelope.get(field, "")
                if (value != wanted) if exact else (wanted not in value):
                    return False
        return True

    async def _answer(self, kind: str, subject: str, reply: str, options: dict[str, Any]) -> None:
        server = self._server
        body: dict[str, Any]
        if kind == "IDZ":
            body = {"name": server.server_name, "host": server.opts.host, "id": server.server_id}
        elif kind in _ACTIONS:  # no data: done, or an error
            body = {"server": self._system.envelope()}
            try:
                self._act(kind, options.get("cid"))
            except RequestError as e:
                body["error"] = {"code": e.code, "description": str(e)}
        else:
            try:
                key, document = await self._document(kind, subject, options)
                body = {"server": self._system.envelope()}
                if document is not None:
                    body[key] = document
            except Skip:
                return
            except RequestError as e:
                error = {"code": e.code, "description": str(e)}
                body = {"server": self._system.envelope(), "data": None, "error": error}
        self._send(reply, body)

    def _act(self, kind: str, cid: Any) -> None:
        """KICK closes a client or leafnode link (`Kicked`); LDM sends a client the INFO
        that says this server is going away, so it reconnects elsewhere; RELOAD is SIGHUP's
        reload."""
        server = self._server
        if kind == "RELOAD":
            refusal = self._reload()
            if refusal is not None:
                raise RequestError(refusal)
            return
        client = server.clients.get(cid) if type(cid) is int else None
        if kind == "LDM":
            if client is None:
                raise RequestError("no such client id")
            if not client.takes_async_info:
                raise RequestError(
                    "client does not support Lame Duck Mode or is not ready to receive the "
                    "notification"
                )
            client.queue(server.info_for(client, ldm=True))
            server.flush_dirty()
            return
        if client is not None:
            client.close_with("Kicked")
            return
        links = server.leafnodes.connections if server.leafnodes is not None else ()
        link = next((c for c in links if c.cid == cid), None)
        if link is None:
            raise RequestError("no such client or leafnode id")
        link.close("Kicked", flush=True)

    def _send(self, reply: str, body: dict[str, Any]) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        server = self._server
        server.publish(reply, None, None, data, account=server.accounts.system_account)

    async def _document(self, kind: str, subject: str, options: dict[str, Any]) -> tuple[str, Any]:
        """(key of the answer's document, the document)."""
        if kind.startswith("ACCOUNT."):
            name = subject.split(".")[3]
            return "data", await self._accounts.document(kind[8:], name, options)
        if kind == "ACCOUNTS.STATZ":
            names = options.get("accounts")
            chosen = [n for n in names if isinstance(n, str)] if isinstance(names, list) else None
            unused = bool(options.get("include_unused"))
            return "data", self._accounts.statz(chosen, include_unused=unused)
        key, path = _KINDS[kind]
        if kind == "STATSZ":
            return key, await self.statsz()
        if kind == "ACCOUNTZ":
            return key, self._accounts.accountz(options)
        if kind == "RAFTZ":  # the reference's option names; None: no `data`
            return key, self._monitor.raftz(options.get("account"), options.get("group"))
        assert path is not None
        return key, await self._monitor.document(path, options)

    # ---- documents ----------------------------------------------------------------------

    async def statsz(self) -> dict[str, Any]:
        server = self._server
        stats = self._monitor.stats()
        out: dict[str, Any] = {
            "start": timestamp(server.start_time),
            "mem": stats["mem"],
            "cores": os.cpu_count() or 1,
            "cpu": stats["cpu"],
            "connections": stats["connections"],
            "total_connections": stats["total_connections"],
            "active_accounts": sum(1 for a in server.accounts if a.sublist.count),
            "subscriptions": sum(a.sublist.count for a in server.accounts),
            "sent": {"msgs": server.out_msgs, "bytes": server.out_bytes},
            "sent_to_clients": _data(stats, "out_client"),
            "received": {"msgs": server.in_msgs, "bytes": server.in_bytes},
            "received_from_clients": _data(stats, "in_client"),
            "slow_consumers": stats["slow_consumers"],
        }
        # by kind only when any is not 0, and the totals of the others likewise
        for key in ("slow_consumer_stats", "stale_connection_stats"):
            if any(stats[key].values()):
                out[key] = stats[key]
        for key in ("stale_connections", "stalled_clients"):
            if stats[key]:
                out[key] = stats[key]
        cluster = server.cluster
        if cluster is not None:
            out["routes"] = [
                {
                    "rid": route.rid,
                    "name": route.remote_name,
                    "sent": {"msgs": route.out_msgs, "bytes": route.out_bytes},
                    "received": {"msgs": route.in_msgs, "bytes": route.in_bytes},
                    "pending": route.pending(),
                }
                for route in sorted(cluster.routes.values(), key=lambda r: r.rid)
            ]
        out["active_servers"] = 1 + (len(cluster.routes) if cluster is not None else 0)
        block = await self._monitor.jetstream_varz()
        if block is not None:  # /varz's block without the store directory
            block["config"] = {k: v for k, v in block["config"].items() if k != "store_dir"}
            out["jetstream"] = block
        out["gomaxprocs"] = os.cpu_count() or 1
        return out


def _data(stats: dict[str, Any], prefix: str) -> dict[str, int]:
    """STATSZ's `{msgs, bytes}` from /varz's `<prefix>_msgs` and `<prefix>_bytes`."""
    return {"msgs": stats[f"{prefix}_msgs"], "bytes": stats[f"{prefix}_bytes"]}
