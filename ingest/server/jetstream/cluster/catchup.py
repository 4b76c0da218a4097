"""Copying a replicated stream's messages from a peer, for a replica restoring a snapshot.

A Raft snapshot of a stream carries the store's shape, not its messages
(`log.streams.snapshot`); the replica asks a peer for the rows it lacks, as a
peer request (`peer_requests`), so a partition that cuts Raft cuts this too. The
stream's leader is asked first (it holds everything committed), then the
other peers; a peer that is behind answers as far as it can. With no peer
reachable the replica waits and asks again, saying so in the log: it cannot
take part in its group before it holds what the snapshot says.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from log.segments.api import MsgStore
from log.streams.snapshot import Ask, Fetch, Rows, SnapshotError, decode_rows, encode_rows, rows_for

if TYPE_CHECKING:
    from ingest.server.jetstream.cluster.peer_requests import PeerRequests

log = logging.getLogger("jetlake.raft")

ROWS_BYTES = 1024 * 1024  # per answer: fewer round trips, and far under the routes limit
ANSWER_SECONDS = 5.0
RETRY_SECONDS = 1.0
KIND = "CU"


class CatchUp:
    """Answers peers' requests for rows (`stores` finds a group's store here) and asks."""

    def __init__(self, requests: PeerRequests, stores: Callable[[str], MsgStore | None]) -> None:
        self._requests = requests
        self._stores = stores
        requests.serve(KIND, self._on_request)

    @property
    def me(self) -> str:
        return self._requests.me

    def fetcher(
        self,
        group: str,
        stream: str,
        peers: Callable[[], list[str]],
        leader: Callable[[], str | None],
    ) -> Fetch:
        """The `Fetch` of one stream: asks its leader, then its other peers, until one helps."""

        async def fetch(ask: Ask) -> Rows:
            while True:
                lead = leader()
                order = [lead] if lead and lead != self.me else []
                order += [p for p in peers() if p != self.me and p not in order]
                for peer in order:
                    rows = await self._ask(peer, group, stream, ask)
                    if rows is not None and rows.helps(ask):
                        return rows
                log.warning(
                    "stream %s: no peer of %s can answer %s yet; asking again",
                    stream,
                    order or "its group",
                    ask,
                )
                await asyncio.sleep(RETRY_SECONDS)

        return fetch

    async def _ask(self, peer: str, group: str, stream: str, ask: Ask) -> Rows | None:
        request = json.dumps({"group": group, **dataclasses.asdict(ask)}).encode()
        answer = await self._requests.ask(peer, KIND, request, ANSWER_SECONDS)
        if answer is None:
            log.info("stream %s: peer %s did not answer %s", stream, peer, ask)
            return None
        if not answer:
            return None  # the peer does not host the stream (any more)
        try:
            return decode_rows(answer, stream)
        except SnapshotError as exc:
            log.warning("peer %s: %s", peer, exc)
            return None

    def _on_request(self, data: bytes) -> bytes | None:
        try:
            doc = json.loads(data)
            group = str(doc["group"])
            ask = Ask(int(doc["first"]), int(doc["last"]), int(doc["log_from"]), int(doc["log_to"]))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("catch-up request dropped: %s", exc)
            return None
        store = self._stores(group)
        return b"" if store is None else encode_rows(rows_for(store, ask, ROWS_BYTES))
