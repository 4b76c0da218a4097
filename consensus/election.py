"""Elections: who may vote and campaign, and how a candidate counts its votes.

`RaftCore` inherits this; it is split out only to keep each module readable, and
shares the core's state (declared below, initialised in `RaftCore.__init__`).

Held nodes. A node that may have lost entries it acknowledged (recovery cut a
damaged log: `Restored.vote_floor`; or it lost power with unsynced writes under
a sync window: `Restored.reboot_term`) is held: its vote could elect a log
without them, so it grants no ordinary vote, and its own vote does not count
in an ordinary election. While a healthy majority exists that costs nothing.
When a majority is held at once (a majority lost power together), nobody could
be elected, so held nodes have an election of their own: a held voter answers
a (pre-)vote with `held=True` and grants it by the election restriction alone
(one vote per term, the candidate's log at least as up to date as its own);
a candidate that holds such grants from a majority of voters, every one of
them held (itself counted only if it is held too), wins. Its log is then at
least as up to date as what a majority of the held logs kept: an entry
committed on a majority is lost only if the nodes of that majority that
granted had all lost it, i.e. a majority was held back at once (lost power,
or found damage, before catching up) and lost it there, which is outside the
durability promise (under `always` a power loss takes nothing acknowledged).
An unheld voter's grant never counts towards the held path and a held one's
never towards the ordinary one, so with a minority held the held path cannot
win (its majority would need an unheld member), and the ordinary one is plain
Raft among the whole logs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from consensus.raft_log import RaftLog
from consensus.types import ConfState, Message, MessageType, NodeId, Role

if TYPE_CHECKING:
    from consensus.core import Config

T = MessageType
# The context of a VOTE sent by a campaign that TIMEOUT_NOW started: voters grant
# it even inside a leader lease, since the current leader asked for it.
TRANSFER_CONTEXT = b"transfer"


class ElectionRole:
    _cfg: Config
    _id: NodeId
    _term: int
    _role: Role
    _vote: NodeId | None
    _leader: NodeId | None
    _log: RaftLog
    _msgs: list[Message]
    _votes: dict[NodeId, tuple[bool, bool]]  # voter -> (granted, held)
    _vote_floor: int
    _reboot_term: int
    _election_elapsed: int

    if TYPE_CHECKING:

        @property
        def conf(self) -> ConfState: ...
        def _reset(self, term: int) -> None: ...
        def _become_follower(self, term: int, leader: NodeId | None) -> None: ...
        def _become_leader(self) -> None: ...
        def _has_quorum(self, ids: Iterable[NodeId]) -> bool: ...
        def _send(self, kind: MessageType, to: NodeId, **fields: object) -> None: ...

    def _log_up_to_date(self, last_term: int, last_index: int) -> bool:
        """The election restriction: a candidate's log holds every committed entry."""
        my_term = self._log.last_term
        return last_term > my_term or (last_term == my_term and last_index >= self._log.last_index)

    def _can_grant_vote(self, msg: Message) -> bool:
        """One vote per term, for an up-to-date log. A held node applies the same test,
        but its grant is a held one (`_answer_vote`), which only the held path counts."""
        free = self._vote == msg.src or (self._vote is None and self._leader is None)
        if msg.type == T.PRE_VOTE and msg.term > self._term:
            free = True  # a pre-vote binds nothing
        return free and self._log_up_to_date(msg.log_term, msg.index)

    def _can_campaign(self) -> bool:
        """A voter; a held one only through a pre-vote: it wins only where a majority
        grants it without counting its own vote, and until then nobody's term moves."""
        if self._id not in self.conf.voters:
            return False
        return self._cfg.pre_vote or not self._below_vote_floor()

    def _held_election_won(self, held_grants: Iterable[NodeId]) -> bool:
        """The held path: grants from a majority of voters that are all held. With only a
        minority held such a majority does not exist, which is what keeps a minority
        of power losses from costing an acknowledged entry."""
        return self._has_quorum(held_grants)

    @property
    def held_back(self) -> bool:
        """No ordinary vote or election until a leader refills what recovery lost (the
        caller keeps this on disk, so a second restart does not forget it)."""
        return self._below_vote_floor()

    def _below_vote_floor(self) -> bool:
        """Recovery cut entries this node may have acknowledged (`Restored.vote_floor`),
        or a power loss may have taken some (`_held_since_reboot`): its vote could
        elect a log without them. A lone voter's log is the group's: there is
        nothing to wait for."""
        if self.conf.voters == {self._id}:
            return False
        if self._vote_floor and self._log.last_index >= self._vote_floor:
            self._vote_floor = 0  # a leader filled the log up to it: the gap is closed
        return self._vote_floor > 0 or self._held_since_reboot()

    def _held_since_reboot(self) -> bool:
        """Held until the log holds an entry of a term above `Restored.reboot_term`.

        Why a newer term and not "caught up with the leader": every entry this
        node acknowledged before the power loss has a term <= reboot_term (a term
        change is fsynced before anything is sent in it). An entry of a later term
        comes only from that term's leader, elected without this node's vote, and
        by log matching the log up to it is that leader's, which holds every entry
        committed in earlier terms. Catching up with a leader of the same term
        would not do: the entries acknowledged last may be past what it resent
        so far, and the node cannot know how far it had got."""
        if self._reboot_term and self._log.last_term > self._reboot_term:
            self._reboot_term = 0
        return self._reboot_term > 0

    def _hup(self, forced: bool) -> None:
        if self._role == Role.LEADER or not self._can_campaign():
            return
        held = self._below_vote_floor()  # a held node always asks first (_can_campaign)
        self._start_election(pre=self._cfg.pre_vote and (held or not forced), forced=forced)

    def _start_election(self, pre: bool, forced: bool) -> None:
        if pre:
            self._reset(self._term)
            self._role = Role.PRE_CANDIDATE
            kind, term = T.PRE_VOTE, self._term + 1
        else:
            self._reset(self._term + 1)
            self._role = Role.CANDIDATE
            self._vote = self._id
            kind, term = T.VOTE, self._term
        held = self._below_vote_floor()
        self._poll(self._id, granted=True, held=held)
        if self._role not in (Role.PRE_CANDIDATE, Role.CANDIDATE):
            return  # a lone voter wins at once
        context = TRANSFER_CONTEXT if forced else b""
        for voter in sorted(self.conf.voters - {self._id}):
            self._msgs.append(
                Message(
                    kind,
                    self._id,
                    voter,
                    term,
                    log_term=self._log.last_term,
                    index=self._log.last_index,
                    context=context,
                    held=held,
                )
            )

    def _poll(self, voter: NodeId, granted: bool, held: bool) -> None:
        if voter not in self.conf.voters:
            return
        self._votes.setdefault(voter, (granted, held))
        if self._has_quorum(self._grants(held=False)) or self._held_election_won(
            self._grants(held=True)
        ):
            if self._role == Role.PRE_CANDIDATE:
                self._start_election(pre=False, forced=False)
            else:
                self._become_leader()
        elif self._has_quorum_against():
            self._become_follower(self._term, None)

    def _grants(self, held: bool) -> list[NodeId]:
        return [v for v, (g, h) in self._votes.items() if g and h == held]

    def _has_quorum_against(self) -> bool:
        """Neither path can still reach a majority, whatever the rest answer."""
        voters = self.conf.voters
        unanswered = len(voters) - len(self._votes)
        best = max(len(self._grants(held=False)), len(self._grants(held=True)))
        return unanswered + best <= len(voters) // 2

    def _answer_vote(self, msg: Message) -> None:
        kind = T.VOTE_RESP if msg.type == T.VOTE else T.PRE_VOTE_RESP
        held = self._below_vote_floor()
        if self._can_grant_vote(msg):
            # A held grant is still this term's one vote: it is recorded (and fsynced) alike.
            self._msgs.append(Message(kind, self._id, msg.src, msg.term, held=held))
            if msg.type == T.VOTE:
                self._vote = msg.src
                self._election_elapsed = 0
        else:
            self._send(kind, msg.src, reject=True, held=held)
