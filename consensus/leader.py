"""The leader half of the Raft core: replication, the commit rule, ReadIndex rounds.

`RaftCore` inherits this; it is split out only to keep each module readable, and
shares the core's state (declared below, initialised in `RaftCore.__init__`).
The commit rule lives here as the named methods `_quorum_index` and
`_commit_term_ok`, which the simulator's mutation tests break on purpose.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from consensus.membership import Membership
from consensus.progress import Progress, ReplicaState
from consensus.raft_log import RaftLog
from consensus.read_index import PendingRead, ReadQueue
from consensus.types import (
    ConfChange,
    ConfOp,
    Entry,
    EntryKind,
    Message,
    MessageType,
    NodeId,
    NotLeaderError,
    ReadState,
    Role,
    Snapshot,
)

if TYPE_CHECKING:
    from consensus.core import Config

T = MessageType


class LeaderRole:
    _cfg: Config
    _id: NodeId
    _term: int
    _role: Role
    _leader: NodeId | None
    _log: RaftLog
    _membership: Membership
    _commit: int
    _msgs: list[Message]
    _read_states: list[ReadState]
    _snapshot: Snapshot | None
    _progress: dict[NodeId, Progress]
    _reads: ReadQueue
    _reads_waiting: list[PendingRead]
    _transferee: NodeId | None
    _eager: frozenset[NodeId]
    _transfer_elapsed: int
    _pending_conf_index: int
    _election_elapsed: int
    _heartbeat_elapsed: int
    _clock: int

    if TYPE_CHECKING:

        def _reset(self, term: int) -> None: ...
        def _become_follower(self, term: int, leader: NodeId | None) -> None: ...
        def _commit_to(self, index: int) -> None: ...
        def _has_quorum(self, ids: Iterable[NodeId]) -> bool: ...
        def _send(self, kind: MessageType, to: NodeId, **fields: object) -> None: ...

    def _commit_term_ok(self, index: int) -> bool:
        """Counting replicas commits only entries of the current term (Figure 8)."""
        return self._log.term_at(index) == self._term

    def _quorum_index(self) -> int:
        matches = sorted(
            (
                self._log.last_index
                if voter == self._id
                else (pr.match if (pr := self._progress.get(voter)) else 0)
            )
            for voter in self._membership.conf.voters
        )
        if not matches:
            return 0
        return matches[(len(matches) - 1) // 2]

    def _become_leader(self) -> None:
        self._reset(self._term)
        self._role = Role.LEADER
        self._leader = self._id
        nxt = self._log.last_index + 1
        for peer in sorted(self._membership.members() - {self._id}):  # a deterministic order
            self._progress[peer] = Progress(match=0, next=nxt)
        index = self._log.last_index + 1
        self._pending_conf_index = index  # no change until this no-op commits
        self._append_as_leader([Entry(self._term, index, EntryKind.NOOP)])

    def _check_leader(self) -> None:
        if self._role != Role.LEADER:
            raise NotLeaderError(self._leader)

    def _tick_leader(self) -> None:
        beat = self._ticks_to_heartbeat() <= 1
        self._election_elapsed += 1
        self._heartbeat_elapsed += 1
        if self._transferee is not None:
            self._transfer_elapsed += 1
            if self._transfer_elapsed >= self._cfg.election_ticks:
                self._transferee = None  # the target did not take over in time: resume
        if self._election_elapsed >= self._cfg.election_ticks:
            self._election_elapsed = 0
            if self._check_quorum_lost():
                self._become_follower(self._term, None)
                return
        if beat:
            self._heartbeat_elapsed = 0
            self._bcast_heartbeat(self._reads.latest_context())

    def _ticks_to_heartbeat(self) -> int:
        """Ticks from now to the next heartbeat (1 or less: the next tick sends one). A
        quiet one falls on a multiple of the quiet interval of the clock (`align_clock`),
        so it is never more than that interval after the last one either."""
        interval = self._heartbeat_interval()
        if interval == self._cfg.heartbeat_ticks:
            return interval - self._heartbeat_elapsed
        return interval - self._clock % interval

    def _heartbeat_interval(self) -> int:
        """`quiet_heartbeat_ticks` once nothing but liveness is left to tell: every
        follower heard from since the last quorum check matches the log and has been sent
        the commit, no read is waiting. One not heard from since the check is likely down
        or cut off: it gets quiet heartbeats, and the first it answers brings the
        group back to every tick until it holds the log. Else one server down would
        hold every group it follows at every tick: ten times the upkeep, on the servers
        left to carry the load."""
        cfg = self._cfg
        if cfg.quiet_heartbeat_ticks <= cfg.heartbeat_ticks or self._reads.latest_context():
            return cfg.heartbeat_ticks
        last = self._log.last_index
        if self._commit != last or self._transferee is not None:
            return cfg.heartbeat_ticks
        for pr in self._progress.values():
            if pr.recent_active and (pr.match != last or pr.sent_commit != last):
                return cfg.heartbeat_ticks
        return cfg.quiet_heartbeat_ticks

    def _check_quorum_lost(self) -> bool:
        """Once per election timeout: did a quorum answer since the last check? Also
        give up on a snapshot nobody acknowledged for a whole period (resend it)."""
        active = {self._id}
        for peer, pr in self._progress.items():
            if pr.recent_active:
                active.add(peer)
            pr.recent_active = False
            if pr.state == ReplicaState.SNAPSHOT:
                pr.snapshot_checks += 1
                if pr.snapshot_checks > 1:
                    pr.become_probe()
        return self._cfg.check_quorum and not self._has_quorum(active)

    def _step_leader(self, msg: Message) -> None:
        if msg.type == T.READ_INDEX:
            self._queue_read(PendingRead(msg.context, 0, msg.src))
            return
        pr = self._progress.get(msg.src)
        if pr is None:
            return
        if msg.type == T.APPEND_RESP:
            pr.recent_active = True
            if msg.index > self._log.last_index:
                return  # acknowledges or refuses entries this leader never sent
            if msg.reject:
                if pr.back_off(msg.index, self._next_guess(msg)):
                    self._replicate(msg.src, allow_empty=True)
            else:
                self._handle_ack(msg.src, pr, msg.index)
        elif msg.type == T.HEARTBEAT_RESP:
            pr.recent_active = True
            pr.probe_sent = False
            if msg.index < pr.match:
                # Its log is shorter than what it acknowledged: recovery cut entries
                # (the vote floor's case). Stop counting them; probe from its real end.
                pr.match = msg.index
                pr.become_probe()
            if pr.state == ReplicaState.REPLICATE and len(pr.inflight) >= self._cfg.max_inflight:
                pr.inflight.popleft()  # one may have been lost: let a probe through
            if pr.match < self._log.last_index:
                self._replicate(msg.src, allow_empty=True)
            if msg.context:
                self._confirm_read(msg.context, msg.src)

    def _next_guess(self, msg: Message) -> int:
        """Where to retry after a rejection: past the leader's last entry of the
        follower's conflicting term if it has that term, else the follower's hint."""
        if msg.log_term == 0:
            return msg.reject_hint
        last = self._log.last_index_of_term(msg.log_term, msg.index)
        return last + 1 if last is not None else msg.reject_hint

    def _handle_ack(self, peer: NodeId, pr: Progress, index: int) -> None:
        if not pr.acknowledge(index):
            return
        if pr.state == ReplicaState.PROBE or (
            pr.state == ReplicaState.SNAPSHOT and pr.match >= pr.pending_snapshot
        ):
            pr.become_replicate()
        if index > self._commit:
            # One at or below the commit (the second follower's of three, with one
            # publish at a time) cannot move it: raising one voter's match to `index`
            # raises the quorum's index to `index` at most.
            self._maybe_commit()
            if self._role != Role.LEADER or peer not in self._progress:
                return
        allow_empty = not self._cfg.lazy_commit and pr.sent_commit < self._commit
        if allow_empty or (pr.next <= self._log.last_index and not self._spare_waits(peer, pr)):
            self._replicate(peer, allow_empty)
        if peer == self._transferee and pr.match == self._log.last_index:
            self._send(T.TIMEOUT_NOW, peer)

    def _append_as_leader(self, entries: list[Entry]) -> None:
        self._log.append(entries)
        self._maybe_commit()
        if self._role != Role.LEADER:
            return
        if self._cfg.spare_batch:
            self._pick_eager()
        for peer, pr in self._progress.items():
            if not self._spare_waits(peer, pr):
                self._replicate(peer, allow_empty=False)

    def _pick_eager(self) -> None:
        """The followers furthest along, as many as a commit needs, those picked last
        time first among equals: one that stops answering falls behind the others at
        their next batch or heartbeat, and the next entries wait for another."""
        progress = self._progress
        ranked = sorted(progress, key=lambda p: (-progress[p].match, p not in self._eager, p))
        eager = {self._id}
        for peer in ranked:
            if self._has_quorum(eager):
                break
            eager.add(peer)
        self._eager = frozenset(eager)

    def _spare_waits(self, peer: NodeId, pr: Progress) -> bool:
        """A voter no commit waits for, streamed to, whose unsent entries are fewer than a
        batch: they wait for more, or for its next heartbeat's answer. A learner gets each
        at once: it is promoted once it holds the commit, which a batch would put off."""
        batch = self._cfg.spare_batch
        return (
            batch > 0
            and peer not in self._eager
            and pr.state == ReplicaState.REPLICATE
            and self._log.last_index - pr.next + 1 < batch
            and peer in self._membership.conf.voters
        )

    def _maybe_commit(self) -> None:
        """Advance the commit to what a quorum holds and, unless `lazy_commit`, tell
        followers at once. Only what followers apply waits for them to learn it; what is
        committed (and acknowledged to clients) does not."""
        moved = False
        while self._role == Role.LEADER:
            conf = self._membership.conf
            index = self._quorum_index()
            if index <= self._commit or not self._commit_term_ok(index):
                break
            self._commit_to(index)
            moved = True
            if self._membership.conf is conf:
                break  # the same voters hold the same matches: no further index to count
        if not moved or self._role != Role.LEADER:
            return
        removed = self._id not in self._membership.conf.voters
        if removed or not self._cfg.lazy_commit:
            self._bcast_append(allow_empty=True)  # a removed leader's last word: no heartbeat
        if removed:
            self._become_follower(self._term, None)  # its own removal committed

    def _conf_changed(self, change: ConfChange) -> None:
        if self._role != Role.LEADER:
            return
        node = change.node
        if change.op == ConfOp.ADD_LEARNER and node != self._id:
            self._progress[node] = Progress(match=0, next=self._log.last_index + 1)
            self._replicate(node, allow_empty=True)  # probe now: its catch-up starts at once
        elif change.op == ConfOp.REMOVE and node in self._progress:
            self._farewell(node, self._progress.pop(node))
            if self._transferee == node:
                self._transferee = None

    def _farewell(self, node: NodeId, pr: Progress) -> None:
        """A removed node hears nothing more from the group, so it would never learn of
        its removal (and would campaign with a stale membership): send it, past its
        window, what it lacks up to the commit and the commit itself, once."""
        prev_term = self._log.term_at(pr.match)
        if prev_term is None:
            return
        end = min(self._commit, pr.match + self._cfg.max_append_entries)
        entries = tuple(self._log.slice_capped(pr.match + 1, end + 1, self._cfg.max_append_bytes))
        self._msgs.append(
            Message(
                T.APPEND,
                self._id,
                node,
                self._term,
                log_term=prev_term,
                index=pr.match,
                entries=entries,
                commit=self._commit,
            )
        )

    def _replicate(self, peer: NodeId, allow_empty: bool) -> None:
        """Send what `peer` is missing, as far as its inflight window allows."""
        if self._send_append(peer, allow_empty):
            pr = self._progress[peer]
            last = self._log.last_index
            # Past the log's end there is nothing more to send: the usual case, one APPEND.
            while (
                pr.state == ReplicaState.REPLICATE
                and pr.next <= last
                and self._send_append(peer, allow_empty=False)
            ):
                pass

    def _send_append(self, peer: NodeId, allow_empty: bool) -> bool:
        pr = self._progress[peer]
        if pr.paused(self._cfg.max_inflight):
            return False
        prev = pr.next - 1
        prev_term = self._log.term_at(prev)
        if prev_term is None:
            return self._send_snapshot(peer, pr)
        cfg = self._cfg
        entries = self._log.slice_capped(
            pr.next, pr.next + cfg.max_append_entries, cfg.max_append_bytes
        )
        if not entries and not allow_empty:
            return False
        self._msgs.append(
            Message(
                T.APPEND,
                self._id,
                peer,
                self._term,
                log_term=prev_term,
                index=prev,
                entries=tuple(entries),
                commit=self._commit,
            )
        )
        pr.sent(prev + len(entries), len(entries))
        pr.sent_commit = self._commit
        return True

    def _send_snapshot(self, peer: NodeId, pr: Progress) -> bool:
        snapshot = self._snapshot
        if snapshot is None or snapshot.meta.index < self._log.snap_index:
            return False  # restarted from a snapshot nobody handed back yet (see compact)
        self._msgs.append(Message(T.SNAPSHOT, self._id, peer, self._term, snapshot=snapshot))
        pr.become_snapshot(snapshot.meta.index)
        return True

    def _bcast_append(self, allow_empty: bool) -> None:
        for peer in self._progress:
            self._replicate(peer, allow_empty)

    def _bcast_heartbeat(self, context: bytes) -> None:
        for peer, pr in self._progress.items():
            commit = min(pr.match, self._commit)
            pr.sent_commit = max(pr.sent_commit, commit)
            self._msgs.append(
                Message(T.HEARTBEAT, self._id, peer, self._term, commit=commit, context=context)
            )

    def _queue_read(self, read: PendingRead) -> None:
        if not self._commit_term_ok(self._commit):
            self._reads_waiting.append(read)  # its commit may still be behind older leaders'
            return
        read.index = self._commit
        read.acks.add(self._id)
        if self._has_quorum(read.acks):
            self._serve_reads([read])
            return
        self._reads.add(read)
        self._bcast_heartbeat(read.context)

    def _confirm_read(self, context: bytes, peer: NodeId) -> None:
        self._serve_reads(self._reads.acknowledge(context, peer, self._has_quorum))

    def _serve_reads(self, reads: list[PendingRead]) -> None:
        for read in reads:
            if read.requester == self._id:
                self._read_states.append(ReadState(read.index, read.context))
            else:
                self._send(
                    T.READ_INDEX_RESP, read.requester, index=read.index, context=read.context
                )
