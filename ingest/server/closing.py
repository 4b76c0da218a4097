"""How every connection kind (a client, an MQTT connection, a route, a leafnode link)
begins to close, so a second close, from whichever path, does nothing, and how it hangs
up its socket. (A WebSocket carries a client or an MQTT connection: it closes as they do,
its frames written by the transport it lends them.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

    from ingest.server.tls import TLSLayer


class Closing:
    """Mixed into a connection's asyncio.Protocol, which owns the state named below."""

    if TYPE_CHECKING:
        closed: bool
        close_reason: str
        _timers: dict[str, asyncio.TimerHandle]
        transport: asyncio.Transport | None

        def flush(self) -> None: ...

    def _closing(self, reason: str, *, flush: bool) -> bool:
        """Whether this call closes the connection (not closed before): the last output
        sent when asked, the reason kept and the timers stopped."""
        if self.closed:
            return False
        if flush:
            self.flush()
        self.closed = True
        self.close_reason = reason
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        return True

    tls: TLSLayer | None = None  # the TLS this connection runs in its byte stream, if any

    def _hang_up_socket(self, *, abort: bool) -> None:
        """Close the socket: at once when aborting (a slow consumer's unsent bytes are
        dropped), else after what is queued and our TLS close_notify."""
        transport = self.transport
        if transport is None:
            return
        if abort:
            transport.abort()
            return
        tls = self.tls
        if tls is not None and tls.established and not transport.is_closing():
            transport.write(tls.shutdown())
        transport.close()
