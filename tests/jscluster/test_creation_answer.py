"""Who answers a replicated stream's creation: the first leader that catches up.

Under load a new group's first leader can lose the lead before its barrier
commits and win it again; the creator must still get its answer (it used to be
taken at the first lead and dropped with it, and the create timed out).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from ingest.server.jetstream.cluster.controller import Hosted, JetStreamCluster
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
