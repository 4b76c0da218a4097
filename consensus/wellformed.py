"""Shape checks for messages from peers, so that no bytes a peer sends can raise in the core.

The transport decodes whatever arrives into a `Message`; a buggy or hostile peer
can still produce negative indices, gaps in an entry run or a SNAPSHOT without
a snapshot. The core drops such a message instead of reasoning about it.
"""

from __future__ import annotations

from consensus.types import (
    ConfState,
    Entry,
    EntryKind,
    Message,
    MessageType,
    Snapshot,
    SnapshotMeta,
)


def _count(value: object) -> bool:
    return type(value) is int and value >= 0


def _entries_ok(msg: Message) -> bool:
    previous_term = msg.log_term
    for offset, entry in enumerate(msg.entries):
        if not (
            type(entry) is Entry
            and entry.index == msg.index + 1 + offset
            and _count(entry.term)
            and previous_term <= entry.term <= msg.term
            and isinstance(entry.kind, EntryKind)
            and isinstance(entry.data, bytes)
        ):
            return False
        previous_term = entry.term
    return True


def _snapshot_ok(snapshot: object) -> bool:
    if not isinstance(snapshot, Snapshot) or not isinstance(snapshot.data, bytes):
        return False
    meta = snapshot.meta
    return (
        isinstance(meta, SnapshotMeta)
        and _count(meta.index)
        and _count(meta.term)
        and isinstance(meta.conf, ConfState)
        and isinstance(meta.conf.voters, frozenset)
        and isinstance(meta.conf.learners, frozenset)
        and all(isinstance(n, str) for n in meta.conf.voters | meta.conf.learners)
    )


def well_formed(msg: object) -> bool:
    if type(msg) is not Message:
        return False
    if not (
        type(msg.src) is str
        and type(msg.dst) is str
        and msg.src
        and _count(msg.term)
        and _count(msg.log_term)
        and _count(msg.index)
        and _count(msg.commit)
        and _count(msg.reject_hint)
        and type(msg.reject) is bool
        and type(msg.held) is bool
        and type(msg.context) is bytes
        and isinstance(msg.type, MessageType)
        and type(msg.entries) is tuple
        and (not msg.entries or _entries_ok(msg))
    ):
        return False
    if msg.type == MessageType.SNAPSHOT:
        return _snapshot_ok(msg.snapshot) and msg.snapshot.meta.term <= msg.term  # type: ignore[union-attr]
    return True
