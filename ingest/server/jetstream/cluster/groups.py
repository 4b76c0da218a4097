"""Opening the Raft node of a group (the meta group, a stream's) on this server, and
changing who its members are.

Every group's log lives under `<store_dir>/jetstream/$SYS/_js_/<group>/`, the
reference's place for it, apart from the stream's segments: the segments are
the state machine, the log is how members agree on it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from consensus.commits import settle
from consensus.core import Config
from consensus.driver import Apply, RaftNode, Restore
from consensus.log_store import LogStore
from consensus.types import ConfChange, ConfOp
from ingest.server.cluster.raft_transport import RaftRoutes
from ingest.server.jetstream.cluster.log_opening import Opened

RAFT_DIR = Path("$SYS") / "_js_"
META_GROUP = "_meta_"
# An idle group heartbeats every 0.5 s instead of every tick: a fifth of the upkeep of a
# server with many streams, and still two heartbeats in the shortest election timeout (a
# follower that misses one and stands is refused by the other: check-quorum's lease).
QUIET_HEARTBEAT_TICKS = 5
# A stream's followers past the one (of three) its commits wait for get new entries this
# many at a time or at their next heartbeat's answer, a tick at most: with one publish
# at a time that follower's hop runs once a batch instead of once a publish.
SPARE_BATCH = 32


def group_dir(js_dir: Path, group: str) -> Path:
    return js_dir / RAFT_DIR / group


def open_log(js_dir: Path, group: str, *, me: str, sync_interval_ns: int | None) -> Opened:
    """The group's log recovered from disk (on any thread: see log_opening)."""
    folder = group_dir(js_dir, group)
    folder.mkdir(parents=True, exist_ok=True)
    return LogStore.open(
        folder, name=f"{group} on {me}", acks_unsynced=sync_interval_ns is not None
    )


def open_node(
    routes: RaftRoutes,
    js_dir: Path,
    group: str,
    voters: Iterable[str],
    apply: Apply,
    *,
    sync_interval_ns: int | None,
    snapshot: Callable[[], bytes] | None = None,
    restore: Restore | None = None,
    snapshot_entries: int = 0,
    opened: Opened | None = None,
) -> RaftNode:
    """A node over the routes with its log recovered from disk (`opened`: already); not
    started yet."""
    store, restored = opened or open_log(
        js_dir, group, me=routes.me, sync_interval_ns=sync_interval_ns
    )
    seed = int.from_bytes(os.urandom(4), "big")  # distinct per node: no split votes in lockstep
    return RaftNode(
        Config(
            routes.me,
            seed=seed,
            lazy_commit=group != META_GROUP,
            spare_batch=0 if group == META_GROUP else SPARE_BATCH,
            quiet_heartbeat_ticks=QUIET_HEARTBEAT_TICKS,
        ),
        voters,
        store,
        restored,
        routes.transport(group),
        apply=apply,
        sync_interval_ns=sync_interval_ns,
        snapshot=snapshot,
        restore=restore,
        snapshot_entries=snapshot_entries,
    )


def stand_first(node: RaftNode, voters: Sequence[str], me: str) -> None:
    """A brand-new group's first voter (placement's pick for a stream: up and least
    loaded; the first name for the meta group) stands at once, so a cluster's start and
    a stream's create take a round trip rather than an election timeout. If its vote
    reaches the others before they open the group, the ordinary timeout elects as before;
    a node with a term has been in an election already and waits its turn."""
    if node.status()["term"] == 0 and list(voters[:1]) == [me]:
        node.campaign()


def change_membership(node: RaftNode, change: ConfChange) -> asyncio.Future[int]:
    """`node.change_membership` as a future: done once the change committed, failed with
    the RaftError that stopped it."""
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    node.change_membership(change, partial(settle, future, 0))
    return future


def membership_step(status: dict[str, Any], peers: tuple[str, ...]) -> ConfChange | bool | None:
    """The next change toward `peers`: a ConfChange, True to wait (a learner is still
    catching up), None when the membership is the assignment's."""
    voters, learners = set(status["voters"]), set(status["learners"])
    wanted = set(peers)
    gone = sorted((voters | learners) - wanted)
    if gone:
        return ConfChange(ConfOp.REMOVE, gone[0])
    new = sorted(wanted - voters - learners)
    if new:
        return ConfChange(ConfOp.ADD_LEARNER, new[0])
    if not learners:
        return None
    learner = min(learners)
    match = int(status.get("peers", {}).get(learner, {}).get("match", 0))
    return True if match < int(status["commit"]) else ConfChange(ConfOp.PROMOTE, learner)
