"""The values that cross the Raft core's boundary: entries, messages, hard state, output.

The core (`consensus.core`) is a pure state machine in the style of etcd-io/raft:
the caller feeds it `tick()`, `step(Message)` and `propose(...)`, and takes a
`Ready` from it that says what to persist, what to send and what to apply. Every
other module (the disk log, the simulator, the asyncio driver, the transport)
speaks only these types, so each can be built and tested without the others.
Everything here is immutable: the simulator duplicates and reorders messages,
and a message that could be mutated after it was "sent" would hide bugs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

NodeId = str  # a server name in a cluster; any unique string in tests


class EntryKind(IntEnum):
    NORMAL = 0  # a proposal of the state machine's (opaque bytes)
    NOOP = 1  # appended by every new leader, so it can commit entries of older terms
    CONFIG = 2  # a membership change; `data` is `ConfChange.encode()`


@dataclass(frozen=True, slots=True)
class Entry:
    term: int
    index: int
    kind: EntryKind = EntryKind.NORMAL
    data: bytes = b""


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be durable before the node answers anyone (vote before granting it)."""

    term: int = 0
    vote: NodeId | None = None
    commit: int = 0


class ConfOp(IntEnum):
    ADD_LEARNER = 0  # joins without a vote; catches up first
    PROMOTE = 1  # a caught-up learner becomes a voter
    REMOVE = 2  # a voter or learner leaves


@dataclass(frozen=True, slots=True)
class ConfChange:
    """One server at a time: a second change while one is uncommitted is refused."""

    op: ConfOp
    node: NodeId

    def encode(self) -> bytes:
        return bytes([self.op]) + self.node.encode()

    @classmethod
    def decode(cls, data: bytes) -> ConfChange:
        return cls(ConfOp(data[0]), data[1:].decode())


@dataclass(frozen=True, slots=True)
class ConfState:
    voters: frozenset[NodeId]
    learners: frozenset[NodeId] = frozenset()


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    index: int  # the last entry the snapshot covers
    term: int  # that entry's term
    conf: ConfState  # membership as of `index`


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The state machine's own bytes: for a stream, its state, not its messages."""

    meta: SnapshotMeta
    data: bytes = b""


class MessageType(IntEnum):
    PRE_VOTE = 0
    PRE_VOTE_RESP = 1
    VOTE = 2
    VOTE_RESP = 3
    APPEND = 4  # entries (possibly none) after (index, log_term), with the leader's commit
    APPEND_RESP = 5  # index = last index matched (on reject: the index refused); hint/log_term
    HEARTBEAT = 6  # commit = min(leader commit, follower's match); context = ReadIndex round
    HEARTBEAT_RESP = 7  # index = the follower's last index (shows a log that recovery cut)
    SNAPSHOT = 8  # InstallSnapshot
    TIMEOUT_NOW = 9  # leader transfer: campaign now, skipping pre-vote
    READ_INDEX = 10  # a follower forwards a linearizable read to the leader
    READ_INDEX_RESP = 11


@dataclass(frozen=True, slots=True)
class Message:
    """One Raft RPC. Fields a type does not use stay at their defaults.

    APPEND_RESP with `reject=True` carries the follower's fast back-off hint:
    `reject_hint` is the first index of the conflicting term (or the follower's
    last index + 1 when its log is too short) and `log_term` that term (0 if too short).
    """

    type: MessageType
    src: NodeId
    dst: NodeId
    term: int
    log_term: int = 0
    index: int = 0
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    reject: bool = False
    reject_hint: int = 0
    context: bytes = b""
    snapshot: Snapshot | None = None
    # The sender is held back (`Restored`): on a vote response, `reject` then answers
    # the held election (see `RaftCore._held_election_won`), never an ordinary one; on
    # a VOTE it says the candidate campaigns as a held node.
    held: bool = False


class Role(IntEnum):
    FOLLOWER = 0
    PRE_CANDIDATE = 1
    CANDIDATE = 2
    LEADER = 3


@dataclass(frozen=True, slots=True)
class ReadState:
    """A linearizable read may be served once the state machine applied `index`."""

    index: int
    context: bytes


@dataclass(slots=True)
class Ready:
    """What the caller must do, in this order:

    1. persist `snapshot` (if any), then `entries` (an entry whose index is already
       in the log replaces it and everything after it), then `hard_state` (if any);
       under `always` (and always for a changed term or vote) fsync before step 2;
    2. send `messages`;
    3. apply `committed` (and restore `snapshot` into the state machine first, if
       any), serve `read_states` once applied reaches their index;
    then call `core.advance(ready)`.
    """

    hard_state: HardState | None = None
    entries: list[Entry] = field(default_factory=list)
    snapshot: Snapshot | None = None
    messages: list[Message] = field(default_factory=list)
    committed: list[Entry] = field(default_factory=list)
    read_states: list[ReadState] = field(default_factory=list)
    must_sync: bool = False  # the term or vote changed: fsync even under a sync window

    def __bool__(self) -> bool:
        return bool(
            self.hard_state
            or self.entries
            or self.snapshot
            or self.messages
            or self.committed
            or self.read_states
        )


@dataclass(frozen=True, slots=True)
class Restored:
    """What a node's durable log held at start; what the core is built from."""

    hard_state: HardState = HardState()
    snapshot: SnapshotMeta | None = None
    entries: tuple[Entry, ...] = ()  # after the snapshot, contiguous
    # Recovery cut a damaged entry: the node may have acknowledged entries up to
    # here that it no longer holds, so it is held (no ordinary vote or election,
    # see `consensus.core`) until a leader has filled its log up to this index (a
    # bit flip on a minority can then never combine with a crash elsewhere into a
    # lost write). 0: nothing cut.
    vote_floor: int = 0
    # The node lost power (a reboot) while its log held writes not yet fsynced, under a
    # sync window: it may have acknowledged entries it no longer holds, and a clean
    # truncation does not say how many. It is held until its log holds an entry of a
    # term above this one (the highest term it knew at the restart): then its log is a
    # prefix of a leader's elected without it, which holds everything committed before.
    # 0: no reboot to account for.
    reboot_term: int = 0


class RaftError(Exception):
    """Base of the errors the core raises to its caller."""


class NotLeaderError(RaftError):
    """A proposal, read or change reached a node that is not the leader."""

    def __init__(self, leader: NodeId | None) -> None:
        super().__init__(f"not the leader (leader: {leader or 'unknown'})")
        self.leader = leader


class ChangeInProgressError(RaftError):
    """A membership change while another is uncommitted (or a transfer is running)."""


class NotCaughtUpError(RaftError):
    """A learner asked to become a voter before its log reached the leader's commit."""
