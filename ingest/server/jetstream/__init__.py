"""JetStream as an internal client of the core server.

The composition root builds `JetStream(options.jetstream, server, server_id=…,
server_name=…)` when `-js` is given, awaits `start()` after the listeners are
up and `stop()` on shutdown; `info()` feeds /jsz.
"""

from __future__ import annotations

from ingest.server.jetstream.engine import JetStream
from ingest.server.jetstream.port import Messaging

__all__ = ["JetStream", "Messaging"]
