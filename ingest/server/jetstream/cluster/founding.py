"""The meta group's founding members: written down once, read at every start, and asked of
a peer when this server's copy is gone.

A cluster forms its meta group once a server sees as many JetStream servers as
its routes name (itself included); all servers list the same routes, so all
form it with the same members, and each writes them to `peers.json` so a
restart does not wait for the mesh again. The founders are only the start:
the meta log (its snapshot's membership, its membership changes) holds
whatever changed since, and is applied over them.

A server whose `peers.json` is missing (a new disk) or damaged (set aside,
named in the log) must not wait for every server to be back, as a first
formation does: one down server would keep it out of a cluster that is
running without it. It asks the servers it reaches for their founders, and
opens the group with the first answer; all answers are the same list. Until a
peer answers (none reachable, or none formed yet) it keeps asking, and forms
from the routes if all servers turn up first.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from log.state_file import StateFileError, read_state, set_aside, write_state

if TYPE_CHECKING:
    from ingest.server.jetstream.cluster.peer_requests import PeerRequests

log = logging.getLogger("jetlake.jetstream")

PEERS_FILE = "peers.json"
KIND = "MF"  # the peer request for the meta group's founders
ANSWER_SECONDS = 2.0
RETRY_SECONDS = 1.0


class Founding:
    """Finds the founders and opens the meta group with them (`open_meta`), once."""

    def __init__(
        self,
        requests: PeerRequests,
        folder: Path,
        expected_size: Callable[[], int],
        online: Callable[[], set[str]],
        open_meta: Callable[[list[str]], None],
    ) -> None:
        self._requests = requests
        self._path = folder / PEERS_FILE
        self._expected = expected_size
        self._online = online
        self._open_meta = open_meta
        self.founders: list[str] | None = None
        self._asking: asyncio.Task[None] | None = None
        requests.serve(KIND, self._answer)

    def start(self) -> bool:
        """Open the group with the saved founders (True), or start looking for them."""
        voters = self._saved()
        if voters is not None:
            log.info("JetStream cluster recovering state")
            self._found(voters, save=False)
            return True
        log.info("JetStream cluster bootstrapping")
        self.routes_changed()
        return False

    def stop(self) -> None:
        if self._asking is not None:
            self._asking.cancel()

    def routes_changed(self) -> None:
        """A route came or went: form from the routes once all servers are here, else ask."""
        if self.founders is not None:
            return
        peers = self._online()
        if len(peers) >= self._expected():
            self._found(sorted(peers), save=True)
        elif len(peers) > 1 and self._asking is None:
            self._asking = asyncio.get_running_loop().create_task(self._ask_peers())

    def _saved(self) -> list[str] | None:
        try:
            voters = read_state(self._path)
            if not isinstance(voters, list) or not all(isinstance(p, str) for p in voters):
                raise StateFileError(self._path, 0, "not a list of server names")
        except FileNotFoundError:
            return None
        except StateFileError as err:
            aside = set_aside(self._path)
            log.error(
                "JetStream cluster: meta group members unreadable: %s; kept as %s; "
                "asking the other servers for them",
                err,
                aside,
            )
            return None
        return voters

    def _found(self, voters: list[str], *, save: bool) -> None:
        self.founders = voters
        if self._asking is not None and self._asking is not asyncio.current_task():
            self._asking.cancel()
        if save:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            write_state(self._path, voters)
        self._open_meta(voters)

    async def _ask_peers(self) -> None:
        try:
            while self.founders is None:
                for peer in sorted(self._online() - {self._requests.me}):
                    answer = await self._requests.ask(peer, KIND, b"", ANSWER_SECONDS)
                    voters = _voters(answer)
                    if self.founders is not None:
                        return
                    if voters is not None:
                        log.info("JetStream cluster: meta group members from %s: %s", peer, voters)
                        self._found(voters, save=True)
                        return
                await asyncio.sleep(RETRY_SECONDS)
        finally:
            self._asking = None

    def _answer(self, data: bytes) -> bytes:
        """The founders; `[]` before this server has them, so the asker moves on at once."""
        return json.dumps(self.founders or []).encode()


def _voters(answer: bytes | None) -> list[str] | None:
    """A peer's answer as a list of server names; None for silence or anything else."""
    try:
        voters = json.loads(answer) if answer else None
    except ValueError:
        return None
    if isinstance(voters, list) and voters and all(isinstance(p, str) for p in voters):
        return voters
    return None
