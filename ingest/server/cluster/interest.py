"""Who in the cluster wants which subjects: the pure bookkeeping behind RS+/RS- and RMSG.

Local interest is what this server's clients subscribed, counted per (subject,
queue) so a peer hears one RS+ per subject however many clients share it, and
a queue group's weight (its member count) as it changes. Remote interest is
what each peer announced, kept in a subject trie of its own so the server's
trie (and its hot path) stays exactly as it is without a cluster.

`Forwarding` decides where one published message goes: every route with plain
interest, and each queue group to one member in the whole cluster, here or on
one peer; that peer is told which groups it is to serve, so each group gets
the message once cluster-wide and a message never crosses a second route.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from ingest.parser.routes import encode_rsub, encode_runsub
from ingest.server.accounts.settings import GLOBAL_ACCOUNT
from ingest.server.sublist import Match, Sublist

P = TypeVar("P", bound=Hashable)  # a peer: the route connection, opaque here


class RemoteInterest(Generic[P]):
    """One subject (and queue group) a peer's clients are subscribed to."""

    __slots__ = ("peer", "queue", "subject", "weight")

    def __init__(self, peer: P, subject: str, queue: str | None, weight: int) -> None:
        self.peer = peer
        self.subject = subject
        self.queue = queue
        self.weight = weight


class LocalInterest:
    """Counts of this server's client subscriptions, per account; answers with the lines
    to broadcast (each names its account, so interest stays in it on every server)."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, str | None], int] = {}

    def added(self, subject: str, queue: str | None, account: str = GLOBAL_ACCOUNT) -> bytes | None:
        key = (account, subject, queue)
        count = self._counts.get(key, 0) + 1
        self._counts[key] = count
        if queue is None and count > 1:
            return None  # peers already route this subject here
        return encode_rsub(account, subject, queue, count)

    def removed(
        self, subject: str, queue: str | None, account: str = GLOBAL_ACCOUNT
    ) -> bytes | None:
        key = (account, subject, queue)
        count = self._counts.get(key, 0) - 1
        if count < 0:
            return None
        if count == 0:
            del self._counts[key]
            return encode_runsub(account, subject, queue)
        self._counts[key] = count
        return None if queue is None else encode_rsub(account, subject, queue, count)

    def snapshot(self) -> bytes:
        """All current interest, for a route that just registered."""
        return b"".join(
            encode_rsub(account, subject, queue, count)
            for (account, subject, queue), count in self._counts.items()
        )


class RemoteInterestMap(Generic[P]):
    """What every peer announced, one trie per account, and the routing decision for one
    message (made in the trie of the account it was published in)."""

    def __init__(self) -> None:
        self._tries: dict[str, Sublist[RemoteInterest[P]]] = {}
        self._by_peer: dict[P, dict[tuple[str, str, str | None], RemoteInterest[P]]] = {}
        # Told (account, subject, queue, change in members) as peers' interest changes:
        # a hub's leafnode links pass it on.
        self.watch: Callable[[str, str, str | None, int], None] | None = None

    def add(
        self, peer: P, subject: str, queue: str | None, weight: int, account: str = GLOBAL_ACCOUNT
    ) -> None:
        """RS+; for a known queue group it only updates the weight."""
        entries = self._by_peer.setdefault(peer, {})
        entry = entries.get((account, subject, queue))
        if entry is not None:
            before, entry.weight = entry.weight, weight
            self._told(account, entry, weight - before)
            return
        entry = RemoteInterest(peer, subject, queue, weight)
        entries[(account, subject, queue)] = entry
        self._tries.setdefault(account, Sublist()).insert(subject, queue, entry)
        self._told(account, entry, _members(entry))

    def remove(
        self, peer: P, subject: str, queue: str | None, account: str = GLOBAL_ACCOUNT
    ) -> None:
        entry = self._by_peer.get(peer, {}).pop((account, subject, queue), None)
        if entry is not None:
            self._tries[account].remove(subject, queue, entry)
            self._told(account, entry, -_members(entry))

    def drop(self, peer: P) -> None:
        """The peer is gone: everything it announced goes with it."""
        for (account, subject, queue), entry in self._by_peer.pop(peer, {}).items():
            self._tries[account].remove(subject, queue, entry)
            self._told(account, entry, -_members(entry))

    def transfer(self, old: P, new: P) -> set[tuple[str, str, str | None]]:
        """What `old` announced now stands for `new` (a twin connection to the same peer
        replaced it): no one is told of a change, as the peer's interest did not change.
        Returns the (account, subject, queue) keys moved, which `new` has yet to confirm."""
        moved = self._by_peer.pop(old, {})
        entries = self._by_peer.setdefault(new, {})
        for key, entry in moved.items():
            if key in entries:  # `new` announced it already: the twin's copy goes
                self._tries[key[0]].remove(key[1], key[2], entry)
                self._told(key[0], entry, -_members(entry))
            else:
                entry.peer = new
                entries[key] = entry
        return set(moved)

    def entries(self, account: str) -> list[tuple[str, str | None, int]]:
        """(subject, queue, members) of every peer's interest in `account`."""
        return [
            (entry.subject, entry.queue, _members(entry))
            for entries in self._by_peer.values()
            for (name, _, _), entry in entries.items()
            if name == account
        ]

    def _told(self, account: str, entry: RemoteInterest[P], delta: int) -> None:
        if self.watch is not None and delta:
            self.watch(account, entry.subject, entry.queue, delta)

    def count(self, peer: P) -> int:
        return len(self._by_peer.get(peer, ()))

    def subjects(self, peer: P) -> list[str]:
        return [subject for _, subject, _ in self._by_peer.get(peer, {})]

    def forwarding(self, subject: bytes, account: str = GLOBAL_ACCOUNT) -> Forwarding[P] | None:
        """The routing decision for one message on `subject`; None when no peer wants it."""
        trie = self._tries.get(account)
        if trie is None:
            return None
        match = trie.match(subject)
        if not match.plain and not match.queues:
            return None
        return Forwarding(match.plain, match.queues)

    def sole_peer(self, subject: bytes, account: str = GLOBAL_ACCOUNT) -> P | None:
        """The one peer that wants `subject` with plain interest and no queue group."""
        trie = self._tries.get(account)
        return _sole_peer(trie.match(subject) if trie is not None else None)

    def sole_peer_under(self, prefix: bytes, account: str = GLOBAL_ACCOUNT) -> P | None:
        """The one peer that takes every `prefix.<token>` with plain interest and no queue
        group, if the trie's last walk showed one (a client's reply inbox on that peer,
        `Sublist.tail_of`); else None."""
        trie = self._tries.get(account)
        return _sole_peer(trie.tail_of(prefix) if trie is not None else None)

    def sole_peer_below(self, prefix: bytes, account: str = GLOBAL_ACCOUNT) -> P | None:
        """`sole_peer_under` for every subject `prefix.<tokens…>`, as the trie's last walk
        decided them (`Sublist.decided_by`: a consumer's `$JS.ACK.<stream>.<consumer>.>`)."""
        trie = self._tries.get(account)
        return _sole_peer(trie.decided_by(prefix) if trie is not None else None)

    def wants_under(self, prefix: bytes, account: str = GLOBAL_ACCOUNT) -> bool:
        """Whether a peer announced interest that matches some subject `prefix.<tokens…>`."""
        trie = self._tries.get(account)
        return trie is not None and trie.reaches_under(prefix)


