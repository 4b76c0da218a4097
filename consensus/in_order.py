"""The plain-message paths: a message taken whole, without `step`, `ready` and `advance`.

`RaftCore` inherits this; it shares the core's state (declared below, initialised
in `RaftCore.__init__`). Each path does exactly what `step`, `ready` and `advance`
would for one plain message and declines any other (None, or False from
`quiet_answer`) having changed nothing: their preconditions ("nothing else under
way") are kept side by side here so they can be checked against each other. With
one publish at a time nearly every APPEND, its answer and an idle group's
heartbeats are plain, and building the general Ready around each was much of the
Raft part's cost. The simulator takes them on half its seeds, so a path that
differs from the general one shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from consensus.progress import Progress, ReplicaState
from consensus.raft_log import RaftLog
from consensus.read_index import PendingRead
from consensus.types import (
    Entry,
    HardState,
    Message,
    MessageType,
    NodeId,
    ReadState,
    Ready,
    Role,
    Snapshot,
)
from consensus.wellformed import well_formed

if TYPE_CHECKING:
    from consensus.core import Config

T = MessageType


class InOrderPaths:
    _cfg: Config
    _id: NodeId
    _term: int
    _role: Role
    _leader: NodeId | None
    _vote: NodeId | None
    _log: RaftLog
    _commit: int
    _applied: int
    _prev_hs: HardState
    _outstanding: Ready | None
    _msgs: list[Message]
    _read_states: list[ReadState]
    _pending_snapshot: Snapshot | None
    _progress: dict[NodeId, Progress]
    _reads_waiting: list[PendingRead]
    _transferee: NodeId | None
    _pending_conf_index: int
    _election_elapsed: int

    if TYPE_CHECKING:

        @property
        def held_back(self) -> bool: ...
        def _hs_changed(self) -> bool: ...
        def _append_matches(self, index: int, term: int) -> bool: ...
        def _follower_commit_index(self, leader_commit: int, matched: int) -> int: ...
        def _settle_conf(self, entries: Sequence[Entry]) -> None: ...
        def _commit_to(self, index: int) -> None: ...
        def _commit_term_ok(self, index: int) -> bool: ...
        def _quorum_index(self) -> int: ...

    def quiet_heartbeat(self, src: NodeId, term: int, commit: int) -> int | None:
        """A heartbeat without a read round that tells this follower nothing new: its
        leader's, in its term, with a commit it knows, nothing queued ahead of its
        answer. Taken as `step` would (the election timer restarts) but with no Message
        and no Ready: the index to answer with (`HEARTBEAT_RESP`'s), or None if it is not
        that plain: then `step` the whole message. An idle group's followers get two a
        second each, and most of their cost was building and stepping messages."""
        if (
            self._role != Role.FOLLOWER
            or term != self._term
            or src != self._leader
            or self._msgs
            or min(commit, self._log.last_index) > self._commit
        ):
            return None
        self._election_elapsed = 0
        return self._log.last_index

    def append_in_order(self, msg: Message) -> Ready | None:
        """A follower's plain APPEND taken whole, without `step`, `ready` and `advance`:
        the Ready it makes, already advanced, for the caller to carry out in the
        contract's order (write the entries and hard state, send the answer, apply what
        committed); None if it is not that plain, and nothing changed: `step` it.

        Plain: its leader's, in its term, with entries that follow this node's last
        entry, whose term it names (`_follows_log`), while nothing else is under way
        (no Ready out, nothing queued, unwritten, unapplied or held back). With one
        publish at a time every APPEND a follower gets is one, and building the general
        Ready around it was a third of the follower's Raft part. What it does is what
        `step` and `ready` would: the election timer restarts, the entries are appended,
        the commit moves as far as the leader's and the entries allow."""
        log = self._log
        last = log.last_index
        if (
            msg.type != T.APPEND
            or not msg.entries
            or self._role != Role.FOLLOWER
            or msg.term != self._term
            or msg.src != self._leader
            or msg.dst != self._id
            or self._outstanding is not None
            or self._msgs
            or self._read_states
            or self._pending_snapshot is not None
            or log.unstable_from <= last
            or self._applied != self._commit
            or self._hs_changed()
            or self.held_back
            or not self._follows_log(msg)
            or not well_formed(msg)
        ):
            return None
        self._election_elapsed = 0
        entries = list(msg.entries)
        log.append(entries)
        self._settle_conf(entries)
        last = log.last_index
        answer = Message(T.APPEND_RESP, self._id, msg.src, self._term, index=last)
        rd = Ready(entries=entries, messages=[answer])
        commit = self._follower_commit_index(msg.commit, last)
        if commit > self._commit:
            self._commit_in_place(rd, commit)
        log.stable_to(last, entries[-1].term)
        return rd

    def in_order(self, msg: Message) -> Ready | None:
        """`append_in_order` of an APPEND, `answer_in_order` of its answer; None for any
        other message, or one that is not plain: `step` it."""
        if msg.type == T.APPEND:
            return self.append_in_order(msg)
        if msg.type == T.APPEND_RESP:
            return self.answer_in_order(msg)
        return None

    def _follows_log(self, msg: Message) -> bool:
        """The APPEND's entries go right after this node's last entry: no gap, no overlap."""
        return msg.index == self._log.last_index and self._append_matches(msg.index, msg.log_term)

    def quiet_answer(self, src: NodeId, term: int, index: int) -> bool:
        """A heartbeat's answer without a read round from a follower that holds the whole
        log, in this leader's term: it only says the follower is alive. Taken as `step`
        would, with no Message; False if it is not that plain (a lagging or cut log, a
        full window to unblock): then `step` the whole message."""
        if self._role != Role.LEADER or term != self._term:
            return False
        pr = self._progress.get(src)
        last = self._log.last_index
        if (
            pr is None
            or pr.match != last
            or index < last
            or (pr.state == ReplicaState.REPLICATE and len(pr.inflight) >= self._cfg.max_inflight)
        ):
            return False
        pr.recent_active = True
        pr.probe_sent = False
        return True

    def answer_in_order(self, msg: Message) -> Ready | None:
        """A leader's plain APPEND answer taken whole, without `step`, `ready` and
        `advance`: the Ready it makes, already advanced (the commit's hard state and the
        entries to apply; empty when it moves no commit), for the caller to carry out in
        the contract's order; None if it is not that plain, and nothing changed: `step` it.

        Plain: an acceptance in this leader's term, news from a follower it streams to
        with nothing left to send it (`_acked_in_order`), under `lazy_commit` (no empty
        APPEND for the commit), while nothing else is under way: no Ready out, nothing
        queued, unwritten or unapplied, no membership change past the commit (so none
        takes effect here), no leader transfer, no read waiting for the commit. With one
        publish at a time both answers to each are: the first commits it, the second
        moves nothing. What it does is what `step` and `ready` would: the follower is
        active, its match moves, and the commit moves to what a quorum holds."""
        log = self._log
        if (
            msg.type != T.APPEND_RESP
            or self._role != Role.LEADER
            or msg.term != self._term
            or msg.dst != self._id
            or not self._cfg.lazy_commit
            or self._outstanding is not None
            or self._msgs
            or self._read_states
            or self._reads_waiting
            or self._transferee is not None
            or self._pending_conf_index > self._commit
            or log.unstable_from <= log.last_index
            or self._applied != self._commit
            or self._hs_changed()
        ):
            return None
        pr = self._progress.get(msg.src)
        if pr is None or not self._acked_in_order(pr, msg) or not well_formed(msg):
            return None
        pr.recent_active = True
        pr.acknowledge(msg.index)
        rd = Ready()
        if msg.index > self._commit:  # at or below it, it cannot move it (`_handle_ack`)
            index = self._quorum_index()
            if index > self._commit and self._commit_term_ok(index):
                self._commit_in_place(rd, index)
        return rd

    def _commit_in_place(self, rd: Ready, index: int) -> None:
        """Commit to `index` into a Ready handed out already advanced: the entries to
        apply, the hard state to write, and the apply counted as done (the caller does it
        before anything else reaches the core)."""
        rd.committed = self._log.slice(self._commit + 1, index + 1)
        self._commit_to(index)
        rd.hard_state = self._prev_hs = HardState(self._term, self._vote, index)
        self._applied = index

    def _acked_in_order(self, pr: Progress, msg: Message) -> bool:
        """The answer accepts entries the follower did not hold, all of them sent by this
        leader, and the follower has been sent the log's end: its match moves, nothing
        more goes to it."""
        last = self._log.last_index
        return (
            not msg.reject
            and pr.state == ReplicaState.REPLICATE
            and pr.match < msg.index <= last
            and pr.next > last
        )
