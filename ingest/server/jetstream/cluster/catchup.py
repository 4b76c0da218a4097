"""Copying a replicated stream's messages from a peer, for a replica restoring a snapshot.

A Raft snapshot of a stream carries the store's shape, not its messages
(`log.stream_snapshot`); the replica asks a peer for the rows it lacks. Like
the Raft traffic, the asking goes over the routes in the system account: each
server answers on `$NRG.CU.<digest>` beside its Raft inbox and hears answers
on `$NRG.CR.<digest>.<n>`, so a partition that cuts Raft cuts this too. The
stream's leader is asked first (it holds everything committed), then the
other peers; a peer that is behind answers as far as it can. With no peer
reachable the replica waits and asks again, saying so in the log: it cannot
take part in its group before it holds what the snapshot says.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ingest.server.cluster.raft_transport import INBOX_PREFIX, inbox
from log.segments.api import MsgStore
from log.stream_snapshot import Ask, Fetch, Rows, SnapshotError, decode_rows, encode_rows, rows_for

if TYPE_CHECKING:
    from ingest.server.server import Server

log = logging.getLogger("jetlake.raft")

ROWS_BYTES = 1024 * 1024  # per answer: fewer round trips, and far under the routes limit
ANSWER_SECONDS = 5.0
RETRY_SECONDS = 1.0


def _subject(kind: str, server_name: str) -> str:
    return inbox(server_name).replace(INBOX_PREFIX, f"{INBOX_PREFIX}{kind}.", 1)


class CatchUp:
    """Answers peers' requests for rows (`stores` finds a group's store here) and asks."""

    def __init__(self, server: Server, stores: Callable[[str], MsgStore | None]) -> None:
        self._server = server
        self._stores = stores
        self._subs: list[object] = []
        self._waiting: dict[str, asyncio.Future[bytes]] = {}
        self._ids = itertools.count()

    @property
    def me(self) -> str:
        return self._server.server_name

    def start(self) -> None:
        server = self._server
        account = server.accounts.system_account
        for subject, callback in (
            (_subject("CU", self.me), self._on_request),
            (_subject("CR", self.me) + ".*", self._on_answer),
        ):
            sub = server.subscribe(subject, callback, account=account)
            server.announce(sub)
            self._subs.append(sub)

    def stop(self) -> None:
        for sub in self._subs:
            self._server.unsubscribe(sub)
        self._subs = []
        for future in self._waiting.values():
            future.cancel()

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
        key = str(next(self._ids))
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        server = self._server
        request = json.dumps({"group": group, **dataclasses.asdict(ask)}).encode()
        reply = f"{_subject('CR', self.me)}.{key}"
        server.publish(
            _subject("CU", peer), reply, None, request, account=server.accounts.system_account
        )
        try:
            answer = await asyncio.wait_for(future, ANSWER_SECONDS)
        except TimeoutError:
            log.info("stream %s: peer %s did not answer %s", stream, peer, ask)
            return None
        finally:
            self._waiting.pop(key, None)
        if not answer:
            return None  # the peer does not host the stream (any more)
        try:
            return decode_rows(answer, stream)
        except SnapshotError as exc:
            log.warning("peer %s: %s", peer, exc)
            return None

    def _on_answer(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        future = self._waiting.get(subject.rsplit(".", 1)[-1])
        if future is not None and not future.done():
            future.set_result(data)

    def _on_request(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if not reply:
            return
        try:
            doc = json.loads(data)
            group = str(doc["group"])
            ask = Ask(int(doc["first"]), int(doc["last"]), int(doc["log_from"]), int(doc["log_to"]))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("catch-up request on %s dropped: %s", subject, exc)
            return
        store = self._stores(group)
        data = b"" if store is None else encode_rows(rows_for(store, ask, ROWS_BYTES))
        server = self._server
        server.publish(reply, None, None, data, account=server.accounts.system_account)
