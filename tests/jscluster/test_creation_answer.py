"""Who answers a replicated stream's creation: the first leader that catches up.

Under load a new group's first leader can lose the lead before its barrier
commits and win it again; the creator must still get its answer (it used to be
taken at the first lead and dropped with it, and the create timed out). A client's
retry while the creation is still being committed places nothing anew: each retry
used to propose another group, which replaced the last when it committed, and under
load the stream never came up.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from ingest.server.jetstream.cluster.controller import JetStreamCluster
from ingest.server.jetstream.cluster.hosting import Hosted
from ingest.server.jetstream.cluster.meta import MetaState
from ingest.server.jetstream.cluster.requests import ClusterRequests
from log.errors import ApiError
from tests.jscluster.test_meta_units import assignment


class Lead:
    """A stream and group whose barriers the test settles, and an engine that records."""

    def __init__(self) -> None:
        self.barriers: list[asyncio.Future[int]] = []
        self.answered: list[str] = []
        self.stream = SimpleNamespace(accepting=False, restore_began=False)
        group = SimpleNamespace(barrier=self._barrier)
        self.hosted = Hosted(assignment(), self.stream, group, reply="_INBOX.x")  # type: ignore[arg-type]
        self.engine = SimpleNamespace(
            set_stream_leader=lambda _stream, _mine: None,
            led=lambda _stream: None,
            api=SimpleNamespace(created=lambda _stream, reply: self.answered.append(reply)),
        )

    def _barrier(self) -> asyncio.Future[int]:
        self.barriers.append(asyncio.get_running_loop().create_future())
        return self.barriers[-1]


def cluster_of(lead: Lead) -> Any:
    cluster = object.__new__(JetStreamCluster)
    cluster.server = SimpleNamespace(server_name="A")  # type: ignore[assignment]
    cluster.hosted = {lead.hosted.assignment.key: lead.hosted}
    cluster._reconcile = lambda _hosted: None  # type: ignore[method-assign]
    return cluster


async def test_a_lead_lost_before_catching_up_leaves_the_answer_for_the_next() -> None:
    lead = Lead()
    cluster = cluster_of(lead)
    cluster._stream_leader_changed(lead.engine, lead.hosted, "A")
    lead.barriers[0].set_exception(RuntimeError("leadership lost"))  # deposed at once
    cluster._stream_leader_changed(lead.engine, lead.hosted, "B")
    cluster._stream_leader_changed(lead.engine, lead.hosted, "A")
    lead.stream.accepting = True
    lead.barriers[1].set_result(1)
    await asyncio.sleep(0)  # done callbacks run on the loop
    assert lead.answered == ["_INBOX.x"]
    cluster._stream_leader_changed(lead.engine, lead.hosted, "A")  # a later lead: no repeat
    lead.barriers[2].set_result(2)
    await asyncio.sleep(0)
    assert lead.answered == ["_INBOX.x"]


def meta_leader() -> tuple[ClusterRequests, list[asyncio.Future[int]]]:
    """The meta leader's requests of one account; the proposals it made, uncommitted."""
    proposals: list[asyncio.Future[int]] = []

    def propose_meta(_op: bytes) -> asyncio.Future[int]:
        proposals.append(asyncio.get_running_loop().create_future())
        return proposals[-1]

    state = MetaState()
    cluster = SimpleNamespace(
        state=state,
        assignment=lambda account, name: state.streams.get((account, name)),
        members=lambda: ["A", "B", "C"],
        peers=SimpleNamespace(
            online=lambda: {"A", "B", "C"}, tags=lambda: {}, available=lambda _storage: {}
        ),
        name="C",
        propose_meta=propose_meta,
    )
    engine = SimpleNamespace(account="$G", limits=None, api=SimpleNamespace(current_reply="_I.1"))
    return ClusterRequests(cluster, engine), proposals  # type: ignore[arg-type]


def create(requests: ClusterRequests, subjects: str = "s") -> object:
    body = f'{{"name": "S", "subjects": ["{subjects}"], "num_replicas": 3}}'.encode()
    return requests._create(["STREAM", "CREATE", "S"], body)


async def test_a_retry_while_the_creation_commits_proposes_nothing_new() -> None:
    requests, proposals = meta_leader()
    assert create(requests) is None
    assert create(requests) is None  # the client's retry: unanswered, nothing proposed
    assert len(proposals) == 1
    with pytest.raises(ApiError, match="different configuration"):
        create(requests, subjects="other")
    proposals[0].set_exception(RuntimeError("proposal dropped"))  # the leader lost the lead
    await asyncio.sleep(0)
    assert create(requests) is None  # proposed again
    assert len(proposals) == 2
