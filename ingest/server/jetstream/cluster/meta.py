"""The meta group's state machine: which streams exist, and on which servers.

Every JetStream server of a cluster applies the same operations in the same
order (they are the meta group's Raft log), so every server knows every
assignment and opens the streams it is a peer of. Operations are JSON: the
meta log is small and an operator may want to read it. Applying is
idempotent, since a restarted server replays the meta log from its last
snapshot. A snapshot is the assignments themselves; restoring one yields the
changes from what the server had, so it opens, updates and drops streams the
same way replaying the operations would have.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any


class MetaOpError(ValueError):
    """A meta log entry that is not an operation this version knows."""


@dataclass(frozen=True, slots=True)
class StreamAssignment:
    """Where one stream lives. `reply` is the creating client's inbox: the stream's
    first leader answers it, since only a peer can describe the new stream."""

    account: str
    config: dict[str, Any]
    peers: tuple[str, ...]
    group: str
    created: str
    reply: str = ""
    origin: tuple[str, ...] = ()  # the group's first voters: a newcomer replays from them
    restore: bool = False  # its first leader takes a backup for it (`STREAM.RESTORE`)

    @property
    def bootstrap(self) -> tuple[str, ...]:
        return self.origin or self.peers

    @property
    def name(self) -> str:
        return str(self.config["name"])

    @property
    def key(self) -> tuple[str, str]:
        return (self.account, self.name)


@dataclass(frozen=True, slots=True)
class Change:
    """What one applied operation did: `kind` is added, updated or removed."""

    kind: str
    assignment: StreamAssignment
    previous: StreamAssignment | None = None


@dataclass
class MetaState:
    streams: dict[tuple[str, str], StreamAssignment] = field(default_factory=dict)

    def apply(self, op: dict[str, Any]) -> Change | None:
        """Apply one decoded operation; None when it changes nothing (a replay)."""
        kind = op.get("op")
        if kind == "add_stream":
            new = _assignment(op)
            old = self.streams.get(new.key)
            if old is not None and old.group == new.group:
                return None
            self.streams[new.key] = new
            return Change("added", new, old)
        if kind == "update_stream":
            key = (str(op["account"]), str(op["config"]["name"]))
            old = self.streams.get(key)
            if old is None:
                return None
            peers = tuple(op.get("peers", old.peers))
            new = replace(old, config=dict(op["config"]), peers=peers, reply="")
            if new == replace(old, reply=""):
                return None
            self.streams[key] = new
            return Change("updated", new, old)
        if kind == "remove_stream":
            gone = self.streams.pop((str(op["account"]), str(op["name"])), None)
            return Change("removed", gone) if gone is not None else None
        raise MetaOpError(f"unknown meta operation {kind!r}")

    def snapshot(self) -> bytes:
        """Every assignment as `add_stream` would carry it, less the creating client's
        inbox: whoever restores this is past answering it."""
        ops = [_add_op(replace(sa, reply="")) for _, sa in sorted(self.streams.items())]
        return encode({"streams": ops})

    def restore(self, data: bytes) -> list[Change]:
        """Take a snapshot's assignments; what differs from the current ones, as changes."""
        doc = decode(data)
        ops = doc.get("streams")
        if not isinstance(ops, list):
            raise MetaOpError("meta snapshot lacks its streams")
        new = {sa.key: sa for sa in (_assignment(op) for op in ops)}
        old, self.streams = self.streams, new
        changes = [Change("removed", sa) for key, sa in sorted(old.items()) if key not in new]
        for key, sa in sorted(new.items()):
            was = old.get(key)
            if was is None or was.group != sa.group:
                changes.append(Change("added", sa, was))
            elif replace(was, reply="") != sa:
                changes.append(Change("updated", sa, was))
        return changes

    def in_account(self, account: str) -> Iterator[StreamAssignment]:
        """The account's streams in no order (a listing sorts what it shows)."""
        for (acc, _), sa in self.streams.items():
            if acc == account:
                yield sa

    def load(self) -> dict[str, int]:
        """Streams per server, the placement's measure of load."""
        count: dict[str, int] = {}
        for sa in self.streams.values():
            for peer in sa.peers:
                count[peer] = count.get(peer, 0) + 1
        return count


def _assignment(op: dict[str, Any]) -> StreamAssignment:
    try:
        return StreamAssignment(
            account=str(op["account"]),
            config=dict(op["config"]),
            peers=tuple(str(p) for p in op["peers"]),
            group=str(op["group"]),
            created=str(op["created"]),
            reply=str(op.get("reply") or ""),
            origin=tuple(str(p) for p in op.get("origin") or op["peers"]),
            restore=op.get("restore") is True,
        )
    except (KeyError, TypeError) as exc:
        raise MetaOpError(f"add_stream operation lacks {exc}") from None


def add_stream(sa: StreamAssignment) -> bytes:
    return encode(_add_op(sa))


def _add_op(sa: StreamAssignment) -> dict[str, Any]:
    return {
        "op": "add_stream",
        "account": sa.account,
        "config": sa.config,
        "peers": list(sa.peers),
        "group": sa.group,
        "created": sa.created,
        "reply": sa.reply,
        "origin": list(sa.bootstrap),
        **({"restore": True} if sa.restore else {}),
    }


def update_stream(account: str, config: dict[str, Any], peers: tuple[str, ...]) -> bytes:
    return encode({"op": "update_stream", "account": account, "config": config, "peers": peers})


def remove_stream(account: str, name: str) -> bytes:
    return encode({"op": "remove_stream", "account": account, "name": name})


def encode(op: dict[str, Any]) -> bytes:
    return json.dumps(op, separators=(",", ":")).encode()


def decode(data: bytes) -> dict[str, Any]:
    try:
        op = json.loads(data)
    except ValueError as exc:
        raise MetaOpError(f"meta log entry is not JSON: {exc}") from None
    if not isinstance(op, dict):
        raise MetaOpError("meta log entry is not a JSON object")
    return op
