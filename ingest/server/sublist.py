"""Subject trie that maps a published subject to its subscriptions.

Matching is the hottest lookup in the server, so results are cached per
subject; any insert or removal clears the cache (subscriptions change far less
often than messages flow, and nats clients use one wildcard inbox for all
requests). Queue subscriptions are grouped per queue name so that the router
can pick one member of each group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from typing import Generic, TypeVar

S = TypeVar("S")

_CACHE_LIMIT = 4096


@dataclass(slots=True)
class _Node(Generic[S]):
    children: dict[str, _Node[S]] = field(default_factory=dict)
    plain: list[S] = field(default_factory=list)
    queues: dict[str, list[S]] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.children or self.plain or self.queues)


@dataclass(slots=True)
class Match(Generic[S]):
    plain: list[S]
    queues: list[list[S]]  # one list of members per queue group


class Sublist(Generic[S]):
    """Subscriptions keyed by (possibly wildcard) subject; values are opaque to the trie."""

    def __init__(self) -> None:
        self._root: _Node[S] = _Node()
        self._cache: dict[bytes, Match[S]] = {}
        self.count = 0
        self.on_change: Callable[[], None] | None = None  # interest came or went (JetStream)

    def insert(self, subject: str, queue: str | None, sub: S) -> None:
        node = self._root
        for tok in subject.split("."):
            child = node.children.get(tok)
            if child is None:
                child = node.children[tok] = _Node()
            node = child
        if queue is None:
            node.plain.append(sub)
        else:
            node.queues.setdefault(queue, []).append(sub)
        self.count += 1
        self._cache.clear()
        if self.on_change is not None:
            self.on_change()

    def remove(self, subject: str, queue: str | None, sub: S) -> bool:
        path: list[tuple[_Node[S], str]] = []
        node = self._root
        for tok in subject.split("."):
            child = node.children.get(tok)
            if child is None:
                return False
            path.append((node, tok))
            node = child
        members = node.plain if queue is None else node.queues.get(queue)
        if members is None or sub not in members:
            return False
        members.remove(sub)
        if queue is not None and not members:
            del node.queues[queue]
        for parent, tok in reversed(path):
            if not parent.children[tok].empty():
                break
            del parent.children[tok]
        self.count -= 1
        self._cache.clear()
        if self.on_change is not None:
            self.on_change()
        return True

    def match(self, subject: bytes) -> Match[S]:
        hit = self._cache.get(subject)
        if hit is not None:
            return hit
        result: Match[S] = Match([], [])
        tokens = subject.decode("utf-8", "surrogateescape").split(".")
        if "" not in tokens:  # an empty token matches nothing, not even ">"
            queues: dict[str, list[S]] = {}
            self._collect(tokens, result.plain, queues)
            result.queues = list(queues.values())
        cache = self._cache
        if len(cache) >= _CACHE_LIMIT:
            # Drop the older half: unique subjects (request inboxes) must not evict hot ones.
            for key in list(islice(cache, _CACHE_LIMIT // 2)):
                del cache[key]
        cache[subject] = result
        return result

    def _collect(self, tokens: list[str], plain: list[S], queues: dict[str, list[S]]) -> None:
        """Walk level by level; `>` children match the rest, `*` children one token."""
        gather = self._gather
        nodes = [self._root]
        for tok in tokens:
            following: list[_Node[S]] = []
            for node in nodes:
                children = node.children
                if not children:
                    continue
                fwc = children.get(">")
                if fwc is not None:
                    gather(fwc, plain, queues)
                child = children.get(tok)
                if child is not None:
                    following.append(child)
                if tok != "*":  # a literal "*" published non-pedantically is visited once
                    pwc = children.get("*")
                    if pwc is not None:
                        following.append(pwc)
            if not following:
                return
            nodes = following
        for node in nodes:
            gather(node, plain, queues)

    @staticmethod
    def _gather(node: _Node[S], plain: list[S], queues: dict[str, list[S]]) -> None:
        plain.extend(node.plain)
        for name, members in node.queues.items():
            queues.setdefault(name, []).extend(members)

    def subjects(self) -> list[str]:
        """Every subscribed subject, for monitoring."""
        out: list[str] = []
        stack: list[tuple[_Node[S], str]] = [(self._root, "")]
        while stack:
            node, prefix = stack.pop()
            if node.plain or node.queues:
                out.append(prefix)
            for tok, child in node.children.items():
                stack.append((child, f"{prefix}.{tok}" if prefix else tok))
        return out

    def cache_size(self) -> int:
        return len(self._cache)
