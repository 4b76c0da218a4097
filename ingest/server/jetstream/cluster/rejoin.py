"""A stream replica whose Raft state cannot be trusted leaves its group and joins it afresh.

A group's `hardstate` (term and vote) with both slots damaged leaves a replica
not knowing whom it voted for: running on, or starting over from an empty
state, it could vote twice in one term and let two leaders be elected. So the
server does not run that replica; it asks the stream's leader (any peer it can
reach forwards nothing: only the leader answers) to take it out of the group.

The leader removes it as a voter and answers "out" only once that removal has
committed (or, for a leader that did not make it, once a barrier behind it
has): from then on a majority of the group holds a configuration without it,
so no candidate that counts its vote can win without that majority's newer
log. The server then deletes its copy (the damaged group folder is kept aside,
as `<group>.damaged`, for a look) and hosts the stream again with nothing:
the leader's membership reconciliation adds it as a learner, it catches up
from the log or a snapshot like any new replica, and it is promoted to voter
once it holds everything committed, learning the group's term from the
leader before it can vote.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from consensus.types import ConfChange, ConfOp, RaftError, Role
from ingest.server.jetstream.cluster.groups import change_membership

if TYPE_CHECKING:
    from ingest.server.jetstream.cluster.hosting import Hosted
    from ingest.server.jetstream.cluster.meta import StreamAssignment
    from ingest.server.jetstream.cluster.peer_requests import PeerRequests

log = logging.getLogger("jetlake.jetstream")

KIND = "RJ"
OUT = b"out"
ASK_SECONDS = 1.0
RETRY_SECONDS = 1.0


def set_aside(group_folder: Path) -> Path:
    """Where a group folder's damaged Raft state is kept, for a look, once its replica left."""
    return group_folder.with_name(group_folder.name + ".damaged")


class Rejoins:
    """Both sides: the leader taking a replica out (`_answer`), the replica asking (`rejoin`).

    `leading(group)` is the group's replica here if this server leads it; `reconcile`
    moves a led group's membership to its assignment (which still names the replica,
    so it is added back as a learner once out).
    """

    def __init__(
        self,
        requests: PeerRequests,
        leading: Callable[[str], Hosted | None],
        reconcile: Callable[[Hosted], None],
        spawn: Callable[[Any], None],
    ) -> None:
        self._requests = requests
        self._leading = leading
        self._reconcile = reconcile
        self._spawn = spawn
        self._out: set[tuple[str, str]] = set()  # (group, peer) whose removal committed
        self._taking_out: set[tuple[str, str]] = set()
        self._rejoining: set[str] = set()  # groups this server's replica is asking for
        requests.serve(KIND, self._answer)

    # -- the leader ---------------------------------------------------------------------

    def _answer(self, data: bytes) -> bytes | None:
        try:
            doc = json.loads(data)
            group, peer = str(doc["group"]), str(doc["peer"])
        except (ValueError, KeyError, TypeError):
            return None
        hosted = self._leading(group)
        if hosted is None or peer == self._requests.me:
            return None
        key = (group, peer)
        if peer in hosted.group.node.status()["voters"]:  # type: ignore[operator]
            self._out.discard(key)  # back as a voter since: damaged anew
        elif key in self._out:
            return OUT
        if key not in self._taking_out:
            self._taking_out.add(key)
            self._spawn(self._take_out(hosted, peer))
        return None

    async def _take_out(self, hosted: Hosted, peer: str) -> None:
        key = (hosted.assignment.group, peer)
        node = hosted.group.node
        try:
            if peer in node.status()["voters"]:  # type: ignore[operator]
                await change_membership(node, ConfChange(ConfOp.REMOVE, peer))
            else:  # taken out under an earlier leader: committed once a barrier is
                await hosted.group.barrier()
            if node.role is Role.LEADER:
                self._out.add(key)
                log.warning(
                    "stream '%s > %s': %s's replica, whose Raft state could not be trusted, "
                    "is out of the group; it joins again afresh",
                    hosted.assignment.account, hosted.assignment.name, peer,
                )  # fmt: skip
        except RaftError as exc:  # a change in progress, leadership lost: asked again
            log.info("stream '%s': taking %s out: %s", hosted.assignment.name, peer, exc)
        finally:
            self._taking_out.discard(key)
        self._reconcile(hosted)

    # -- the replica --------------------------------------------------------------------

    def waiting(self, group: str) -> bool:
        """This server's replica of `group` is out, waiting to join afresh: not to be opened
        on its damaged files meanwhile (the meta log's replay hosts a stream once per entry)."""
        return group in self._rejoining

    def rejoin(
        self,
        sa: StreamAssignment,
        still_here: Callable[[], bool],
        damaged: Path,
        host: Callable[[], None],
    ) -> None:
        """Ask `sa`'s peers until its leader says this replica is out, then set the
        damaged group folder aside and `host` the stream afresh (the caller deletes
        the stream's own folder there). Gives up once `still_here()` is false."""
        if sa.group not in self._rejoining:
            self._rejoining.add(sa.group)
            self._spawn(self._asking(sa, still_here, damaged, host))

    async def _asking(
        self,
        sa: StreamAssignment,
        still_here: Callable[[], bool],
        damaged: Path,
        host: Callable[[], None],
    ) -> None:
        try:
            request = json.dumps({"group": sa.group, "peer": self._requests.me}).encode()
            others = [p for p in sa.peers if p != self._requests.me]
            while still_here():
                answers = await asyncio.gather(
                    *(self._requests.ask(p, KIND, request, ASK_SECONDS) for p in others)
                )
                if OUT in answers and still_here():
                    aside = set_aside(damaged)
                    shutil.rmtree(aside, ignore_errors=True)
                    if damaged.exists():
                        damaged.rename(aside)
                    log.warning(
                        "JetStream: stream '%s > %s': out of its group; joining it afresh "
                        "(the damaged Raft state is kept in %s)",
                        sa.account, sa.name, aside,
                    )  # fmt: skip
                    host()
                    return
                await asyncio.sleep(RETRY_SECONDS)
        finally:
            self._rejoining.discard(sa.group)
