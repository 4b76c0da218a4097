"""The `operator`, `resolver` and `resolver_preload` settings as plain frozen values."""

from __future__ import annotations

from dataclasses import dataclass

MEMORY = "MEMORY"
FULL = "full"
CACHE = "cache"
URL = "URL"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolverConfig:
    """`resolver: MEMORY`, `resolver: URL("…")`, or `resolver { type: full|cache, dir, … }`.

    `interval` is how often a full resolver asks the other servers of its cluster for
    the JWTs it lacks; `timeout` bounds a lookup it (or a cache) forwards to them at a
    login; a cache keeps at most `limit` JWTs, each for `ttl` seconds (0: no end); a
    full resolver refuses accounts beyond `limit` (0: none refused)."""

    type: str = MEMORY
    dir: str | None = None
    url: str | None = None
    allow_delete: bool = False
    hard_delete: bool = False  # a deleted JWT's file is removed, not renamed `.deleted`
    interval: float = 120.0
    timeout: float = 1.9
    limit: int = 1000
    ttl: float = 0.0

    @property
    def fetches(self) -> bool:
        """An account not held is fetched when a user of it logs in."""
        return self.type != MEMORY

    @property
    def stores(self) -> bool:
        """JWTs are kept in `dir`."""
        return self.type in (FULL, CACHE)
