"""The follower half of the Raft core: what it does with its leader's APPENDs,
heartbeats and snapshots.

`RaftCore` inherits this; it shares the core's state (declared below, initialised
in `RaftCore.__init__`). The log-matching and commit rules it applies are the
core's named methods `_append_matches` and `_follower_commit_index`, which the
simulator's mutation tests break on purpose.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from consensus.membership import Membership
from consensus.raft_log import RaftLog
from consensus.types import (
    Entry,
    Message,
    MessageType,
    NodeId,
    ReadState,
    Snapshot,
)

T = MessageType


class FollowerRole:
    _leader: NodeId | None
    _log: RaftLog
    _membership: Membership
    _commit: int
    _conf_scan: int
    _snapshot: Snapshot | None
    _pending_snapshot: Snapshot | None
    _read_states: list[ReadState]
    _election_elapsed: int

    if TYPE_CHECKING:

        def _hup(self, forced: bool) -> None: ...
        def _append_matches(self, index: int, term: int) -> bool: ...
        def _follower_commit_index(self, leader_commit: int, matched: int) -> int: ...
        def _commit_to(self, index: int) -> None: ...
        def _settle_conf(self, entries: Sequence[Entry]) -> None: ...
        def _send(self, kind: MessageType, to: NodeId, **fields: object) -> None: ...

    def _step_follower(self, msg: Message) -> None:
        if msg.type in (T.APPEND, T.HEARTBEAT, T.SNAPSHOT):
            self._election_elapsed = 0
            self._leader = msg.src
            self._receive_from_leader(msg)
        elif msg.type == T.TIMEOUT_NOW:
            self._hup(forced=True)
        elif msg.type == T.READ_INDEX_RESP:
            self._read_states.append(ReadState(msg.index, msg.context))

    def _receive_from_leader(self, msg: Message) -> None:
        if msg.type == T.APPEND:
            self._handle_append(msg)
        elif msg.type == T.HEARTBEAT:
            self._commit_follower(self._follower_commit_index(msg.commit, self._log.last_index))
            self._send(T.HEARTBEAT_RESP, msg.src, index=self._log.last_index, context=msg.context)
        else:
            self._handle_snapshot(msg)

    def _handle_append(self, msg: Message) -> None:
        if msg.index < self._commit:
            msg = self._past_commit(msg)
            if msg.index < self._commit:
                self._send(T.APPEND_RESP, msg.src, index=self._commit)
                return
        if self._append_matches(msg.index, msg.log_term):
            changed = self._log.merge(msg.entries, self._commit)
            if changed is None:
                return
            self._conf_scan = min(self._conf_scan, changed - 1)
            self._settle_conf(msg.entries)
            last_new = msg.index + len(msg.entries)
            self._commit_follower(self._follower_commit_index(msg.commit, last_new))
            self._send(T.APPEND_RESP, msg.src, index=last_new)
            return
        if msg.index > self._log.last_index:
            hint, log_term = self._log.last_index + 1, 0
        else:
            hint = max(self._log.first_index_of_term(msg.index), self._commit + 1)
            log_term = self._log.term_at(msg.index) or 0
        self._send(
            T.APPEND_RESP,
            msg.src,
            index=msg.index,
            reject=True,
            reject_hint=hint,
            log_term=log_term,
        )

    def _past_commit(self, msg: Message) -> Message:
        """The part of an APPEND after this node's commit, as if sent from there. Entries up
        to the commit are the same in every log that has them, so the rest can be taken:
        a leader's farewell to a node it removed (sent once, from where the leader last
        knew the node to be) must bring the removal even to a node that has committed
        further since."""
        skip = self._commit - msg.index
        term = self._log.term_at(self._commit)
        if len(msg.entries) <= skip or term is None:
            return msg
        return replace(msg, index=self._commit, log_term=term, entries=msg.entries[skip:])

    def _handle_snapshot(self, msg: Message) -> None:
        snapshot = msg.snapshot
        assert snapshot is not None  # well_formed checked it
        meta = snapshot.meta
        if meta.index <= self._commit:
            self._send(T.APPEND_RESP, msg.src, index=self._commit)
            return
        if self._append_matches(meta.index, meta.term):
            self._commit_follower(meta.index)
        else:
            self._log.restore(meta.index, meta.term)
            self._membership.restore(meta.conf)
            self._commit = self._conf_scan = meta.index
            self._snapshot = self._pending_snapshot = snapshot
        self._send(T.APPEND_RESP, msg.src, index=meta.index)

    def _commit_follower(self, index: int) -> None:
        if index > self._commit:
            self._commit_to(index)
