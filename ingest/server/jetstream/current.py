"""`$JL.STORE.CURRENT`: this server's copies of its streams shown current to a reader
beside them.

A SQL service reads a stream's live tail from the files of the server it runs
beside. Where that server follows a replicated stream, its files trail the
commit: a follower applies a commit when it hears of it (with the next entries
or a heartbeat, within a tick), and a spare follower gets entries in batches.
So a query through a follower's service could miss a message acknowledged just
before it. Before each read the service asks the server its NATS connection is
on; the answer comes once each replicated stream of the asking account hosted
here has applied everything committed when the request arrived (a ReadIndex
round, `Stream.read_point`, the one a direct get through a follower waits for),
and names the streams that could not be shown current (no quorum reachable from
this server) when their round gave up.

Each server answers for its own copies, so the subscription is local, never
announced to the cluster. A client of the system account asks for every
account's streams; any other for its own account's, and hears of no other's.

    request  $JL.STORE.CURRENT   empty (every stream), or
                                 {"streams": [{"account": "A", "stream": "ORDERS"}, …]}
    reply    {"server": name, "streams": n, "behind": [{"account", "stream", "error"}]}
             or {"server": name, "error": {"code": 400, "description": …}}
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from log.raft_group import READ_SECONDS
from sql.current import SUBJECT

if TYPE_CHECKING:
    from ingest.server.accounts.registry import Account
    from ingest.server.jetstream.engine import JetStream
    from ingest.server.server import Server

# A round gives up by READ_SECONDS and says so; this only bounds a round that never ends.
_DEADLINE = 2 * READ_SECONDS


class CurrentCopies:
    def __init__(self, server: Server) -> None:
        self._server = server
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._server.serve_everywhere(SUBJECT, self._on_request)

    def _on_request(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if not reply:
            return
        server = self._server
        sender = server.sender
        account = sender.account if sender is not None else None
        try:
            named = _named(data)
        except ValueError as exc:
            body = {"server": server.server_name, "error": {"code": 400, "description": str(exc)}}
            server.publish(reply, None, None, _json(body), account=account)
            return
        points = [
            (engine.account, name, point)
            for engine in self._engines(account)
            for name, stream in list(engine.streams.items())
            if (named is None or (engine.account, name) in named)
            and (point := stream.read_point()) is not None
        ]
        task = asyncio.get_running_loop().create_task(self._answer(reply, account, points))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _engines(self, account: Account | None) -> list[JetStream]:
        system = self._server.accounts.system_account
        if account is None or account is system:
            return [a.jetstream for a in self._server.accounts if a.jetstream is not None]
        return [account.jetstream] if account.jetstream is not None else []

    async def _answer(
        self,
        reply: str,
        account: Account | None,
        points: list[tuple[str, str, asyncio.Future[None]]],
    ) -> None:
        futures = {point for _, _, point in points}
        if futures:
            await asyncio.wait(futures, timeout=_DEADLINE)
        behind: list[dict[str, Any]] = []
        for owner, name, point in points:
            if not point.done():
                error = f"no read point within {_DEADLINE:g}s"
            elif point.cancelled():
                error = "its group closed"
            elif (exc := point.exception()) is not None:
                error = str(exc) or type(exc).__name__
            else:
                continue
            behind.append({"account": owner, "stream": name, "error": error})
        body = {"server": self._server.server_name, "streams": len(points), "behind": behind}
        self._server.publish(reply, None, None, _json(body), account=account)


def _named(data: bytes) -> set[tuple[str, str]] | None:
    """The (account, stream) pairs a request names; None (an empty body): every stream."""
    if not data.strip():
        return None
    try:
        asked = json.loads(data)["streams"]
        return {(str(s["account"]), str(s["stream"])) for s in asked}
    except (ValueError, KeyError, TypeError):
        raise ValueError(
            'a request names streams as {"streams": [{"account": …, "stream": …}]}, '
            "or is empty for every stream"
        ) from None


def _json(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()
