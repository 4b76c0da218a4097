"""Choosing a new stream's peers: the least-loaded servers that are up and qualify.

Pure, so the rule is tested without a cluster: the meta leader calls it with
what it sees (the servers its routes reach, how many streams each carries).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from log import errors

MAX_REPLICAS = 5
# A stream's storage -> the fields of /jsz (and STATSZ) for its capacity and its use.
STORAGE_KEYS = {"file": ("max_storage", "storage"), "memory": ("max_memory", "memory")}


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
    available: Mapping[str, int] | None = None,
    need: int = 0,
) -> tuple[str, ...]:
    """`replicas` distinct servers of the cluster: those up now first, then fewest
    streams, then most storage left; ties broken by a hash of the stream's name, so
    equal servers share new streams instead of the first name taking all of them. A
    server down now may still be chosen: its group has a quorum without it, and it
    catches up when it returns.

    A server without room for `need` bytes (the stream's `max_bytes`) is not a
    candidate. The reference orders by room first, which piles every stream onto
    the emptiest server; room here is a limit, and load spreads the work.
    """
    check_replicas(replicas)
    if wanted_cluster and wanted_cluster != cluster:
        raise errors.no_suitable_peers()
    wanted = frozenset(t.lower() for t in wanted_tags)
    eligible = {p for p in known if wanted <= (tags or {}).get(p, frozenset())}
    room = available or {}
    roomy = {p for p in eligible if need <= 0 or room.get(p, need) >= need}
    up = set(online)
    candidates = sorted(
        roomy,
        key=lambda peer: (
            peer not in up,
            load.get(peer, 0),
            -room.get(peer, 0),
            _tiebreak(stream, peer),
        ),
    )
    if replicas > len(candidates):
        if replicas <= len(eligible):
            raise errors.insufficient_storage()
        raise errors.no_suitable_peers(sorted(wanted))
    # The first peer stands first and leads (`groups.stand_first`): ordered by the hash
    # too, so leaders spread over servers that tie on load instead of all going to the
    # one with a few more bytes free.
    return tuple(sorted(candidates[: max(replicas, 1)], key=lambda peer: _tiebreak(stream, peer)))


def _tiebreak(stream: str, peer: str) -> bytes:
    return hashlib.sha256(f"{stream}/{peer}".encode()).digest()


@functools.cache  # sized once per server, at start, as the reference does
def capacity(configured: int, folder: Path | None) -> int:
    """A server's storage for streams: as configured, else as the reference sizes it,
    three quarters of what is free where it stores (of the machine's memory for None)."""
    if configured >= 0:
        return configured
    if folder is None:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4
    folder.mkdir(parents=True, exist_ok=True)
    return shutil.disk_usage(folder).free * 3 // 4


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
