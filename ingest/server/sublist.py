"""Subject trie that maps a published subject to its subscriptions.

Matching is the hottest lookup in the server, so results are cached per
subject; any insert or removal clears the caches (subscriptions change far less
often than messages flow). Queue subscriptions are grouped per queue name so
that the router can pick one member of each group.

Many subjects are seen once: every request's reply inbox (`_INBOX.<id>.<n>`),
every JetStream ack (`$JS.ACK.<stream>.<consumer>.<seqs…>`). Their match is
decided by a prefix, so two more caches answer them without a walk:
- a *tail* entry for a prefix holds the match of any one further token that is
  not a literal child at that level (the inbox case);
- a *dead-end* entry holds the match once the walk ran out of nodes at the next
  token, whatever follows (the `…>` case).
Each entry keeps the literal children that would change the answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Generic, TypeVar

from ingest.parser import fast

S = TypeVar("S")
_V = TypeVar("_V")

_CACHE_LIMIT = 4096
_FEW_CUTS = 8  # past this many prefix lengths, walking the subject's dots is cheaper


@dataclass(slots=True)
class _Node(Generic[S]):
    children: dict[str, _Node[S]] = field(default_factory=dict)
    plain: list[S] = field(default_factory=list)
    queues: dict[str, list[S]] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.children or self.plain or self.queues)


@dataclass(slots=True)
class _PrefixEntry(Generic[S]):
    match: Match[S]
    literals: frozenset[str]  # next tokens that must take the full walk


_SPECIAL = frozenset({"", "*", ">"})
_ACK_OVERLAPS = frozenset({"$JS", "*", ">"})  # first tokens of subjects that match acks


@dataclass(slots=True)
class Match(Generic[S]):
    plain: list[S]
    queues: list[list[S]]  # one list of members per queue group


class Sublist(Generic[S]):
    """Subscriptions keyed by (possibly wildcard) subject; values are opaque to the trie."""

    def __init__(self) -> None:
        self._root: _Node[S] = _Node()
        self._cache: dict[bytes, Match[S]] = {}
        self._tails: dict[bytes, _PrefixEntry[S]] = {}
        self._dead_ends: dict[bytes, _PrefixEntry[S]] = {}
        # Byte lengths of the prefixes in _tails and _dead_ends: only a dot at one of
        # them can end a cached prefix, so a lookup slices and hashes at those offsets
        # alone (an ack tries its consumer's dead end, not every prefix of its subject).
        self._tail_cuts: set[int] = set()
        self._dead_end_cuts: set[int] = set()
        self.count = 0
        # Counters /subsz reports as the reference does (lookups answered by a cache are hits).
        self.inserts = self.removes = self.matches = self.cache_hits = 0
        self.on_change: Callable[[], None] | None = None  # interest came or went (JetStream)
        # Told of each insert (+1) and remove (-1) with the subscription: leafnode links
        # announce the account's interest from it.
        self.watch: Callable[[str, str | None, S, int], None] | None = None
        # The compiled codec's table of where subjects go (None without the extension):
        # filled by clients from this sublist's matches, cleared with its caches.
        self.routes: Any = fast.routes()

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
        self.inserts += 1
        self._changed(subject, queue, sub, 1)

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
        self.removes += 1
        self._changed(subject, queue, sub, -1)
        return True

    def peek(self, subject: bytes) -> Match[S] | None:
        """The cached match of this exact subject, if it was matched before and not since
        forgotten; counts nothing (this is not a lookup /subsz reports)."""
        return self._cache.get(subject)

    def decided_by(self, prefix: bytes) -> Match[S] | None:
        """The match of every subject under `prefix` and one more token, whatever its
        tokens, if a walk showed it is one (a cached dead end no literal child splits)."""
        return _whole(self._dead_ends.get(prefix))

    def tail_of(self, prefix: bytes) -> Match[S] | None:
        """The match of every `prefix.<token>` (a wildcard token aside), if a walk showed
        it is one (a cached tail no literal child splits): a reply inbox's."""
        return _whole(self._tails.get(prefix))

    def reaches_under(self, prefix: bytes) -> bool:
        """Whether some subscription matches a subject `prefix.<tokens…>`. On a peer's
        interest it keeps such subjects out of the compiled table, which routes locally."""
        nodes = [self._root]
        for tok in prefix.decode("utf-8", "surrogateescape").split("."):
            following: list[_Node[S]] = []
            for node in nodes:
                if ">" in node.children:
                    return True
                for key in (tok, "*"):
                    child = node.children.get(key)
                    if child is not None:
                        following.append(child)
            if not following:
                return False
            nodes = following
        return any(node.children for node in nodes)  # emptied nodes are pruned

    def forget_routes(self, subject: str | None) -> None:
        """Interest on a peer came or went (`subject`, None for any): the compiled table
        routes to this server's receivers alone, so what it learnt may now miss a peer."""
        if self.routes is not None:
            self.routes.clear(subject is None or subject.split(".", 1)[0] in _ACK_OVERLAPS)

    def _changed(self, subject: str, queue: str | None, sub: S, delta: int) -> None:
        """A subscription was inserted (`delta` 1) or removed (-1): what was learnt from
        matches is dropped, and the listeners (`on_change`, `watch`) are told."""
        if self.routes is not None:
            # A consumer's ack sink stays learnt through the SUB and UNSUB of every fetch's
            # inbox: only a subject that can match `$JS.ACK.…` can change who takes acks.
            self.routes.clear(subject.split(".", 1)[0] in _ACK_OVERLAPS)
        self._cache.clear()
        self._tails.clear()
        self._dead_ends.clear()
        self._tail_cuts.clear()
        self._dead_end_cuts.clear()
        if self.on_change is not None:
            self.on_change()
        if self.watch is not None:
            self.watch(subject, queue, sub, delta)

    def match(self, subject: bytes) -> Match[S]:
        self.matches += 1
        hit = self._cache.get(subject)
        if hit is None:
            hit = self._by_prefix(subject)
        if hit is not None:
            self.cache_hits += 1
            return hit
        result: Match[S] = Match([], [])
        tokens = subject.decode("utf-8", "surrogateescape").split(".")
        if "" not in tokens:  # an empty token matches nothing, not even ">"
            queues: dict[str, list[S]] = {}
            stop, literals = self._collect(tokens, result.plain, queues)
            result.queues = list(queues.values())
            self._remember_prefix(tokens, stop, literals, result)
        _put(self._cache, subject, result)
        return result

    def _by_prefix(self, subject: bytes) -> Match[S] | None:
        """The match a cached prefix decides, or None to walk the trie.

        Cached prefixes have no empty token and the token after one must not be
        empty (`_SPECIAL`), so only what follows a dead end's token is checked.
        """
        last_dot = subject.rfind(b".")
        if last_dot in self._tail_cuts:
            entry = self._tails.get(subject[:last_dot])
            if entry is not None:
                token = subject[last_dot + 1 :].decode("utf-8", "surrogateescape")
                if token not in entry.literals and token not in _SPECIAL:
                    return entry.match
        cuts: Iterable[int] = self._dead_end_cuts
        if len(self._dead_end_cuts) > _FEW_CUTS:
            cuts = _dots(subject)
        for cut in cuts:
            if not subject.startswith(b".", cut):
                continue
            entry = self._dead_ends.get(subject[:cut])
            if entry is None:
                continue
            end = subject.find(b".", cut + 1)
            token = subject[cut + 1 : end if end >= 0 else len(subject)]
            text = token.decode("utf-8", "surrogateescape")
            if text in entry.literals or text in _SPECIAL:
                continue
            if end < 0 or (subject.find(b"..", end) < 0 and not subject.endswith(b".")):
                return entry.match
            return None  # an empty token further on matches nothing
        return None

    def _remember_prefix(
        self,
        tokens: list[str],
        stop: int,
        literals: frozenset[str],
        result: Match[S],
    ) -> None:
        """Record which prefix decided this match, if one did (see the module docstring)."""
        if any(t in ("*", ">") for t in tokens[: stop + 1]):
            return  # literal wildcards published non-pedantically: keep to the exact cache
        prefix = ".".join(tokens[:stop]).encode("utf-8", "surrogateescape")
        if stop < len(tokens) - 1:
            _put(self._dead_ends, prefix, _PrefixEntry(result, literals))
            if prefix:  # the root's dead end would take a leading empty token
                self._dead_end_cuts.add(len(prefix))
        elif stop == len(tokens) - 1 and tokens[stop] not in literals and stop > 0:
            _put(self._tails, prefix, _PrefixEntry(result, literals))
            self._tail_cuts.add(len(prefix))

    def _collect(
        self, tokens: list[str], plain: list[S], queues: dict[str, list[S]]
    ) -> tuple[int, frozenset[str]]:
        """Walk level by level; `>` children match the rest, `*` children one token.

        Returns the level where the walk ended (the last token, or where no node
        led further) and the literal children at that level.
        """
        gather = self._gather
        nodes = [self._root]
        last = len(tokens) - 1
        for level, tok in enumerate(tokens):
            following: list[_Node[S]] = []
            literals: set[str] = set()
            for node in nodes:
                children = node.children
                if not children:
                    continue
                literals.update(children)
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
            if not following or level == last:
                for node in following:
                    gather(node, plain, queues)
                literals.discard("*")
                literals.discard(">")
                return level, frozenset(literals)
            nodes = following
        return last, frozenset()

    @staticmethod
    def _gather(node: _Node[S], plain: list[S], queues: dict[str, list[S]]) -> None:
        plain.extend(node.plain)
        for name, members in node.queues.items():
            queues.setdefault(name, []).extend(members)

    def subjects(self) -> list[str]:
        """Every subscribed subject, for monitoring."""
        return list(dict.fromkeys(subject for subject, _, _ in self.entries()))

    def entries(self) -> Iterator[tuple[str, str | None, S]]:
        """Every subscription with its subject and queue group (a leafnode link announces
        them all when it comes up)."""
        stack: list[tuple[_Node[S], str]] = [(self._root, "")]
        while stack:
            node, prefix = stack.pop()
            for sub in node.plain:
                yield prefix, None, sub
            for name, members in node.queues.items():
                for sub in members:
                    yield prefix, name, sub
            for tok, child in node.children.items():
                stack.append((child, f"{prefix}.{tok}" if prefix else tok))

    def cache_size(self) -> int:
        return len(self._cache)

    def fanout(self) -> tuple[int, float]:
        """Max and mean fanout over the cached results (a queue group counts once), which is
        how the reference samples it: cheap, and skewed only when the cache churns."""
        sizes = [len(m.plain) + len(m.queues) for m in self._cache.values()]
        return (max(sizes), sum(sizes) / len(sizes)) if sizes else (0, 0.0)


def _whole(entry: _PrefixEntry[S] | None) -> Match[S] | None:
    return entry.match if entry is not None and not entry.literals else None


def _dots(subject: bytes) -> Iterator[int]:
    at = subject.find(b".")
    while at >= 0:
        yield at
        at = subject.find(b".", at + 1)


def _put(cache: dict[bytes, _V], key: bytes, value: _V) -> None:
    """Insert, dropping the older half first when full: one-off keys must not evict hot ones."""
    if len(cache) >= _CACHE_LIMIT:
        for old in list(islice(cache, _CACHE_LIMIT // 2)):
            del cache[old]
    cache[key] = value
