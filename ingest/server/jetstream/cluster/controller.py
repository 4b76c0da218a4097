"""JetStream in a cluster: the meta group, and the stream groups it assigns to this server.

The meta group (every JetStream server of the cluster) orders stream
creations, updates and deletions; each server applies them and opens, updates
or closes the streams it is a peer of, each over its own Raft group. Which
server answers an API request follows from those roles (`cluster.requests`).

The meta group's founding members are found once and written down
(`cluster.founding`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from consensus.commits import settle
from consensus.driver import RaftNode
from consensus.types import ConfChange, Entry, EntryKind, RaftError, Role
from consensus.wal_recovery import LogStoreError
from ingest.server.cluster.raft_transport import RaftRoutes
from ingest.server.jetstream.cluster import info, meta
from ingest.server.jetstream.cluster.catchup import CatchUp
from ingest.server.jetstream.cluster.founding import Founding
from ingest.server.jetstream.cluster.groups import (
    META_GROUP,
    change_membership,
    group_dir,
    membership_step,
    open_log,
    open_node,
    stand_first,
)
from ingest.server.jetstream.cluster.log_opening import Opened, Prefetch
from ingest.server.jetstream.cluster.meta import MetaState, StreamAssignment
from ingest.server.jetstream.cluster.peer_requests import PeerRequests
from ingest.server.jetstream.cluster.peer_view import PeerView
from ingest.server.jetstream.cluster.placement import choose_peers, placement_of
from ingest.server.jetstream.cluster.rejoin import Rejoins, set_aside
from ingest.server.jetstream.cluster.system_requests import SystemRequests
from ingest.server.settings import store_base
from log import stream_entries
from log.config import from_request
from log.raft_group import RaftGroup
from log.segments.api import MsgStore
from log.stream_snapshot import Snapshots
from log.timefmt import parse_rfc3339

if TYPE_CHECKING:
    from ingest.server.jetstream.engine import JetStream
    from ingest.server.server import Server
    from log.stream import Stream

log = logging.getLogger("jetlake.jetstream")

RECONCILE_POLL = 0.1  # seconds between looks at a learner catching up
LEAVE_SECONDS = 60  # how long a replica moved off this server waits for its removal
# A Raft group's log (a stream's, the meta group's) is snapshotted every so many entries
# (and kept from the snapshot before): a restart replays at most twice that, and a
# far-behind member restores a snapshot (a stream's replica then copies rows) instead.
SNAPSHOT_ENTRIES = int(os.environ.get("JETLAKE_RAFT_SNAPSHOT_ENTRIES", "16384"))


@dataclass
class Hosted:
    """A stream this server is a peer of: its Raft group and who leads it."""

    assignment: StreamAssignment
    stream: Stream
    group: RaftGroup[Any]
    leader_since: int = 0
    reply: str = ""  # a creation's inbox, answered by the stream's first leader here
    reconciling: bool = False  # the leader is moving the group's membership


class JetStreamCluster:
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
            self.meta_leader_since = _now()
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

    def _reconcile(self, hosted: Hosted) -> None:
        """The leader moves the group's Raft membership to the assignment's peers."""
        if hosted.reconciling or hosted.group.node.role is not Role.LEADER:
            return
        hosted.reconciling = True
        self._spawn(self._reconcile_steps(hosted))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` in the background, held until it ends."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reconcile_steps(self, hosted: Hosted) -> None:
        """One change at a time: drop members that left, add newcomers as learners, promote
        each once it holds everything committed (it catches up from the log first)."""
        node = hosted.group.node
        try:
            while self.hosted.get(hosted.assignment.key) is hosted and node.role is Role.LEADER:
                step = membership_step(node.status(), hosted.assignment.peers)
                if step is None:
                    return
                if isinstance(step, ConfChange):
                    try:
                        await change_membership(node, step)
                        continue
                    except RaftError as exc:
                        log.info("stream %s: %s: %s", hosted.assignment.name, step, exc)
                await asyncio.sleep(RECONCILE_POLL)
        finally:
            hosted.reconciling = False

    def _hosted_group(self, group: str) -> Hosted | None:
        """The stream whose Raft group this is, if this server hosts it."""
        return next((h for h in self.hosted.values() if h.assignment.group == group), None)

    def _store_of(self, group: str) -> MsgStore | None:
        hosted = self._hosted_group(group)
        return hosted.stream.store if hosted is not None else None

    def _host(self, engine: JetStream, sa: StreamAssignment) -> None:
        cfg = from_request(sa.config)
        fresh = not engine.stream_folder(cfg.name).exists()
        holder: list[RaftGroup[Any]] = []

        def peers() -> list[str]:
            status = holder[0].node.status()
            return [*status["voters"], *status["learners"]]  # type: ignore[misc]

        snapshots = Snapshots(
            self.catchup.fetcher(
                sa.group, f"'{sa.account} > {sa.name}'", peers, lambda: holder[0].node.leader
            )
        )

        def group(apply: Callable[[list[Any]], None], _sync: Callable[[], None]) -> RaftGroup[Any]:
            raft = RaftGroup(
                apply,
                lambda app: open_node(
                    self.routes,
                    self.js_dir,
                    sa.group,
                    sa.bootstrap,
                    app,
                    sync_interval_ns=self._sync,
                    snapshot=snapshots.take,
                    restore=snapshots.restore,
                    snapshot_entries=SNAPSHOT_ENTRIES,
                    opened=self._logs.take(sa.group),
                ),
                encode=stream_entries.encode,
                decode=stream_entries.decode_deferring_runs,
                own=stream_entries.own_entry,
                name=f"stream '{sa.account} > {sa.name}'",
            )
            holder.append(raft)
            return raft

        store = self._stores.take(sa.group)
        try:
            stream = engine.adopt(cfg, parse_rfc3339(sa.created), group, store=store)
        except LogStoreError as err:
            # Its own group alone is lost here (term and vote unknown: running on would risk
            # a second vote in a term); the meta group and the other streams carry on, and
            # the replica leaves its group to join it again afresh (`rejoin`).
            if store is not None:
                store.close()
            log.error(
                "JetStream: stream '%s > %s' has no replica here: %s; its other replicas "
                "serve it, and this one joins its group again afresh once the leader has "
                "taken it out",
                sa.account, sa.name, err,
            )  # fmt: skip
            self._rejoin(engine, sa)
            return
        snapshots.bind(stream)
        # A restart hosts its streams again: their first leader answered already (a
        # restore's leader knows from the log: `restore_began`).
        hosted = Hosted(sa, stream, holder[0], reply=sa.reply if fresh or sa.restore else "")
        self.hosted[sa.key] = hosted
        hosted.group.node.on_leader_change(
            lambda leader, term: self._stream_leader_changed(engine, hosted, leader)
        )
        stand_first(hosted.group.node, sa.bootstrap, self.me)

    def _leading(self, group: str) -> Hosted | None:
        """The group's replica here, if this server leads it."""
        hosted = self._hosted_group(group)
        return hosted if hosted is not None and hosted.group.node.role is Role.LEADER else None

    def _rejoin(self, engine: JetStream, sa: StreamAssignment) -> None:
        def still_here() -> bool:
            now = self.state.streams.get(sa.key)
            return (
                now is not None and now.group == sa.group and self.me in now.peers
                and sa.key not in self.hosted and sa.key not in self._dropping
            )  # fmt: skip

        def host_afresh() -> None:
            shutil.rmtree(engine.stream_folder(sa.name), ignore_errors=True)
            self._host(engine, self.state.streams[sa.key])

        self.rejoins.rejoin(sa, still_here, group_dir(self.js_dir, sa.group), host_afresh)

    def _stream_leader_changed(self, engine: JetStream, hosted: Hosted, leader: str | None) -> None:
        if self.hosted.get(hosted.assignment.key) is not hosted:
            return
        sa = hosted.assignment
        mine = leader == self.me
        if mine:
            hosted.leader_since = _now()
            log.info("JetStream cluster new stream leader for '%s > %s'", sa.account, sa.name)
        engine.set_stream_leader(hosted.stream, mine)
        if mine:
            # Behind the barrier the stream proposed on taking the lead: it accepts by then.
            hosted.group.barrier().add_done_callback(lambda f: self._caught_up(engine, hosted, f))

    def _caught_up(self, engine: JetStream, hosted: Hosted, done: asyncio.Future[int]) -> None:
        """The creation's answer is taken only here: a lead lost before it caught up (a
        quick re-election under load) leaves it for this server's next lead, or the
        creator would wait for an answer no server will send."""
        if done.cancelled() or done.exception() is not None or not hosted.stream.accepting:
            return  # leadership moved on meanwhile
        engine.led(hosted.stream)
        self._reconcile(hosted)  # a membership change a deposed leader left half done
        reply, hosted.reply = hosted.reply, ""
        if reply and hosted.assignment.restore:
            if not hosted.stream.restore_began:  # else an earlier leader took the backup
                engine.api.backups.take_replicated(hosted.stream, reply)
        elif reply:
            engine.api.created(hosted.stream, reply)

    async def _leaving(self, hosted: Hosted) -> None:
        """Drop this replica once its group has let it go. Until the leader's change
        removing it commits, its vote may be needed: taking two replicas off an R3
        stream, the second removal commits on the leader and the departing one."""
        node = hosted.group.node
        deadline = time.monotonic() + LEAVE_SECONDS
        while self.hosted.get(hosted.assignment.key) is hosted:
            if self.me in hosted.assignment.peers:
                return  # assigned here again meanwhile
            status = node.status()
            if self.me not in (*status["voters"], *status["learners"]):  # type: ignore[misc]
                break
            if time.monotonic() > deadline:
                log.warning(
                    "stream '%s > %s': not removed from its group within %d s; "
                    "dropping this replica anyway",
                    hosted.assignment.account, hosted.assignment.name, LEAVE_SECONDS,
                )  # fmt: skip
                break
            await asyncio.sleep(RECONCILE_POLL)
        if self.hosted.get(hosted.assignment.key) is hosted:
            self._drop(hosted)

    def _drop(self, hosted: Hosted) -> None:
        """Delete this server's replica: its segments, consumer state and Raft log."""
        key = hosted.assignment.key
        del self.hosted[key]
        engine = self._engines(hosted.assignment.account)
        if engine is not None and hosted.stream.name in engine.streams:
            task = asyncio.get_running_loop().create_task(engine.delete_stream(hosted.stream.name))
            raft_dir = group_dir(self.js_dir, hosted.assignment.group)
            self._dropping[key] = task

            def dropped(task: asyncio.Task[None]) -> None:
                shutil.rmtree(raft_dir, ignore_errors=True)
                shutil.rmtree(set_aside(raft_dir), ignore_errors=True)
                if self._dropping.get(key) is task:
                    del self._dropping[key]
                if not task.cancelled() and (exc := task.exception()) is not None:
                    log.error("JetStream: deleting stream '%s > %s' failed: %s", *key, exc)

            task.add_done_callback(dropped)

    def _forget_damaged(self, sa: StreamAssignment) -> None:
        """Delete a replica that never opened (its Raft state beyond repair) whose stream
        went while it waited to rejoin: its stream folder and its group's, kept or set aside."""
        raft_dir = group_dir(self.js_dir, sa.group)
        for folder in (raft_dir, set_aside(raft_dir)):
            shutil.rmtree(folder, ignore_errors=True)
        engine = self._engines(sa.account)
        if engine is not None:
            shutil.rmtree(engine.stream_folder(sa.name), ignore_errors=True)

    async def _host_after(self, dropping: asyncio.Task[None], key: tuple[str, str]) -> None:
        """Host the stream's current assignment once its old replica here is gone."""
        await asyncio.wait([dropping])
        sa = self.state.streams.get(key)
        engine = self._engines(key[0])
        if sa is not None and key not in self.hosted and self.me in sa.peers and engine:
            self._host(engine, sa)

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
        )

    def meta_info(self) -> dict[str, Any]:
        """`/jsz` `meta_cluster` (before the group forms: just the cluster's name)."""
        if self.meta is None:
            return {"name": self.name, "cluster_size": self.expected_size}
        return info.meta_block(self.meta, cluster=self.name, heard=self.routes.heard)

    def raftz(self) -> dict[str, Any]:
        groups: dict[str, Any] = {}
        if self.meta is not None:
            groups[META_GROUP] = info.raftz_entry(self.meta, leader_since=self.meta_leader_since)
        for hosted in self.hosted.values():
            groups[hosted.assignment.group] = info.raftz_entry(
                hosted.group.node, leader_since=hosted.leader_since
            )
        return {"$SYS": groups} if groups else {}


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


def _now() -> int:
    return time.time_ns()
