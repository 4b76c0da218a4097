"""How every connection kind (a client, an MQTT connection, a route, a leafnode link)
begins to close, so a second close, from whichever path, does nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio


class Closing:
    """Mixed into a connection's asyncio.Protocol, which owns the state named below."""

    if TYPE_CHECKING:
        closed: bool
        close_reason: str
        _timers: dict[str, asyncio.TimerHandle]

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
