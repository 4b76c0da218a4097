"""The `operator`, `resolver` and `resolver_preload` settings as plain frozen values."""

from __future__ import annotations

from dataclasses import dataclass

MEMORY = "MEMORY"
FULL = "full"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolverConfig:
    """`resolver: MEMORY`, or `resolver { type: full, dir, allow_delete, interval }`.

    `interval` is how often a full resolver asks the other servers of its cluster for
    the JWTs it lacks; `timeout` bounds a lookup it forwards to them."""

    type: str = MEMORY
    dir: str | None = None
    allow_delete: bool = False
    interval: float = 120.0
    timeout: float = 1.9
    limit: int = 1000
