"""Before a query reads a store: its server asked to show its copies current.

A query must see every message acknowledged before it started. The service
reads the live tail from the files of the server beside it, and where that
server follows a replicated stream those files trail the commit by up to a tick
(`ingest.server.jetstream.current`). So before the views are rebuilt (Spark) or
read (DuckDB), the service asks the server its NATS door is connected to, and
reads once it answers. A stream the server cannot show current (no quorum
reachable from it: a partition) is read as it is, and the service logs it by
name, rather than failing every query on every stream. A server that does not
answer the subject (nats-server, where the door may also run) has nothing to
show: its streams are not in this store.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nats.aio.client import Client

log = logging.getLogger("jetlake.sql")

SUBJECT = "$JL.STORE.CURRENT"
WAIT = 5.0  # past the server's own deadline for a stream's read point (twice 2 s)


class ServerCopies:
    """The server the service reads beside, through the NATS door's connection."""

    def __init__(self) -> None:
        self._nc: Client | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: int | None = None

    def connected(self, nc: Client) -> None:
        """From the loop that runs `nc`: the connection to ask through."""
        self._nc, self._loop = nc, asyncio.get_running_loop()
        self._thread = threading.get_ident()

    def wait(self, streams: Sequence[tuple[str, str]] | None = None) -> None:
        """Block until the server showed its copies of `streams` ((account, name) pairs;
        None: all it hosts) current. From a query's thread, never the loop's, which must
        be free to carry the request. Without a door, or for no streams: at once."""
        nc, loop = self._nc, self._loop
        if nc is None or loop is None or threading.get_ident() == self._thread or streams == []:
            return
        asked = asyncio.run_coroutine_threadsafe(ask(nc, streams), loop)
        try:
            asked.result(WAIT + 1)
        except TimeoutError:  # the loop itself held up
            asked.cancel()
            _unanswered()


async def ask(nc: Client, streams: Sequence[tuple[str, str]] | None = None) -> None:
    """Never raises: a query goes on, over the store as it is, whatever the answer."""
    from nats.errors import Error, NoRespondersError

    named = [{"account": account, "stream": name} for account, name in streams or ()]
    body = json.dumps({"streams": named}).encode() if streams is not None else b""
    try:
        answer = await nc.request(SUBJECT, body, timeout=WAIT)
    except NoRespondersError:
        return
    except TimeoutError:
        _unanswered()
        return
    except Error as exc:  # the door's connection closed or reconnecting
        log.warning("sql service: %s not asked (%s); reading the store as it is", SUBJECT, exc)
        return
    try:
        body = json.loads(answer.data)
        if "error" in body:
            log.warning("sql service: %s refused: %s", SUBJECT, body["error"])
            return
        server, behind = body["server"], body["behind"]
    except (ValueError, KeyError, TypeError):
        log.warning("sql service: a malformed answer on %s: %r", SUBJECT, answer.data[:200])
        return
    for stream in behind:
        log.warning(
            "sql service: stream %s of account %s may lack its newest messages: server %s "
            "could not show its copy current (%s)",
            stream.get("stream"), stream.get("account"), server, stream.get("error"),
        )  # fmt: skip


def _unanswered() -> None:
    log.warning("sql service: no answer on %s in %gs; reading the store as it is", SUBJECT, WAIT)
