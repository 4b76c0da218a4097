"""How a Raft node reaches its peers: fire-and-forget messages addressed by node id.

Raft tolerates loss, duplication and reordering, and retries on its own
(heartbeats, append retries, elections), so a transport never blocks, never
buffers for a peer that is down and never reports failures: it drops. That
keeps the driver's loop free of back-pressure and makes any carrier fit,
the loopback TCP transport now and the cluster's route connections later.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from consensus.types import Message, MessageType, NodeId

Handler = Callable[[Message], None]
# A plain heartbeat or answer as (type, src, term, value) without a Message: the node's
# answer, else None, and the transport hands over the whole message (`RaftNode._beat`).
BeatHandler = Callable[[MessageType, NodeId, int, int], int | None]


class Transport(Protocol):
    @property
    def id(self) -> NodeId:
        """The node this transport sends for and receives for."""

    def set_handler(self, handler: Handler, beat: BeatHandler | None = None) -> None:
        """Every message that arrives for this node goes to `handler`, on the event loop.
        A transport that carries plain heartbeats compactly may offer them to `beat` first."""

    def send(self, msg: Message) -> None:
        """Best effort, never blocks: dropped if `msg.dst` is unknown, down or too far behind."""

    def flush(self) -> None:
        """Hand what `send` queued to the OS now, not at the end of the loop's turn.

        A peer waiting on an APPEND or its answer waits for whatever the turn still
        holds (an apply, other connections' reads) unless the node flushes first."""

    async def close(self) -> None:
        """Stop sending and receiving; messages still queued may be lost."""
