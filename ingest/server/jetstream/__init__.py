"""JetStream as an internal client of the core server.

The composition root builds `JetStream(options.jetstream, server, server_id=…,
server_name=…)` when `-js` is given, awaits `start()` after the listeners are
up and `stop()` on shutdown; `info()` feeds /jsz.
"""

from __future__ import annotations

from ingest.server.jetstream.engine import JetStream
from ingest.server.jetstream.port import Messaging

NO_RESPONDERS = b"NATS/1.0 503\r\n\r\n"

__all__ = ["JetStream", "Messaging", "answer_disabled"]


def answer_disabled(messaging: Messaging, reply: str | None) -> None:
    """What a client sees from the reference when JetStream is off: no responders (503).

    The reference has no API subscription at all then; not subscribing is the
    exact equivalent, and this is for servers that keep a `$JS.API.>` listener.
    """
    if reply:
        messaging.publish(reply, None, NO_RESPONDERS, b"")
