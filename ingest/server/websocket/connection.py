"""One WebSocket connection: the upgrade, then frames around a NATS or MQTT connection.

The protocol inside is the server's ordinary one (`Client`, `MQTTConnection`):
it gets a `FrameTransport` instead of the socket, so everything it writes
goes out as binary frames and everything it reads arrives unframed. This
shell only moves bytes and answers pings; the rules live in `handshake`
and `frames`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ingest.server.websocket import frames, handshake

if TYPE_CHECKING:
    from ingest.server.websocket.listener import WebSocketListener

log = logging.getLogger("jetlake")

# The close code for the reason the connection inside was closed with (the reference's map).
_CLOSE_CODES = {
    "Client Closed": frames.NORMAL,
    "Authentication Failure": frames.POLICY,
    "Authentication Timeout": frames.POLICY,
    "Authentication Expired": frames.POLICY,
    "Max Connections Exceeded": frames.POLICY,
    "Slow Consumer (Pending Bytes)": frames.POLICY,
    "Slow Consumer (Write Deadline)": frames.POLICY,
    "Protocol Violation": frames.PROTOCOL_ERROR,
    "Parser Error": frames.PROTOCOL_ERROR,
    "Maximum Payload Exceeded": frames.TOO_BIG,
    "Server Shutdown": frames.GOING_AWAY,
    "Stale Connection": frames.GOING_AWAY,
    "TLS Handshake Error": frames.TLS_FAILED,
}


class FrameTransport:
    """What the connection inside sees as its transport: writes become binary frames."""

    def __init__(self, outer: WebSocketConnection) -> None:
        self._outer = outer

    def write(self, data: bytes) -> None:
        self._outer.send(data)

    def writelines(self, chunks: list[bytes]) -> None:
        self._outer.send(b"".join(chunks))

    def close(self) -> None:
        self._outer.finish()

    def abort(self) -> None:
        self._outer.abort()

    def is_closing(self) -> bool:
        return self._outer.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._outer.transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._outer.pause_reading()

    def resume_reading(self) -> None:
        self._outer.resume_reading()

    def get_write_buffer_size(self) -> int:
        return self._outer.transport.get_write_buffer_size()


class WebSocketConnection(asyncio.Protocol):
    def __init__(self, listener: WebSocketListener) -> None:
        self.listener = listener
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set on connect
        self.inner: Any = None  # the Client or MQTTConnection, once upgraded
        self.closing = False
        self._head = b""
        self._decoder: frames.FrameDecoder | None = None
        self._compress = False
        self._timer: asyncio.TimerHandle | None = None
        self._peer = ("", 0)
        # While the connection inside has paused reading, what one socket read decoded
        # waits here: it must not see data between its pause and its resume.
        self._paused = False
        self._backlog: list[frames.Event] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername") or ("", 0)
        self._peer = (str(peer[0]), int(peer[1]))
        timeout = self.listener.handshake_timeout
        self._timer = asyncio.get_running_loop().call_later(timeout, self._handshake_timeout)

    def _handshake_timeout(self) -> None:
        if self.inner is None and not self.closing:
            self._refuse(408, "handshake timed out")

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        if self._decoder is None:
            self._upgrade(data)
        else:
            self._frames(data)

    def _upgrade(self, data: bytes) -> None:
        self._head += data
        try:
            parsed = handshake.parse_request(self._head)
            if parsed is None:
                return
            request, rest = parsed
            result = self.listener.check(request)
        except handshake.HandshakeError as exc:
            self._refuse(exc.status, str(exc))
            return
        if rest:
            self._refuse(400, "client sent data before handshake is complete")
            return
        self._head = b""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.transport.write(handshake.accepted(result))
        self._compress = result.compress
        self._decoder = frames.FrameDecoder(
            compressed=result.compress, max_message=self.listener.max_message
        )
        self.inner = self.listener.inner_for(result)
        self.inner.connection_made(FrameTransport(self))

    def _refuse(self, status: int, reason: str) -> None:
        log.error("%s:%d - websocket handshake error: %s", *self._peer, reason)
        self.closing = True
        self.transport.write(handshake.refused(status))
        self.transport.close()

    def _frames(self, data: bytes) -> None:
        assert self._decoder is not None
        self._backlog.extend(self._decoder.feed(data))
        self._deliver()

    def _deliver(self) -> None:
        """Hand the backlog on, up to a pause of the connection inside; then any violation."""
        if self._paused or self.closing:
            return
        events, self._backlog = self._backlog, []
        for i, event in enumerate(events):
            if self._paused:
                self._backlog = events[i:] + self._backlog
                return
            self._handle(event)
            if self.closing:
                return
        exc = self._decoder.error if self._decoder is not None else None
        if exc is not None:
            log.error("%s:%d - wid:%d - read error: %s", *self._peer, self.inner.cid, exc)
            self._end(frames.close_frame(exc.code, str(exc)))

    def _handle(self, event: frames.Event) -> None:
        if type(event) is bytes:
            self.inner.data_received(event)
        elif isinstance(event, frames.Ping):
            self.transport.write(frames.frame(frames.PONG, event.payload))
        elif isinstance(event, frames.Close):
            self._end(frames.close_frame(event.code, event.reason))

    def _end(self, close: bytes) -> None:
        """The peer closed or broke the rules: answer with `close`, then close both layers."""
        self.closing = True
        self.transport.write(close)
        self.inner.connection_lost(None)
        self.transport.close()

    # ---- what the connection inside calls, through FrameTransport ---------------------------

    def send(self, data: bytes) -> None:
        if not self.closing and data:
            self.transport.write(frames.data_frame(data, compress=self._compress))

    def finish(self) -> None:
        """The connection inside closed: a close frame that says why, then the socket."""
        if self.closing:
            return
        self.closing = True
        reason = getattr(self.inner, "close_reason", "") or "Client Closed"
        self.transport.write(frames.close_frame(_CLOSE_CODES.get(reason, frames.INTERNAL), reason))
        self.transport.close()

    def abort(self) -> None:
        self.closing = True
        self.transport.abort()

    def pause_reading(self) -> None:
        self._paused = True
        self.transport.pause_reading()

    def resume_reading(self) -> None:
        self._paused = False
        if not self.closing:
            self.transport.resume_reading()
            if self._backlog:
                asyncio.get_running_loop().call_soon(self._deliver)

    # ---- the socket -------------------------------------------------------------------------

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.closing = True
        if self.inner is not None:
            self.inner.connection_lost(exc)
