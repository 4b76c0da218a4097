"""The meta group's requests in the system account: `META.LEADER.STEPDOWN`, `SERVER.REMOVE`.

They act on the cluster, not on one account's streams, so only a system-account
user may send them; the meta leader answers, in the reference's JSON.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from consensus.types import ConfChange, ConfOp, RaftError
from ingest.server.jetstream.api import TYPE, encode
from ingest.server.jetstream.cluster import meta
from ingest.server.jetstream.cluster.stepdown import stepdown_target
from log import errors
from log.errors import ApiError

if TYPE_CHECKING:
    from ingest.server.jetstream.cluster.controller import JetStreamCluster

log = logging.getLogger("jetlake.jetstream")

STEPDOWN = "$JS.API.META.LEADER.STEPDOWN"
SERVER_REMOVE = "$JS.API.SERVER.REMOVE"


class SystemRequests:
    def __init__(self, cluster: JetStreamCluster) -> None:
        self._cluster = cluster
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        server = self._cluster.server
        system = server.accounts.system_account
        for subject, handler in ((STEPDOWN, self._stepdown), (SERVER_REMOVE, self._remove)):
            server.announce(server.subscribe(subject, handler, account=system))

    def _answer(self, reply: str, kind: str, doc: dict[str, Any]) -> None:
        server = self._cluster.server
        body = encode({"type": TYPE + kind, **doc})
        server.publish(reply, None, None, body, account=server.accounts.system_account)

    def _stepdown(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        cluster = self._cluster
        if not reply or cluster.meta is None or not cluster.is_meta_leader:
            return
        kind = "meta_leader_stepdown_response"
        try:
            to = stepdown_target(
                _request(data),
                me=cluster.me,
                members=cluster.members(),
                online=cluster.peers.online(),
                cluster=cluster.name,
                tags=cluster.peers.tags(),
            )
        except ApiError as err:
            self._answer(reply, kind, {"error": err.to_json()})
            return
        cluster.meta.transfer_leadership(to)
        self._answer(reply, kind, {"success": True})

    def _remove(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if not reply or not self._cluster.is_meta_leader:
            return
        task = asyncio.get_running_loop().create_task(self._remove_server(reply, data))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _remove_server(self, reply: str, data: bytes) -> None:
        """Take a server out of the meta group, then move each stream it carried to a
        spare server (as a stream peer removal does); streams without a spare keep
        running on their other replicas."""
        kind = "meta_server_remove_response"
        cluster = self._cluster
        try:
            peer = _peer(data)
            if peer not in cluster.members():
                raise errors.server_not_member()
            assert cluster.meta is not None
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            cluster.meta.change_membership(
                ConfChange(ConfOp.REMOVE, peer),
                lambda e: future.set_exception(e) if e else future.set_result(None),
            )
            await future
        except ApiError as err:
            self._answer(reply, kind, {"error": err.to_json()})
            return
        except RaftError as exc:
            self._answer(reply, kind, {"error": errors.cluster_unavailable().to_json()})
            log.warning("JetStream: removing server %s failed: %s", peer, exc)
            return
        for sa in [sa for sa in cluster.state.streams.values() if peer in sa.peers]:
            peers = cluster.remapped(sa, peer)
            if peers is None:
                log.warning("JetStream: stream '%s > %s' keeps %s: no spare server",
                            sa.account, sa.name, peer)  # fmt: skip
                continue
            await cluster.propose_meta(meta.update_stream(sa.account, sa.config, peers))
        self._answer(reply, kind, {"success": True})


def _request(data: bytes) -> dict[str, Any]:
    """A body that may be empty; one that is not a JSON object counts as empty."""
    try:
        req = json.loads(data) if data.strip() else {}
    except ValueError:
        req = {}
    return req if isinstance(req, dict) else {}


def _peer(data: bytes) -> str:
    peer = _request(data).get("peer")
    if not isinstance(peer, str) or not peer:
        raise errors.bad_request()
    return peer
