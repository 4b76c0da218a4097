"""Choosing a new stream's peers: the least-loaded servers that are up and qualify.

Pure, so the rule is tested without a cluster: the meta leader calls it with
what it sees (the servers its routes reach, how many streams each carries).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from log import errors

MAX_REPLICAS = 5


def check_replicas(replicas: int) -> None:
    if replicas > MAX_REPLICAS:
        raise errors.max_replicas()


def choose_peers(
    stream: str,
    replicas: int,
    known: Iterable[str],
    load: Mapping[str, int],
    *,
    online: Iterable[str] = (),
    cluster: str,
    wanted_cluster: str = "",
    tags: Mapping[str, frozenset[str]] | None = None,
    wanted_tags: Iterable[str] = (),
) -> tuple[str, ...]:
    """`replicas` distinct servers of the cluster: those up now first, then fewest
    streams; ties broken by a hash of the stream's name, so equal servers share new
    streams instead of the first name taking all of them. A server down now may still
    be chosen: its group has a quorum without it, and it catches up when it returns."""
    check_replicas(replicas)
    if wanted_cluster and wanted_cluster != cluster:
        raise errors.no_suitable_peers()
    wanted = frozenset(t.lower() for t in wanted_tags)
    eligible = {p for p in known if wanted <= (tags or {}).get(p, frozenset())}
    up = set(online)
    candidates = sorted(
        eligible,
        key=lambda peer: (
            peer not in up,
            load.get(peer, 0),
            hashlib.sha256(f"{stream}/{peer}".encode()).digest(),
        ),
    )
    if replicas > len(candidates):
        raise errors.no_suitable_peers(sorted(wanted))
    return tuple(candidates[: max(replicas, 1)])


def group_name(stream: str, replicas: int, storage: str, nonce: bytes) -> str:
    """As the reference names them (`S-R3F-…`): readable in /raftz and logs, and unique
    per creation, so a stream deleted and created again never meets its old log."""
    digest = hashlib.sha256(stream.encode() + nonce).digest()
    tag = base64.b32encode(digest).decode()[:8]
    return f"S-R{replicas}{'M' if storage == 'memory' else 'F'}-{tag}"


def placement_of(doc: dict[str, Any]) -> dict[str, Any]:
    """A stream request's (or assignment's) `placement { cluster, tags }`, or {}."""
    placement = doc.get("placement")
    return placement if isinstance(placement, dict) else {}
