"""Where a leader stepdown hands leadership, from the request's `placement`.

`STREAM.LEADER.STEPDOWN`, `CONSUMER.LEADER.STEPDOWN` and `META.LEADER.STEPDOWN`
take an optional body `{"placement": {"preferred": <server>}}` (or `cluster` and
`tags` instead of a server). Pure, so the rule is tested without a cluster: the
leader calls it with its group's members and what its routes reach.

As the reference: a `preferred` server outside the group is "not known", the
leader itself "is already leader", and `cluster` or `tags` that no other member
matches leave "no replacement peer connected" (err_code 10005 for all three).
Where the reference differs: it hands leadership to a preferred member that is
down, and the group then has no leader until an election times out; here that
is refused like a placement no connected member matches.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping
from typing import Any

from log.errors import ApiError

NO_PEERS = 10005


def _refused(description: str) -> ApiError:
    return ApiError(400, NO_PEERS, description)


def stepdown_target(
    request: Mapping[str, Any],
    *,
    me: str,
    members: Collection[str],
    online: Collection[str],
    cluster: str,
    tags: Mapping[str, frozenset[str]],
) -> str | None:
    """The member to hand leadership to; None: the most caught-up one (no placement)."""
    placement = request.get("placement")
    if not isinstance(placement, Mapping):
        return None
    preferred = placement.get("preferred")
    if isinstance(preferred, str) and preferred:
        if preferred not in members:
            raise _refused(f'preferred server "{preferred}" not known')
        if preferred == me:
            raise _refused(f'preferred server "{preferred}" is already leader')
        if preferred not in online:
            raise _refused("no replacement peer connected")
        return preferred
    wanted_cluster = placement.get("cluster") or ""
    wanted_tags = frozenset(str(t).lower() for t in placement.get("tags") or ())
    if not wanted_cluster and not wanted_tags:
        return None
    candidates = sorted(
        p
        for p in members
        if p != me
        and p in online
        and wanted_cluster in ("", cluster)
        and wanted_tags <= tags.get(p, frozenset())
    )
    if not candidates:
        raise _refused("no replacement peer connected")
    return random.choice(candidates)
