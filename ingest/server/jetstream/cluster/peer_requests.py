"""One server asking another a question over the routes, in the system account.

Like the Raft traffic, these requests ride the routes, so a partition that
cuts Raft cuts them too. Each kind of question has its own subject beside
the server's Raft inbox (`$NRG.<kind>.<digest>`); every answer comes back on
`$NRG.CR.<digest>.<n>`, one number per question in flight. A peer that does
not answer in time (down, cut off, or not serving that kind) is `None` to the
asker, who decides whom to ask next.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

from ingest.server.cluster.raft_transport import INBOX_PREFIX, inbox

if TYPE_CHECKING:
    from ingest.server.server import Server

ANSWERS = "CR"

# An answerer: the request's data -> the answer's data, or None to stay silent.
Answerer = Callable[[bytes], bytes | None]


def _subject(kind: str, server_name: str) -> str:
    return inbox(server_name).replace(INBOX_PREFIX, f"{INBOX_PREFIX}{kind}.", 1)


class PeerRequests:
    def __init__(self, server: Server) -> None:
        self._server = server
        self._answerers: dict[str, Answerer] = {}
        self._subs: list[object] = []
        self._waiting: dict[str, asyncio.Future[bytes]] = {}
        self._ids = itertools.count()

    @property
    def me(self) -> str:
        return self._server.server_name

    def serve(self, kind: str, answerer: Answerer) -> None:
        """Answer peers' questions of `kind` (before `start`)."""
        self._answerers[kind] = answerer

    def start(self) -> None:
        server = self._server
        account = server.accounts.system_account
        listening = [(_subject(ANSWERS, self.me) + ".*", self._on_answer)]
        listening += [
            (_subject(kind, self.me), self._answering(kind, answerer))
            for kind, answerer in self._answerers.items()
        ]
        for subject, callback in listening:
            sub = server.subscribe(subject, callback, account=account)
            server.announce(sub)
            self._subs.append(sub)

    def stop(self) -> None:
        for sub in self._subs:
            self._server.unsubscribe(sub)
        self._subs = []
        for future in self._waiting.values():
            future.cancel()

    async def ask(self, peer: str, kind: str, data: bytes, timeout: float) -> bytes | None:
        """`peer`'s answer, or None if none came within `timeout` seconds."""
        key = str(next(self._ids))
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        server = self._server
        reply = f"{_subject(ANSWERS, self.me)}.{key}"
        account = server.accounts.system_account
        server.publish(_subject(kind, peer), reply, None, data, account=account)
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return None
        finally:
            self._waiting.pop(key, None)

    def _on_answer(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        future = self._waiting.get(subject.rsplit(".", 1)[-1])
        if future is not None and not future.done():
            future.set_result(data)

    def _answering(self, kind: str, answerer: Answerer) -> Callable[..., None]:
        def on_request(subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
            if not reply:
                return
            answer = answerer(data)
            if answer is not None:
                server = self._server
                server.publish(reply, None, None, answer, account=server.accounts.system_account)

        return on_request
