"""The transport of one Raft node driven alone: the test plays its peers.

`sent` keeps what the node sent; `events` interleaves sends, flushes and applies
(`apply` is given to the node as its application), in the order the driver made
them, which is what the driver tests are about. With `store` set, a send also
says how far the node's log was written when it left.
"""

from __future__ import annotations

from consensus.log_store import LogStore
from consensus.transport import BeatHandler, Handler
from consensus.types import Entry, Message, MessageType, NodeId


class FakeTransport:
    def __init__(self, node: NodeId, store: LogStore | None = None) -> None:
        self._node = node
        self.store = store
        self.events: list[str] = []
        self.sent: list[Message] = []
        self.handler: Handler | None = None
        self.beat: BeatHandler | None = None  # the node's, for plain heartbeats without a Message

    @property
    def id(self) -> NodeId:
        return self._node

    def set_handler(self, handler: Handler, beat: BeatHandler | None = None) -> None:
        self.handler = handler
        self.beat = beat

    def send(self, msg: Message) -> None:
        self.sent.append(msg)
        written = "" if self.store is None else f", log at {self.store.last_index}"
        self.events.append(f"send {msg.type.name} to {msg.dst}{written}")

    def flush(self) -> None:
        self.events.append("flush")

    async def close(self) -> None:
        pass

    def apply(self, entries: list[Entry]) -> None:
        self.events.append(f"apply {entries[0].index}-{entries[-1].index}")

    def answer(self, msg: Message) -> None:
        """A peer's message, handed to the node in the test's turn."""
        assert self.handler is not None
        self.handler(msg)

    def last(self, kind: MessageType, to: NodeId) -> Message | None:
        return next((m for m in reversed(self.sent) if m.type == kind and m.dst == to), None)
