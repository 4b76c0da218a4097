"""Group membership: which changes are allowed, and what the membership was at an index.

Changes go one server at a time and take effect when their entry commits, so
the membership in force is the snapshot's plus every committed CONFIG entry
after it. The history of those committed changes is kept (back to the
snapshot) because a snapshot taken at an applied index must carry the
membership as of that index, which can trail the newest one.
"""

from __future__ import annotations

from consensus.types import ConfChange, ConfOp, ConfState, NodeId, RaftError


class InvalidChangeError(RaftError):
    """A membership change that does not fit the current membership."""


def decode_change(data: bytes) -> ConfChange | None:
    """None for bytes that are not a change (a peer's bad entry must not crash a node)."""
    try:
        return ConfChange.decode(data)
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def check_change(conf: ConfState, change: ConfChange) -> None:
    """Raise InvalidChangeError unless `change` is meaningful against `conf`."""
    node = change.node
    if change.op == ConfOp.ADD_LEARNER:
        if node in conf.voters or node in conf.learners:
            raise InvalidChangeError(f"{node} is already a member")
    elif change.op == ConfOp.PROMOTE:
        if node not in conf.learners:
            raise InvalidChangeError(f"{node} is not a learner")
    elif node not in conf.voters and node not in conf.learners:
        raise InvalidChangeError(f"{node} is not a member")
    elif conf.voters == {node}:
        raise InvalidChangeError(f"{node} is the last voter")


def changed(conf: ConfState, change: ConfChange) -> ConfState:
    node = change.node
    if change.op == ConfOp.ADD_LEARNER:
        return ConfState(conf.voters, conf.learners | {node})
    if change.op == ConfOp.PROMOTE:
        return ConfState(conf.voters | {node}, conf.learners - {node})
    return ConfState(conf.voters - {node}, conf.learners - {node})


class Membership:
    """The membership in force, and the committed changes since the snapshot."""

    __slots__ = ("_base", "_history")

    def __init__(self, conf: ConfState) -> None:
        self._base = conf
        self._history: list[tuple[int, ConfState]] = []

    @property
    def conf(self) -> ConfState:
        return self._history[-1][1] if self._history else self._base

    def members(self) -> frozenset[NodeId]:
        conf = self.conf
        return conf.voters | conf.learners

    def apply(self, index: int, change: ConfChange) -> ConfState | None:
        """Apply a committed change; None (and nothing changes) if it does not fit."""
        try:
            check_change(self.conf, change)
        except InvalidChangeError:
            return None
        conf = changed(self.conf, change)
        self._history.append((index, conf))
        return conf

    def conf_at(self, index: int) -> ConfState:
        conf = self._base
        for at, later in self._history:
            if at > index:
                break
            conf = later
        return conf

    def compact(self, index: int) -> None:
        conf = self.conf_at(index)
        self._history = [(at, c) for at, c in self._history if at > index]
        self._base = conf

    def restore(self, conf: ConfState) -> None:
        self._base = conf
        self._history = []
