"""JetStream in a cluster: the meta group, and the stream groups it assigns to this server.

The meta group (every JetStream server of the cluster) orders stream
creations, updates and deletions; each server applies them and opens, updates
or closes the streams it is a peer of, each over its own Raft group. This
module applies the meta log; how a replica is then opened, led, moved and
dropped here is `cluster.hosting`. Which server answers an API request follows
from those roles (`cluster.requests`).

The meta group's founding members are found once and written down
(`cluster.founding`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from consensus.commits import settle
from consensus.driver import RaftNode
from consensus.types import Entry, EntryKind, RaftError, Role
from consensus.wal_recovery import LogStoreError
from ingest.server.cluster.raft_transport import RaftRoutes
from ingest.server.jetstream.cluster import info, meta
from ingest.server.jetstream.cluster.catchup import CatchUp
from ingest.server.jetstream.cluster.founding import Founding
from ingest.server.jetstream.cluster.groups import (
    META_GROUP,
    group_dir,
    open_log,
    open_node,
    stand_first,
)
from ingest.server.jetstream.cluster.hosting import SNAPSHOT_ENTRIES, Hosted, StreamHosting
from ingest.server.jetstream.cluster.log_opening import Opened, Prefetch
from ingest.server.jetstream.cluster.meta import MetaState, StreamAssignment
from ingest.server.jetstream.cluster.peer_requests import PeerRequests
from ingest.server.jetstream.cluster.peer_view import PeerView
from ingest.server.jetstream.cluster.placement import choose_peers, placement_of
from ingest.server.jetstream.cluster.rejoin import Rejoins
from ingest.server.jetstream.cluster.system_requests import SystemRequests
from ingest.server.settings import store_base
from log.config import from_request
from log.segments.api import MsgStore

if TYPE_CHECKING:
    from ingest.server.jetstream.engine import JetStream
    from ingest.server.server import Server

log = logging.getLogger("jetlake.jetstream")


class JetStreamCluster(StreamHosting):
    def __init__(
        self,
        server: Server,
        engines: Callable[[str], JetStream | None],
        *,
        js_dir: Path,
        sync_interval_ns: int | None,
    ) -> None:
        self.server = server
        self._engines = engines
        self.js_dir = js_dir
        self._sync = sync_interval_ns
        self.routes = RaftRoutes(server)
        self.requests = PeerRequests(server)
        self.peers = PeerView(server)
        self.catchup = CatchUp(self.requests, self._store_of)
        self.founding = Founding(
            self.requests,
            group_dir(js_dir, META_GROUP),
            lambda: self.expected_size,
            self.peers.online,
            self._open_meta,
        )
        self.state = MetaState()
        self.meta: RaftNode | None = None
        self.meta_leader_since = 0
        self.hosted: dict[tuple[str, str], Hosted] = {}
        self._logs: Prefetch[Opened] = Prefetch(lambda opened: opened[0].close())
        self._stores: Prefetch[MsgStore] = Prefetch(lambda store: store.close())
        # Replicas being deleted here: a stream created anew under the same name (same
        # folder) waits for its predecessor's files to go before it opens.
        self._dropping: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.rejoins = Rejoins(self.requests, self._leading, self._reconcile, self._spawn)

    @property
    def me(self) -> str:
        return self.server.server_name

    @property
    def expected_size(self) -> int:
        """How many servers the configured routes name, this one included: a route found
        to lead back here (this server's own address, as users list every server in one
        shared config) is not another server."""
        cluster = self.server.cluster
        if cluster is None:
            return 1
        me = {(cluster.config.host, cluster.port), ("127.0.0.1", cluster.port)}
        me |= {("localhost", cluster.port), *cluster.self_urls}
        return len({(r.host, r.port) for r in cluster.config.routes} - me) + 1

    @property
    def name(self) -> str:
        cluster = self.server.cluster
        return cluster.name if cluster is not None else ""

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        log.info("Starting JetStream cluster")
        self.routes.start()
        self.peers.start()
        SystemRequests(self).start()
        self.requests.start()
        if not self.founding.start():
            self.server.cluster_listeners.append(self.founding.routes_changed)

    async def stop(self) -> None:
        """Stop taking meta decisions; the engines close the streams (and their groups)."""
        self.hosted = {}
        self.founding.stop()
        self.requests.stop()
        if self.meta is not None:
            await self.meta.close()

    def members(self) -> set[str]:
        """The meta group's voters: every JetStream server of the cluster."""
        if self.meta is None:
            return self.peers.online()
        return set(self.meta.status()["voters"])  # type: ignore[call-overload]

    def remapped(self, sa: StreamAssignment, peer: str) -> tuple[str, ...] | None:
        """The stream's peers with `peer` replaced by a spare server; None: no spare."""
        if not self.members() - set(sa.peers):
            return None
        [new] = self.spares(sa, 1)
        return tuple(new if p == peer else p for p in sa.peers)

    def spares(self, sa: StreamAssignment, count: int) -> tuple[str, ...]:
        """`count` servers not among the stream's peers, placed as a creation places them
        (its tags, room for its `max_bytes`): `no_suitable_peers` when there are fewer."""
        return choose_peers(
            sa.name, count, self.members() - set(sa.peers), self.state.load(),
            online=self.peers.online(), cluster=self.name, tags=self.peers.tags(),
            wanted_tags=placement_of(sa.config).get("tags") or (),
            available=self.peers.available(sa.config.get("storage", "file")),
            need=int(sa.config.get("max_bytes") or 0),
        )  # fmt: skip

    def _open_meta(self, voters: list[str]) -> None:
        try:
            self.meta = open_node(
                self.routes,
                self.js_dir,
                META_GROUP,
                voters,
                self._apply_meta,
                sync_interval_ns=self._sync,
                snapshot=self.state.snapshot,
                restore=self._restore_meta,
                snapshot_entries=SNAPSHOT_ENTRIES,
            )
        except LogStoreError as err:
            log.error(
                "JetStream cluster: this server cannot take part in the meta group: %s; "
                "its streams are not hosted here until an operator removes the server "
                "(SERVER.REMOVE) or its meta group folder",
                err,
            )
            return
        self.meta.on_leader_change(self._meta_leader_changed)
        stand_first(self.meta, voters, self.me)
        self.meta.start()

    def _meta_leader_changed(self, leader: str | None, term: int) -> None:
        if leader is None:
            return
        if leader == self.me:
            self.meta_leader_since = time.time_ns()
            log.info("Self is new JetStream cluster metadata leader")
            # Placement by free storage reads every server's STATSZ; a leader elected as
            # the routes come up may have missed their first events, so it asks at once.
            self.peers.ping_statsz()
        else:
            log.info("JetStream cluster new metadata leader: %s/%s", leader, self.name)

    @property
    def is_meta_leader(self) -> bool:
        return self.meta is not None and self.meta.role is Role.LEADER

    # -- the meta log ------------------------------------------------------------------

    def propose_meta(self, op: bytes) -> asyncio.Future[int]:
        """Commit one meta operation (the caller is the meta leader)."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        done = partial(settle, future, 0)
        if self.meta is None:
            done(RaftError("JetStream cluster not formed yet"))
        else:
            self.meta.propose([op], done)
        return future

    def _apply_meta(self, entries: list[Entry]) -> None:
        changes: list[meta.Change] = []
        for entry in entries:
            if entry.kind is not EntryKind.NORMAL:
                continue
            try:
                change = self.state.apply(meta.decode(entry.data))
            except meta.MetaOpError as exc:
                log.error("JetStream meta log entry %d skipped: %s", entry.index, exc)
                continue
            if change is not None:
                changes.append(change)
        self._enact_all(changes)

    def _restore_meta(self, data: bytes) -> None:
        changes = self.state.restore(data)
        log.info(
            "JetStream meta: restored a snapshot of %d streams (%d changed here)",
            len(self.state.streams),
            len(changes),
        )
        self._enact_all(changes)

    def _enact_all(self, changes: list[meta.Change]) -> None:
        """Enact in order; the logs and stores of the streams that come here open together
        first (log_opening): a restart's replay hosts every stream of this server at once."""
        coming = [
            c.assignment
            for c in changes
            if c.kind != "removed"
            and self.me in c.assignment.peers
            and c.assignment.key not in self.hosted
            and c.assignment.key not in self._dropping
        ]
        try:
            self._logs.ahead(
                (sa.group, partial(open_log, self.js_dir, sa.group, me=self.me,
                                   sync_interval_ns=self._sync))
                for sa in coming
            )  # fmt: skip
            self._stores.ahead(self._store_opens(coming))
            for change in changes:
                self._enact(change)
        finally:
            self._logs.discard()
            self._stores.discard()

    def _store_opens(
        self, coming: list[StreamAssignment]
    ) -> Iterator[tuple[str, Callable[[], MsgStore]]]:
        """Stores of the streams whose folders are here (a restart's): a new stream's
        folder must not appear before `_host` looks whether it is new."""
        for sa in coming:
            engine = self._engines(sa.account)
            cfg = from_request(sa.config)
            if engine is not None and engine.stream_folder(cfg.name).exists():
                yield sa.group, partial(engine.replica_store, cfg)

    def _enact(self, change: meta.Change) -> None:
        sa = change.assignment
        hosted = self.hosted.get(sa.key)
        here = self.me in sa.peers and change.kind != "removed"
        if hosted is not None and change.kind == "updated" and not here:
            if self.me in hosted.assignment.peers:  # the first update without it: leave once
                self._spawn(self._leaving(hosted))  # moved off, or the replicas went down
            hosted.assignment = sa
            return
        if hosted is not None and (change.kind == "added" or not here):
            self._drop(hosted)  # deleted, or created anew
            hosted = None
        if not here:
            if hosted is None and self.rejoins.waiting(sa.group):
                self._forget_damaged(sa)  # its replica here waited to rejoin: nothing to join
            return
        engine = self._engines(sa.account)
        if engine is None:
            log.warning(
                "JetStream: stream '%s > %s' assigned to an account without JetStream here",
                sa.account,
                sa.name,
            )
            return
        if hosted is None:
            if self.rejoins.waiting(sa.group):
                return
            dropping = self._dropping.get(sa.key)
            if dropping is None:
                self._host(engine, sa)
            else:  # each waiter hosts what is assigned then, if nobody did yet
                self._spawn(self._host_after(dropping, sa.key))
            return
        old, hosted.assignment = hosted.assignment, sa
        if old.config != sa.config:
            engine.update_stream(from_request(sa.config))
        if old.peers != sa.peers:
            self._reconcile(hosted)

    # -- accounts given or denied JetStream while the cluster runs ----------------------

    def adopt(self, engine: JetStream) -> None:
        """An account's engine made while the cluster runs (a pushed JWT that allows
        JetStream, a reload that enables it): its API answers by role, as at start."""
        from ingest.server.jetstream.cluster.requests import ClusterRequests

        engine.cluster = self
        ClusterRequests(self, engine).install(engine.api)

    def host_assigned(self, account: str) -> None:
        """The adopted engine has started: host the account's streams the meta group
        assigned here meanwhile or before (their folders, if any, are picked up)."""
        self._enact_all(
            [
                meta.Change("added", sa)
                for sa in list(self.state.streams.values())
                if sa.account == account and sa.key not in self.hosted
            ]
        )

    def release(self, account: str) -> None:
        """The account's JetStream is switched off here: its replicas are forgotten, not
        deleted (the engine closes them; `host_assigned` takes them back)."""
        for key in [key for key in self.hosted if key[0] == account]:
            del self.hosted[key]

    # -- what the API and monitoring read ---------------------------------------------

    def assignment(self, account: str, name: str) -> StreamAssignment | None:
        return self.state.streams.get((account, name))

    def hosted_stream(self, account: str, name: str) -> Hosted | None:
        return self.hosted.get((account, name))

    def stream_info(self, account: str, name: str) -> dict[str, Any]:
        hosted = self.hosted.get((account, name))
        if hosted is None:
            return {"name": self.name}
        return info.group_block(
            hosted.group.node,
            cluster=self.name,
            group=hosted.assignment.group,
            leader_since=hosted.leader_since,
            heard=self.routes.heard,
            traffic=self.server.accounts.system_account.name,
        )

    def raft_groups(self) -> int:
        """The Raft groups running here, the reference's `ha_assets`: the meta group and
        each replicated stream's (a consumer's state rides in its stream's group)."""
        own = sum(1 for hosted in self.hosted.values() if len(hosted.assignment.peers) > 1)
        return own + (self.meta is not None)

    def meta_info(self) -> dict[str, Any]:
        """`/jsz` `meta_cluster` (before the group forms: just the cluster's name)."""
        if self.meta is None:
            return {"name": self.name, "cluster_size": self.expected_size}
        return info.meta_block(self.meta, cluster=self.name, heard=self.routes.heard)

    def raftz(self, account: str | None = None, group: str | None = None) -> dict[str, Any]:
        """`/raftz`: the groups of `account` (default: the system account, whose is the
        meta group; a stream's group is its own account's, as on the reference), or only
        the one named `group`, by account."""
        traffic = self.server.accounts.system_account.name
        owned: list[tuple[str, str, RaftNode, int]] = []
        if self.meta is not None:
            owned.append((traffic, META_GROUP, self.meta, self.meta_leader_since))
        for hosted in self.hosted.values():
            sa = hosted.assignment
            owned.append((sa.account, sa.group, hosted.group.node, hosted.leader_since))
        out: dict[str, dict[str, Any]] = {}
        for owner, name, node, since in owned:
            if owner == (account or traffic) and group in (None, name):
                entry = info.raftz_entry(node, leader_since=since, traffic=traffic)
                out.setdefault(owner, {})[name] = entry
        return out


def cluster_engines(server: Server, engines: list[JetStream]) -> JetStreamCluster:
    """Cluster the engines before they start: their API answers by role; `start` then
    brings up the meta group."""
    from ingest.server.jetstream.cluster.requests import ClusterRequests

    # Where the engines keep their streams, even when no account has JetStream yet (one
    # given it later joins): the meta group's log must not land in the working folder.
    js_dir = store_base(server.opts.jetstream.store_dir) / "jetstream"
    sync = server.opts.jetstream.sync_interval_ns

    def engine_of(name: str) -> JetStream | None:
        """The account's running engine: those made later (`adopt`) count once started."""
        account = server.accounts.get(name)
        return account.jetstream if account is not None else None

    cluster = JetStreamCluster(server, engine_of, js_dir=js_dir, sync_interval_ns=sync)
    for engine in engines:
        engine.cluster = cluster
        ClusterRequests(cluster, engine).install(engine.api)
    return cluster
