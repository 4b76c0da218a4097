"""What the system account answers about one account, `$SYS.REQ.ACCOUNT.<account>.<kind>`,
and about every account with connections here, `$SYS.REQ.ACCOUNT.PING.STATZ`.

Operators ask them as a system user (`nats server request …`, monitoring scripts); a
user of another account reaches its own CONNZ and STATZ through the system imports
(`accounts/system_imports.py`). Every server of the cluster answers for what the
account has on it. The documents are the monitoring endpoints' own narrowed to the
account (`/connz?acc=`, `/subsz?acc=`, `/leafz?acc=`, the account's `/jsz` entry),
the account's INFO and its STATZ. An unknown account is answered as the reference
answers it: an empty CONNZ, SUBSZ or LEAFZ, an error for INFO and JSZ, silence for
STATZ and CONNS (as for an account without connections here, unless asked for
`include_unused`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ingest.server.accounts.config_sharing import find_export
from ingest.server.accounts.events import name_tag
from ingest.server.accounts.settings import HEADERS_SAMPLING, STREAM
from ingest.server.accounts.system_imports import EXPORTS, imports
from ingest.server.cluster.ports import RequestError, Skip
from ingest.server.connz import sublist_stats
from ingest.server.gofmt import timestamp
from ingest.server.httpd import HttpError, Request, bool_arg
from ingest.server.jsz import account_detail, engine_view

if TYPE_CHECKING:
    from ingest.server.accounts.conns import ClusterConns
    from ingest.server.accounts.registry import Account
    from ingest.server.accounts.settings import Export, Import, Latency
    from ingest.server.cluster.ports import Documents, SystemHost

_RESPONSE_TYPES = {STREAM: "Streamed"}  # as the reference's INFO spells it


class AccountRequests:
    def __init__(self, server: SystemHost, monitor: Documents, counts: ClusterConns) -> None:
        self._server = server
        self._monitor = monitor
        self._counts = counts

    async def document(self, kind: str, name: str, options: dict[str, Any]) -> Any:
        """The `data` of an answer about account `name`; raises Skip or RequestError."""
        server = self._server
        account = server.accounts.get(name)
        if kind in ("CONNZ", "SUBSZ", "LEAFZ"):
            # The subject names the account, whatever the options say (/connz's JSON name
            # for it is `acc`, the others' `account`).
            query = {k: v for k, v in options.items() if k not in ("acc", "account")}
            if kind == "CONNZ":
                query["acc"] = name
            else:
                query.update(account=name, subscriptions=kind == "SUBSZ")
            path = {"CONNZ": "/connz", "SUBSZ": "/subsz", "LEAFZ": "/leafz"}[kind]
            return await self._monitor.document(path, query)
        if kind == "STATZ":
            if name == "PING":  # the ping's own subject, which `*` matches too
                raise Skip
            return self.statz([name], include_unused=bool(options.get("include_unused")))
        if kind == "JSZ":
            return await self._jsz(name, account, options)
        if account is None:
            raise RequestError(f"Account {name} does not exist")
        return self.info(account)

    async def _jsz(self, name: str, account: Account | None, options: dict[str, Any]) -> Any:
        if not any(a.jetstream is not None for a in self._server.accounts):
            raise RequestError("jetstream not enabled")
        if account is None:
            raise RequestError(f'account "{name}" not found')
        view = await engine_view(
            account.jetstream,
            consumers=bool(options.get("consumers")),
            config=bool(options.get("config")),
        )
        if view is None:
            raise RequestError(f'account "{name}" not jetstream enabled')
        detail = account_detail(name, view, options)
        if not view.streams:
            detail.pop("stream_detail", None)
        return detail

    def statz(self, names: list[str] | None, *, include_unused: bool) -> dict[str, Any]:
        """The figures of the accounts named (None: all) that have connections or leafnode
        links here; Skip when none has and unused ones were not asked for."""
        accounts = self._server.accounts
        chosen = list(accounts) if not names else [accounts.get(n) for n in names]
        entries = [
            self._counts.statz(account)
            for account in chosen
            if account is not None
            and (include_unused or account.clients or self._counts.leafnodes(account))
        ]
        if not entries and not include_unused:
            raise Skip
        return self._stamped(account_statz=entries)

    def _stamped(self, **fields: Any) -> dict[str, Any]:
        """A document as this server gives it now: its id and the time first."""
        return {"server_id": self._server.server_id, "now": timestamp(time.time()), **fields}

    def accountz(self, options: dict[str, Any]) -> dict[str, Any]:
        """ACCOUNTZ: the accounts' names, or with `{"account": name}` that one's INFO."""
        server = self._server
        out = self._stamped(system_account=server.accounts.system_account.name)
        name = options.get("account")
        if not name:
            return {**out, "accounts": [account.name for account in server.accounts]}
        account = server.accounts.get(str(name))
        if account is None:
            raise RequestError(f"Account {name} does not exist")
        return {**out, "account_detail": self.info(account)}

    def accountz_page(self, req: Request) -> dict[str, Any]:
        """`/accountz`, `/accountz?acc=<account>`: ACCOUNTZ over HTTP."""
        try:
            return self.accountz({"account": req.arg("acc")})
        except RequestError as e:
            raise HttpError(400, str(e)) from None

    def accstatz_page(self, req: Request) -> dict[str, Any]:
        """`/accstatz`: every account with connections here (`unused=1`: every account)."""
        try:
            return self.statz(None, include_unused=bool_arg(req, "unused"))
        except Skip:
            return self._stamped(account_statz=[])

    def conns(self, name: str, reply: str) -> None:
        """`…CONNS`: the account's `account_connections` event to `reply`, from a server
        where it has clients."""
        account = self._server.accounts.get(name)
        if account is not None and account.clients:
            self._counts.send(account, reply)

    def info(self, account: Account) -> dict[str, Any]:
        """The account as the reference's INFO describes it: what a config file defines,
        or its JWT in operator mode (without the imports and exports the JWT grants, its
        revocations or mappings)."""
        server = self._server
        system = server.accounts.system_account
        config = next((c for c in server.opts.accounts if c.name == account.name), None)
        exports = [_export(e) for e in (config.exports if config is not None else ())]
        if account is system:
            exports += [_export(e) for e in EXPORTS]
        found = [
            _import(i, self._export_of(i, account.name))
            for i in (config.imports if config is not None else ())
        ]
        found += [_import(i, export) for i, export in imports(account.name, system.name)]
        leafnodes = self._counts.leafnodes(account)
        out: dict[str, Any] = {
            "account_name": account.name,
            "update_time": timestamp(server.start_time),
        }
        if account is system:
            out["is_system"] = True
        out.update(
            expired=False,
            complete=True,
            jetstream_enabled=account.jetstream is not None,
            leafnode_connections=leafnodes,
            client_connections=len(account.clients),
            subscriptions=account.sublist.count,
        )
        if exports:
            out["exports"] = exports
        if found:
            out["imports"] = found
        resolver = server.resolver
        claims = resolver.store.get(account.name) if resolver is not None else None
        if claims is not None:  # operator mode: the account's JWT
            out["expired"] = claims.expired(time.time())
            out.update(jwt=claims.token, issuer_key=claims.issuer)
        out["name_tag"] = name_tag(resolver, account)
        if claims is not None:
            if claims.nats.get("tags"):
                out["tags"] = claims.nats["tags"]
            out["decoded_jwt"] = claims.payload()
        out["sublist_stats"] = sublist_stats(account.sublist)
        return out

    def _export_of(self, imp: Import, importer: str) -> Export | None:
        """The configured export an import takes (its latency is the import's)."""
        exporter = next((c for c in self._server.opts.accounts if c.name == imp.account), None)
        return find_export(exporter, imp, importer) if exporter is not None else None


def _latency(latency: Latency | None) -> dict[str, Any]:
    if latency is None:
        return {}
    sampling: int | str = "headers" if latency.sampling == HEADERS_SAMPLING else latency.sampling
    return {"sampling": sampling, "results": latency.subject}


def _export(export: Export) -> dict[str, Any]:
    out: dict[str, Any] = {
        "subject": export.subject,
        "type": "service" if export.service else "stream",
    }
    if export.service:
        out["response_type"] = _RESPONSE_TYPES.get(export.response_type, export.response_type)
        if export.latency is not None:
            out["service_latency"] = _latency(export.latency)
    if export.accounts:
        out["approved_accounts"] = list(export.accounts)
    return out


def _import(imp: Import, export: Export | None) -> dict[str, Any]:
    out: dict[str, Any] = {"subject": imp.subject, "account": imp.account}
    if imp.service:
        local = imp.to or imp.subject
        out.update(to=local, local_subject=local, type="service")
    else:
        local = imp.to or (imp.prefix.rstrip(".") + "." + imp.subject if imp.prefix else "")
        # A mapping's `$1` or `{{wildcard(1)}}` tokens read as the wildcards they fill.
        tokens = (local or imp.subject).split(".")
        out["local_subject"] = ".".join("*" if t[:1] in ("$", "{") else t for t in tokens)
        out["type"] = "stream"
    out.update(invalid=False, share=imp.service and imp.subject.startswith("$SYS.REQ.USER."))
    out["tracking"] = False
    if imp.service and export is not None and export.latency is not None:
        out["latency"] = _latency(export.latency)
    return out
