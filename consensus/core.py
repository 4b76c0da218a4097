"""The Raft state machine: ticks, messages and proposals in; a `Ready` of work out.

Pure by design (no clock, sockets, files or shared randomness) so that the
deterministic simulator can run thousands of seeded schedules and the asyncio
driver can own all I/O. The caller's loop is: feed `tick`/`step`/`propose`,
take `ready()`, do what it says in its documented order, `advance(ready)`.

Safety-critical decisions live in small named methods so the simulator's
mutation tests can break exactly one rule and watch the checker catch it:
`_log_up_to_date` (election restriction), `_can_grant_vote` (one vote per term,
lease, vote floor), `_append_matches` (log matching on a follower),
`_commit_term_ok` (only entries of the current term commit by counting),
`_quorum_index` (the index a quorum of voters holds), `_has_quorum` (majority of
voters), `_follower_commit_index` (how far a follower may move its commit),
`_in_lease` (check-quorum stickiness), `_can_campaign` (voter and vote floor),
`_held_since_reboot` (a power loss's hold), `_held_election_won` (the held path).
All are methods of `RaftCore` (the commit rule's two inherited from
`consensus.leader`, the election's from `consensus.election`), so
`monkeypatch.setattr(RaftCore, name, ...)` breaks one.

Membership changes take effect when their entry commits (a node also counts as
committed every change that another change follows in its log: see
`_settle_conf`). The leader counts its own log as matched at once, which is safe
because Readies are carried out in order and a `Ready`'s entries are persisted
before its messages leave and before anything is applied: a commit index that
counted an unpersisted entry of the leader's is never seen outside before it is.

`RaftCore` keeps the state, the inputs and the Ready contract; its roles are
mixins that share that state: elections (votes, campaigns, and the holds that
keep a node that may have lost acknowledged entries out of them) in
`consensus.election`, the leader's replication and commit counting in
`consensus.leader`, the follower's handling of its leader's messages in
`consensus.follower`, and the plain-message paths that skip the Ready round
(`append_in_order`, `answer_in_order`, `in_order`, the quiet heartbeats) in
`consensus.in_order`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from consensus.election import TRANSFER_CONTEXT, ElectionRole
from consensus.follower import FollowerRole
from consensus.in_order import InOrderPaths
from consensus.leader import LeaderRole
from consensus.membership import Membership, check_change, decode_change
from consensus.progress import Progress
from consensus.raft_log import RaftLog
from consensus.read_index import PendingRead, ReadQueue
from consensus.types import (
    ChangeInProgressError,
    ConfChange,
    ConfOp,
    ConfState,
    Entry,
    EntryKind,
    HardState,
    Message,
    MessageType,
    NodeId,
    NotCaughtUpError,
    NotLeaderError,
    RaftError,
    ReadState,
    Ready,
    Restored,
    Role,
    Snapshot,
    SnapshotMeta,
)
from consensus.wellformed import well_formed

T = MessageType
FRESH = Restored()  # a node that never ran: nothing on disk


@dataclass(frozen=True, slots=True)
class Config:
    id: NodeId
    election_ticks: int = 10  # election timeout randomized in [election_ticks, 2*election_ticks)
    heartbeat_ticks: int = 1
    # A leader whose followers hold its whole log, know its commit, and owe it no read
    # heartbeats only every this many ticks (when more than `heartbeat_ticks`): an idle
    # group's upkeep, for a server with many. Keep it well under `election_ticks`.
    quiet_heartbeat_ticks: int = 0
    pre_vote: bool = True
    check_quorum: bool = True
    max_append_entries: int = 256  # entries per APPEND message
    max_append_bytes: int = 256 * 1024  # and their data's bytes (past one entry)
    max_inflight: int = 64  # unacknowledged APPENDs per follower
    # Followers learn a new commit from the next APPEND or heartbeat, not from an empty
    # APPEND sent at once: for a group whose followers only apply what commits (a
    # stream's), that round is a read, a hard-state write and an answer per commit on
    # each; one whose followers act on it (the meta group's assignments) wants it.
    lazy_commit: bool = False
    # New entries go at once only to the followers a commit needs (those furthest
    # along); the others get them this many at a time, or at their next heartbeat's
    # answer. 0: every follower gets each at once.
    spare_batch: int = 0
    seed: int = 0  # seeds the core's own random.Random (deterministic runs)


class RaftCore(ElectionRole, LeaderRole, FollowerRole, InOrderPaths):
    def __init__(
        self, config: Config, voters: Iterable[NodeId], restored: Restored = FRESH
    ) -> None:
        self._cfg = config
        self._id = config.id
        # Mixing the id in keeps nodes that share a seed from timing out in lockstep.
        self._rand = random.Random(f"{config.seed}/{config.id}")
        meta = restored.snapshot
        snap_index, snap_term = (meta.index, meta.term) if meta else (0, 0)
        self._log = RaftLog(snap_index, snap_term, restored.entries)
        self._membership = Membership(meta.conf if meta else ConfState(frozenset(voters)))
        hs = restored.hard_state
        if hs.commit > self._log.last_index:
            raise RaftError(
                f"{self._id}: restored commit {hs.commit} is beyond the log's end "
                f"{self._log.last_index}"
            )
        self._term = hs.term
        self._vote: NodeId | None = hs.vote
        self._commit = snap_index
        self._applied = snap_index
        self._vote_floor = restored.vote_floor
        self._reboot_term = restored.reboot_term
        self._snapshot: Snapshot | None = None  # the newest one, to send to laggards
        self._pending_snapshot: Snapshot | None = None  # received, not yet persisted/applied
        self._msgs: list[Message] = []
        self._read_states: list[ReadState] = []
        self._outstanding: Ready | None = None
        self._prev_hs = hs
        self._role = Role.FOLLOWER
        self._leader: NodeId | None = None
        self._progress: dict[NodeId, Progress] = {}
        self._votes: dict[NodeId, tuple[bool, bool]] = {}  # voter -> (granted, held)
        self._reads = ReadQueue()
        self._reads_waiting: list[PendingRead] = []  # before an entry of the term committed
        self._transferee: NodeId | None = None
        self._eager: frozenset[NodeId] = frozenset()  # the followers a commit waits for
        self._transfer_elapsed = 0
        self._pending_conf_index = 0
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._clock = 0  # ticks seen, counted from `align_clock`'s origin
        self._timeout = self._random_timeout()
        self._conf_scan = snap_index  # CONFIG entries up to here are in force
        self._commit_to(max(hs.commit, snap_index))
        self._settle_conf(self._log.slice(self._commit + 1, self._log.last_index + 1))

    # ----------------------------------------------------------------- read-only state

    @property
    def id(self) -> NodeId:
        return self._id

    @property
    def term(self) -> int:
        return self._term

    @property
    def role(self) -> Role:
        return self._role

    @property
    def leader(self) -> NodeId | None:
        return self._leader

    @property
    def commit(self) -> int:
        return self._commit

    @property
    def applied(self) -> int:
        return self._applied

    @property
    def last_index(self) -> int:
        return self._log.last_index

    @property
    def conf(self) -> ConfState:
        return self._membership.conf

    def status(self) -> dict[str, object]:
        status: dict[str, object] = {
            "id": self._id,
            "role": self._role.name,
            "term": self._term,
            "vote": self._vote,
            "leader": self._leader,
            "commit": self._commit,
            "applied": self._applied,
            "last_index": self._log.last_index,
            "snapshot_index": self._log.snap_index,
            "held": self.held_back,
            "voters": sorted(self.conf.voters),
            "learners": sorted(self.conf.learners),
        }
        if self._role == Role.LEADER:
            status["transferee"] = self._transferee
            status["peers"] = {
                peer: {
                    "match": pr.match,
                    "next": pr.next,
                    "state": pr.state.name,
                    "active": pr.recent_active,
                }
                for peer, pr in sorted(self._progress.items())
            }
        return status

    # ----------------------------------------------------------------- safety rules

    def _append_matches(self, index: int, term: int) -> bool:
        return self._log.term_at(index) == term

    def _has_quorum(self, ids: Iterable[NodeId]) -> bool:
        voters = self.conf.voters
        return len(voters.intersection(ids)) > len(voters) // 2

    def _follower_commit_index(self, leader_commit: int, matched: int) -> int:
        """A follower commits no further than what it knows matches the leader's log."""
        return min(leader_commit, matched)

    def _in_lease(self) -> bool:
        return (
            self._cfg.check_quorum
            and self._leader is not None
            and self._election_elapsed < self._cfg.election_ticks
        )

    # ----------------------------------------------------------------- inputs

    def tick(self) -> None:
        if self._role == Role.LEADER:
            self._tick_leader()
        else:
            self._election_elapsed += 1
            if self._election_elapsed >= self._timeout:
                self._election_elapsed = 0
                self._hup(forced=False)
        self._clock += 1

    def align_clock(self, ticks: int) -> None:
        """Count ticks from the caller's origin: `ticks` have passed on its timer. Quiet
        heartbeats fall on multiples of their interval of this count, so the groups that
        share a timer send theirs in the same turn (one message to each peer, not one
        every tick). Any value is safe: it only moves where the next quiet one falls."""
        self._clock = ticks

    def idle_ticks(self) -> int:
        """How many ticks from now only advance counters: the next one after them may act
        (a heartbeat, a quorum check, an election). A driver may hold that many back and
        hand them over late, so an idle group costs no wake-up per tick."""
        if self._role == Role.LEADER:
            cfg = self._cfg
            due = min(self._ticks_to_heartbeat(), cfg.election_ticks - self._election_elapsed)
            if self._transferee is not None:
                due = min(due, cfg.election_ticks - self._transfer_elapsed)
        else:
            due = self._timeout - self._election_elapsed
        return max(due - 1, 0)

    def pass_idle(self, ticks: int) -> None:
        """`ticks` ticks: the first `idle_ticks` at once (they only advance counters),
        without each one's heartbeat arithmetic, which walks a leader's followers; any
        past those as `tick`. A driver hands a group its held ticks before each input,
        so with a thousand groups that was much of a beat's cost."""
        if ticks <= 0:
            return  # the usual case on a busy group's path: no idle_ticks walk
        idle = min(ticks, self.idle_ticks())
        if self._role == Role.LEADER:
            self._heartbeat_elapsed += idle
            if self._transferee is not None:
                self._transfer_elapsed += idle
        self._election_elapsed += idle
        self._clock += idle
        for _ in range(ticks - idle):
            self.tick()

    def campaign(self) -> None:
        self._hup(forced=False)

    def step(self, msg: Message) -> None:
        if not well_formed(msg) or msg.dst != self._id or msg.src == self._id:
            return
        if msg.term > self._term:
            lease_holds = msg.context != TRANSFER_CONTEXT and self._in_lease()
            if msg.type in (T.VOTE, T.PRE_VOTE) and lease_holds:
                return
            if not (msg.type == T.PRE_VOTE or (msg.type == T.PRE_VOTE_RESP and not msg.reject)):
                leader = msg.src if msg.type in (T.APPEND, T.HEARTBEAT, T.SNAPSHOT) else None
                self._become_follower(msg.term, leader)
        elif msg.term < self._term:
            self._answer_stale(msg)
            return
        if msg.type in (T.VOTE, T.PRE_VOTE):
            self._answer_vote(msg)
        elif self._role == Role.LEADER:
            self._step_leader(msg)
        elif self._role == Role.FOLLOWER:
            self._step_follower(msg)
        else:
            self._step_candidate(msg)

    def propose(self, data: Sequence[bytes]) -> int:
        self._check_leader()
        if self._transferee is not None:
            raise NotLeaderError(self._transferee)
        first = self._log.last_index + 1
        self._append_as_leader(
            [Entry(self._term, first + i, EntryKind.NORMAL, item) for i, item in enumerate(data)]
        )
        return self._log.last_index

    def propose_conf_change(self, change: ConfChange) -> int:
        self._check_leader()
        if self._transferee is not None:
            raise ChangeInProgressError(f"{self._id}: a leader transfer is running")
        if self._pending_conf_index > self._commit:
            raise ChangeInProgressError(
                f"{self._id}: the change at index {self._pending_conf_index} is not committed "
                f"(commit {self._commit})"
            )
        check_change(self.conf, change)
        if change.op == ConfOp.PROMOTE:
            pr = self._progress.get(change.node)
            match = pr.match if pr else 0
            if match < self._commit:
                raise NotCaughtUpError(
                    f"learner {change.node} holds index {match}, commit is {self._commit}"
                )
        index = self._log.last_index + 1
        self._append_as_leader([Entry(self._term, index, EntryKind.CONFIG, change.encode())])
        self._pending_conf_index = index
        return index

    def read_index(self, context: bytes) -> None:
        if self._role == Role.LEADER:
            self._queue_read(PendingRead(context, 0, self._id))
            return
        if self._leader is None:
            raise NotLeaderError(None)
        self._send(T.READ_INDEX, self._leader, context=context)

    def transfer_leadership(self, to: NodeId | None = None) -> None:
        self._check_leader()
        if to is None:
            others = sorted(self.conf.voters - {self._id})
            if not others:
                raise RaftError(f"{self._id}: no other voter to transfer leadership to")
            to = max(others, key=lambda peer: self._progress[peer].match)
        if to == self._id:
            self._transferee = None
            return
        if to not in self.conf.voters or to not in self._progress:
            raise RaftError(f"{self._id}: cannot transfer leadership to non-voter {to}")
        if self._transferee == to:
            return
        self._transferee = to
        self._transfer_elapsed = 0
        if self._progress[to].match == self._log.last_index:
            self._send(T.TIMEOUT_NOW, to)
        else:
            self._replicate(to, allow_empty=True)

    # ----------------------------------------------------------------- output

    def has_ready(self) -> bool:
        return bool(self._msgs) or self.needs_io()

    def needs_io(self) -> bool:
        """Whether the next Ready holds more than messages: something to persist, apply or
        serve. One that holds only messages (a heartbeat's answer, a tick's heartbeats)
        needs no disk and no application, so a driver may send it wherever it is."""
        return bool(
            self._read_states
            or self._pending_snapshot
            or self._log.unstable_from <= self._log.last_index
            or self._commit > self._apply_floor()
            or self._hs_changed()
        )

    def needs_wait(self) -> bool:
        """Whether the next Ready waits on the disk before its messages leave: a snapshot
        to save and restore, or a new term or vote to fsync (a vote forgotten in a crash
        can elect two leaders in one term). The rest (entries written under a sync
        window, a commit, what to apply) a driver may carry out wherever it is."""
        prev = self._prev_hs
        return self._pending_snapshot is not None or (self._term, self._vote) != (
            prev.term,
            prev.vote,
        )

    def _hs_changed(self) -> bool:
        prev = self._prev_hs
        return (self._term, self._vote, self._commit) != (prev.term, prev.vote, prev.commit)

    def ready(self) -> Ready:
        if self._outstanding is not None:
            raise RaftError(f"{self._id}: ready() again before advance() of the previous one")
        rd = Ready()
        if self._hs_changed():
            rd.hard_state = hs = HardState(self._term, self._vote, self._commit)
            rd.must_sync = (hs.term, hs.vote) != (self._prev_hs.term, self._prev_hs.vote)
        rd.snapshot = self._pending_snapshot
        rd.entries = self._log.unstable()
        rd.committed = self._log.slice(self._apply_floor() + 1, self._commit + 1)
        rd.messages, self._msgs = self._msgs, []
        rd.read_states, self._read_states = self._read_states, []
        self._outstanding = rd
        return rd

    def advance(self, ready: Ready) -> None:
        if ready is not self._outstanding:
            raise RaftError(f"{self._id}: advance() of a Ready that ready() did not hand out")
        self._outstanding = None
        if ready.hard_state is not None:
            self._prev_hs = ready.hard_state
        if ready.snapshot is not None:
            self._applied = max(self._applied, ready.snapshot.meta.index)
            if self._pending_snapshot is ready.snapshot:
                self._pending_snapshot = None
        if ready.entries:
            last = ready.entries[-1]
            self._log.stable_to(last.index, last.term)
        if ready.committed:
            self._applied = max(self._applied, ready.committed[-1].index)

    def compact(self, snapshot: Snapshot) -> None:
        """Keep `snapshot` (of the state machine at an applied index) for laggards and drop
        the entries it covers. The core fills in the term and membership at that index
        from its own log; the caller supplies the index and the data. Call it again
        after a restart from a snapshot, so that the core has the bytes to send."""
        index = snapshot.meta.index
        if index > self._applied:
            raise RaftError(f"{self._id}: snapshot at {index} is beyond applied {self._applied}")
        term = self._log.term_at(index)
        if term is None:
            return  # older than the snapshot already held
        meta = SnapshotMeta(index, term, self._membership.conf_at(index))
        self._snapshot = Snapshot(meta, snapshot.data)
        self._log.compact(index)
        self._membership.compact(index)

    def _apply_floor(self) -> int:
        pending = self._pending_snapshot.meta.index if self._pending_snapshot else 0
        return max(self._applied, pending)

    # ----------------------------------------------------------------- roles

    def _reset(self, term: int) -> None:
        if term != self._term:
            self._term = term
            self._vote = None
        self._leader = None
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._timeout = self._random_timeout()
        self._transferee = None
        self._eager = frozenset()
        self._votes = {}
        self._progress = {}
        self._reads.clear()
        self._reads_waiting = []

    def _random_timeout(self) -> int:
        ticks = self._cfg.election_ticks
        return ticks + self._rand.randrange(ticks)

    def _become_follower(self, term: int, leader: NodeId | None) -> None:
        self._reset(term)
        self._role = Role.FOLLOWER
        self._leader = leader

    # ----------------------------------------------------------------- message handling

    def _answer_stale(self, msg: Message) -> None:
        """A message from an older term. Tell a stale leader about the newer term (with
        pre-vote or check-quorum it would otherwise never learn it), refuse pre-votes
        so the sender stops campaigning, drop everything else."""
        if msg.type in (T.APPEND, T.HEARTBEAT):
            if self._cfg.check_quorum or self._cfg.pre_vote:
                self._send(T.APPEND_RESP, msg.src)
        elif msg.type == T.PRE_VOTE:
            self._send(T.PRE_VOTE_RESP, msg.src, reject=True)

    def _step_candidate(self, msg: Message) -> None:
        if msg.type in (T.APPEND, T.HEARTBEAT, T.SNAPSHOT):
            self._become_follower(self._term, msg.src)
            self._receive_from_leader(msg)
        elif msg.type == T.PRE_VOTE_RESP and self._role == Role.PRE_CANDIDATE:
            if msg.term == self._term + 1 or msg.reject:
                self._poll(msg.src, granted=not msg.reject, held=msg.held)
        elif msg.type == T.VOTE_RESP and self._role == Role.CANDIDATE:
            self._poll(msg.src, granted=not msg.reject, held=msg.held)

    def _commit_to(self, index: int) -> None:
        """Move the commit index and put committed membership changes into force."""
        self._commit = index
        self._apply_conf_through(index)
        if self._role == Role.LEADER and self._reads_waiting and self._commit_term_ok(index):
            waiting, self._reads_waiting = self._reads_waiting, []
            for read in waiting:
                self._queue_read(read)

    def _settle_conf(self, entries: Sequence[Entry]) -> None:
        """A change is only proposed once the previous one committed, so every CONFIG
        entry before the last one in the log is committed, known or not: put those in
        force now. A node that lost its commit index (a crash between persisting the
        entries and the hard state) would otherwise count votes under a membership two
        changes old, whose majorities need not overlap the current one's."""
        for entry in reversed(entries):
            if entry.kind == EntryKind.CONFIG:
                self._apply_conf_through(entry.index - 1)
                return

    def _apply_conf_through(self, index: int) -> None:
        """Put the CONFIG entries up to `index` (all committed) into force, each once."""
        if index <= self._conf_scan:
            return
        for entry in self._log.slice(self._conf_scan + 1, index + 1):
            if entry.kind == EntryKind.CONFIG:
                change = decode_change(entry.data)
                if change is not None and self._membership.apply(entry.index, change):
                    self._conf_changed(change)
        self._conf_scan = index

    def _send(
        self,
        kind: MessageType,
        to: NodeId,
        *,
        index: int = 0,
        reject: bool = False,
        reject_hint: int = 0,
        log_term: int = 0,
        context: bytes = b"",
        held: bool = False,
    ) -> None:
        self._msgs.append(
            Message(
                kind,
                self._id,
                to,
                self._term,
                log_term=log_term,
                index=index,
                reject=reject,
                reject_hint=reject_hint,
                context=context,
                held=held,
            )
        )
