"""Push flow control: how many unconfirmed bytes a flow-controlled push consumer may send.

The reference's window starts at 1/16 of the limit, asks for a confirmation
(`100 FlowControl Request` with a `$JS.FC.…` reply) once half of it is in
flight, and doubles on each confirmation; a client that never answers stalls
the consumer, which the idle heartbeat then reports (`Nats-Consumer-Stalled`).
"""

from __future__ import annotations

from log.consumers.wire import FC_PREFIX, random_token

FLOW_CONTROL_LIMIT = 32 * 1024 * 1024  # the most unconfirmed bytes a flow-controlled push may have
_START = FLOW_CONTROL_LIMIT // 16


class FlowControl:
    def __init__(self, stream: str, consumer: str) -> None:
        self._prefix = f"{FC_PREFIX}.{stream}.{consumer}."
        self.reset()

    def reset(self) -> None:
        """A new listener on the deliver subject starts with the initial window."""
        self.pending_bytes = 0
        self.window = _START
        self.reply = ""  # the outstanding request's reply subject, "" if none
        self._asked_at = 0

    @property
    def blocked(self) -> bool:
        return self.pending_bytes > self.window

    def sent(self, size: int, *, full: bool = False) -> str:
        """Count a delivery; the reply subject of a new confirmation request, or "".

        `full`: acks ride on the confirmations (`ack_policy: flow_control`) and the
        consumer reached max_ack_pending, so only a confirmation can let it go on."""
        self.pending_bytes += size
        if self.reply or (self.pending_bytes <= self.window // 2 and not full):
            return ""
        return self.ask()

    def ask(self) -> str:
        """A new confirmation request's reply subject (none may be outstanding)."""
        self.reply = self._prefix + random_token(4)
        self._asked_at = self.pending_bytes
        return self.reply

    def confirmed(self, subject: str) -> bool:
        """The client answered a request (True; False for a stale or unknown one): what
        was in flight then is settled; grow the window."""
        if subject != self.reply:
            return False
        self.window = min(self.window * 2, FLOW_CONTROL_LIMIT)
        self.pending_bytes = max(self.pending_bytes - self._asked_at, 0)
        self.reply, self._asked_at = "", 0
        return True
