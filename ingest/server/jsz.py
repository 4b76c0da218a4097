"""JetStream as the monitor reads it (/varz, /jsz, /metrics): every account's engine.

Streams live in whichever account a user put them in, usually a named one beside a
system account; the endpoints add every account's engine up and list each account
that JetStream serves, as the reference does.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ingest.server.accounts.settings import GLOBAL_ACCOUNT

if TYPE_CHECKING:
    from ingest.server.server import Server


@dataclass(frozen=True, slots=True)
class JetStreamView:
    """What JetStream.info() told us, normalised for /varz, /jsz and /metrics."""

    config: dict[str, Any]
    stats: dict[str, Any]
    limits: dict[str, Any] | None
    streams: list[dict[str, Any]]

    @staticmethod
    def state(stream: dict[str, Any]) -> dict[str, Any]:
        state = stream.get("state")
        return state if isinstance(state, dict) else stream

    def varz(self) -> dict[str, Any]:
        out: dict[str, Any] = {"config": self.config, "stats": self.stats}
        return out if self.limits is None else {**out, "limits": self.limits}

    def totals(self) -> dict[str, int]:
        states = [self.state(s) for s in self.streams]
        return {
            "streams": len(self.streams),
            "consumers": sum(int(s.get("consumer_count", 0)) for s in states),
            "messages": sum(int(s.get("messages", 0)) for s in states),
            "bytes": sum(int(s.get("bytes", 0)) for s in states),
        }


async def jetstream_view(server: Server) -> JetStreamView | None:
    """The server's JetStream as a whole: every account's engine added up."""
    return combined([view for _, view in await account_views(server)], raft_groups(server))


def raft_groups(server: Server) -> int:
    """`ha_assets`: the Raft groups the server runs (none outside a cluster)."""
    cluster = server.jetstream_cluster
    return 0 if cluster is None else int(cluster.raft_groups())


def combined(views: list[JetStreamView], ha_assets: int = 0) -> JetStreamView | None:
    """Several accounts' views as one, with the server's `ha_assets` (None: no account
    has JetStream)."""
    if not views:
        return None
    stats = dict(views[0].stats)
    for key in ("memory", "storage", "reserved_memory", "reserved_storage"):
        stats[key] = sum(int(v.stats.get(key, 0)) for v in views)
    stats["ha_assets"] = ha_assets
    stats["accounts"] = len(views)
    api = dict(stats.get("api") or {})
    for key in ("total", "errors"):
        api[key] = sum(int((v.stats.get("api") or {}).get(key, 0)) for v in views)
    stats["api"] = api
    streams = [s for v in views for s in v.streams]
    return JetStreamView(
        config=views[0].config, stats=stats, limits=views[0].limits, streams=streams
    )


async def account_views(
    server: Server, *, consumers: bool = False, config: bool = False
) -> list[tuple[str, JetStreamView]]:
    """Every account's engine by account name, the global one's first; the global
    account is left out when others have engines and it holds no stream, as the
    reference lists only the accounts JetStream serves."""
    engines = [(GLOBAL_ACCOUNT, server.jetstream)] if server.jetstream is not None else []
    engines += [
        (a.name, a.jetstream)
        for a in server.accounts
        if a.jetstream is not None and a.jetstream is not server.jetstream
    ]
    views = []
    for name, js in engines:
        view = await engine_view(js, consumers=consumers, config=config)
        if view is not None:
            views.append((name, view))
    if len(views) > 1:
        views = [(n, v) for n, v in views if n != GLOBAL_ACCOUNT or v.streams]
    return views


async def engine_view(
    js: Any, *, consumers: bool = False, config: bool = False
) -> JetStreamView | None:
    """One account's engine as the monitor reads it (with its consumers' infos and its
    streams' configs when asked)."""
    if js is None or not hasattr(js, "info"):
        return None
    if hasattr(js, "monitor_info"):
        info = js.monitor_info(consumers=consumers, config=config)
    else:
        info = js.info()
    if inspect.isawaitable(info):
        info = await info
    if not isinstance(info, dict):
        return None
    streams = info.get("streams")
    return JetStreamView(
        config=dict(info.get("config") or {}),
        stats=dict(info.get("stats") or {}),
        limits=info.get("limits"),
        streams=[s for s in streams if isinstance(s, dict)] if isinstance(streams, list) else [],
    )


def account_detail(name: str, js: JetStreamView, options: Mapping[str, Any]) -> dict[str, Any]:
    """An `account_details` entry as `/jsz`'s options shape it, of a view read with the
    same options: `streams` (implied by `consumers`) lists the streams, `consumers` their
    consumers, `config` keeps the consumers' configs (the streams' are only read when
    asked for) and `raft` the streams' groups."""
    detail: dict[str, Any] = {"name": name, "id": name, **js.stats}
    if options.get("streams") or options.get("consumers"):
        config = bool(options.get("config"))
        hidden = set() if options.get("raft") else {"stream_raft_group"}
        detail["stream_detail"] = [
            {k: _without_config(v) if k == "consumer_detail" and not config else v
             for k, v in s.items() if k not in hidden}
            for s in js.streams
        ]  # fmt: skip
    return detail


def _without_config(infos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in info.items() if k != "config"} for info in infos]