def _sole_peer(match: Match[RemoteInterest[P]] | None) -> P | None:
    """The one peer behind every plain entry of `match`, if it has no queue group and
    any plain entry at all; the rule the three `sole_peer` lookups share."""
    if match is None or match.queues or not match.plain:
        return None
    peer = match.plain[0].peer
    return peer if all(entry.peer == peer for entry in match.plain) else None


def _members(entry: RemoteInterest[Any]) -> int:
    """What one peer's interest counts for: a queue group its weight, a subject one."""
    return max(entry.weight, 1) if entry.queue is not None else 1


class Forwarding(Generic[P]):
    """Where one message goes: every peer with plain interest, and each queue group to one
    member in the whole cluster.

    A group with members here and on peers is decided by `takes`, which draws among all
    members alike (local ones count one each, a peer its group's weight): the reference
    spreads a group over the cluster this way rather than keeping it local.
    """

    __slots__ = ("_assigned", "_groups", "_plain")

    def __init__(
        self, plain: list[RemoteInterest[P]], queues: list[list[RemoteInterest[P]]]
    ) -> None:
        self._plain = [entry.peer for entry in plain]
        self._groups = {members[0].queue: members for members in queues}
        self._assigned: dict[P, list[bytes]] = {}

    def takes(self, queue: str | None, local_members: int) -> bool:
        """Whether a peer, not one of the `local_members`, serves this group this time."""
        remote = self._groups.pop(queue, None)
        if remote is None:
            return False
        weights = [max(m.weight, 1) for m in remote]
        if random.random() * (local_members + sum(weights)) < local_members:
            return False
        self._assign(remote, weights)
        return True

    def keep(self, queues: frozenset[str]) -> None:
        """Serve only these queue groups (the others were served where the message came from)."""
        self._groups = {q: m for q, m in self._groups.items() if q in queues}

    def targets(self) -> dict[P, list[bytes]]:
        """Routes to send the message to, each with the queue groups it is to serve."""
        for remote in self._groups.values():  # groups with no member here
            self._assign(remote, [max(m.weight, 1) for m in remote])
        self._groups = {}
        out: dict[P, list[bytes]] = {peer: [] for peer in self._plain}
        for peer, queues in self._assigned.items():
            out[peer] = queues
        return out

    def _assign(self, members: list[RemoteInterest[P]], weights: list[int]) -> None:
        pick = members[0] if len(members) == 1 else random.choices(members, weights)[0]
        if pick.queue is not None:
            name = pick.queue.encode("utf-8", "surrogateescape")
            self._assigned.setdefault(pick.peer, []).append(name)
