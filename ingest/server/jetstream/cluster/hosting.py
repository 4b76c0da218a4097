"""The streams this server hosts: opening a replica, following its leader, moving its
group's membership, leaving and deleting it.

`JetStreamCluster` inherits this; it shares the cluster's state (declared below,
initialised in `JetStreamCluster.__init__`). The meta apply (`cluster.controller`)
decides what is hosted here; this is how each decision is carried out on this
server, much of it in the background (`_spawn`) since a replica's Raft group
moves at its own pace.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from consensus.types import ConfChange, RaftError, Role
from consensus.wal_recovery import LogStoreError
from ingest.server.cluster.raft_transport import RaftRoutes
from ingest.server.jetstream.cluster.catchup import CatchUp
from ingest.server.jetstream.cluster.groups import (
    change_membership,
    group_dir,
    membership_step,
    open_node,
    stand_first,
)
from ingest.server.jetstream.cluster.log_opening import Opened, Prefetch
from ingest.server.jetstream.cluster.meta import MetaState, StreamAssignment
from ingest.server.jetstream.cluster.rejoin import Rejoins, set_aside
from log.config import from_request
from log.raft_group import RaftGroup
from log.segments.api import MsgStore
from log.streams import entries as stream_entries
from log.streams.snapshot import Snapshots
from log.timefmt import parse_rfc3339

if TYPE_CHECKING:
    from ingest.server.jetstream.engine import JetStream
    from log.streams.stream import Stream

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


class StreamHosting:
    js_dir: Path
    _sync: int | None
    _engines: Callable[[str], JetStream | None]
    routes: RaftRoutes
    catchup: CatchUp
    rejoins: Rejoins
    state: MetaState
    hosted: dict[tuple[str, str], Hosted]
    _logs: Prefetch[Opened]
    _stores: Prefetch[MsgStore]
    _dropping: dict[tuple[str, str], asyncio.Task[None]]
    _tasks: set[asyncio.Task[None]]

    if TYPE_CHECKING:

        @property
        def me(self) -> str: ...

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
            hosted.leader_since = time.time_ns()
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
