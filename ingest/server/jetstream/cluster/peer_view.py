"""What this server knows of the cluster's JetStream servers: which it reaches, their
tags and their free storage. Placement decides by these, and they come from two
sources that live apart from the meta group: the routes (names, tags) and the
servers' STATSZ events (storage)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

from ingest.server.cluster.system_account import PING
from ingest.server.jetstream.cluster.placement import STORAGE_KEYS

if TYPE_CHECKING:
    from ingest.server.server import Server

STATSZ_EVENTS = "$SYS.SERVER.*.STATSZ"
STATSZ_ANSWERS = "_INBOX.{id}.jsc.statsz"  # the servers' answers to a new meta leader's ping
STATSZ_WAIT = 1.0  # how long a placement by room waits to hear from every server


class PeerView:
    def __init__(self, server: Server) -> None:
        self.server = server
        self._tags: dict[str, frozenset[str]] = {}
        self._stats: dict[str, dict[str, Any]] = {}  # server -> its STATSZ `jetstream` block

    def start(self) -> None:
        server = self.server
        system = server.accounts.system_account
        answers = STATSZ_ANSWERS.format(id=server.server_id)
        for subject in (STATSZ_EVENTS, answers):
            server.announce(server.subscribe(subject, self._on_statsz, account=system))
        server.cluster_listeners.append(self._learn_tags)

    def online(self) -> set[str]:
        """JetStream servers this one reaches now (itself included)."""
        peers = {self.server.server_name}
        cluster = self.server.cluster
        if cluster is not None:
            peers |= {
                r.remote_name
                for r in cluster.routes.values()
                if r.remote_info.get("jetstream") and r.remote_name
            }
        return peers

    def tags(self) -> dict[str, frozenset[str]]:
        """Each server's `server_tags`, as its routes announced them."""
        self._learn_tags()
        return self._tags

    def available(self, storage: str) -> dict[str, int]:
        """Each server's free storage of that kind, as its latest STATSZ event said."""
        size, used = STORAGE_KEYS[storage]
        free: dict[str, int] = {}
        for name, js in self._stats.items():
            with contextlib.suppress(KeyError, TypeError, ValueError):
                free[name] = int(js["config"][size]) - int(js["stats"][used])
        return free

    async def hear_statsz(self, timeout: float = STATSZ_WAIT) -> None:
        """Until every server reached now has told its storage (or `timeout`): placing by
        room must not take a server it has not heard from yet for an empty one. Its
        first events may have gone out before the routes carried this server's interest."""
        if self.online() <= set(self._stats):
            return
        self.ping_statsz()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.online() <= set(self._stats) and loop.time() < deadline:
            await asyncio.sleep(0.01)

    def ping_statsz(self) -> None:
        """Ask every server for its STATSZ now instead of at its next event."""
        system = self.server.accounts.system_account
        answers = STATSZ_ANSWERS.format(id=self.server.server_id)
        self.server.publish(f"{PING}.STATSZ", answers, None, b"", account=system)

    def _on_statsz(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        try:
            doc = json.loads(data)
            name, js = doc["server"]["name"], doc["statsz"].get("jetstream")
        except (ValueError, KeyError, TypeError, AttributeError):
            return  # not a server's event: nothing to learn
        if isinstance(name, str) and isinstance(js, dict):
            self._stats[name] = js

    def _learn_tags(self) -> None:
        """Kept once seen (routes come and go), so a server that is down, or whose route
        is being replaced, still places by its tags."""
        self._tags[self.server.server_name] = frozenset(self.server.opts.server_tags)
        cluster = self.server.cluster
        if cluster is not None:
            for route in cluster.routes.values():
                if route.remote_name:
                    self._tags[route.remote_name] = frozenset(route.remote_info.get("tags") or ())
