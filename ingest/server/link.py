"""What a server-to-server connection (a route, a leafnode link) does the same way
whichever protocol it speaks: writing its queued output (S2-compressed once the link
negotiated it, encrypted once the TLS handshake is done, closed as a slow consumer past
`max_pending`), keeping itself alive with PINGs that measure the round trip, and
hanging up."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ingest.parser import routes
from ingest.parser.framing import PING, PONG, encode_err
from ingest.server.auth.authenticator import AUTH_VIOLATION
from ingest.server.closing import Closing
from ingest.server.tls import TLSLink

if TYPE_CHECKING:
    from ingest.server.settings import Options
    from ingest.server.trouble import Trouble

log = logging.getLogger("jetlake")

TURN_MSGS = 128  # inbound messages a link dispatches per turn of the event loop


class PeerLink(Closing, TLSLink):
    """Mixed into the connection's asyncio.Protocol ahead of it. The connection owns the
    state named below and says which server options apply (`link_opts`)."""

    if TYPE_CHECKING:
        done: asyncio.Future[None]
        rtt: float
        _out: list[bytes]
        _rtt_start: float
        _pings_out: int

        @property
        def link_opts(self) -> Options: ...
        @property
        def link_trouble(self) -> Trouble: ...
        def queue(self, data: bytes) -> None: ...
        def _on_info(self, info: dict[str, Any]) -> None: ...
        def _on_connect(self, options: dict[str, Any]) -> None: ...
        def close(self, reason: str, *, flush: bool = False, abort: bool = False) -> None: ...

    trouble_kind = ""  # what the link counts as in `Trouble`: "routes", "leafs"
    _waiting_turn = False  # reading paused while the rest of a read waits its turn
    _deflate: Callable[[bytes], bytes] | None = None  # each flush as an S2 stream, once on
    _raw_head = b""  # what was queued before compression started: sent as it is

    def _next_turn(self, rest: Callable[[], None]) -> None:
        """Leave the rest of a read to the next turn of the loop, reading paused till then.

        A peer sending a backlog fills each read with thousands of messages (a reference
        leaf's source consumer sends up to 32 MB before it waits for flow control, which
        a hub then forwards over a route to the stream leader); taken in one go they hold
        the loop for a second or more, and this server's Raft leaders miss heartbeats and
        are deposed over and over. Reading stays paused so the order holds."""
        if not self._waiting_turn and self.transport is not None:
            self._waiting_turn = True
            self.transport.pause_reading()
        asyncio.get_running_loop().call_soon(self._take_turn, rest)

    def _take_turn(self, rest: Callable[[], None]) -> None:
        if self.closed:
            return
        self._waiting_turn = False
        rest()
        if not self._waiting_turn and not self.closed and self.transport is not None:
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.close("Client Closed" if exc is None else "Read Error")

    def _write_out(self) -> None:
        """Send what is queued; what waits for the TLS handshake stays queued."""
        if self.transport is None or self.closed or not (self._out or self._raw_head):
            self._out.clear()
            return
        tls = self.tls
        if tls is not None and not tls.established:
            return  # sent once the handshake completes
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out = []
        if self._deflate is not None and data:
            data = self._deflate(data)
        if self._raw_head:
            data, self._raw_head = self._raw_head + data, b""
        self.transport.write(data if tls is None else tls.encrypt(data))
        if self.transport.get_write_buffer_size() > self.link_opts.max_pending:
            self.link_trouble.slow[self.trouble_kind] += 1
            log.info("%s - Slow Consumer Detected: %s", self.where, self.tls_kind)
            self.close("Slow Consumer (Pending Bytes)", abort=True)

    def compress_output(self, deflate: Callable[[bytes], bytes]) -> None:
        """From now on every flush goes out through `deflate`; what is queued already
        goes as it is (the INFO that said so, before the other side reads S2)."""
        if self._out:
            self._raw_head += b"".join(self._out)
            self._out = []
        self._deflate = deflate

    def _rtt_measured(self) -> None:
        """A PONG gave a new round trip (an `s2_auto` link picks its level again)."""

    def _send_ping(self) -> None:
        if self.closed:
            return
        opts = self.link_opts
        if self._pings_out + 1 > opts.ping_max:
            self.link_trouble.stale[self.trouble_kind] += 1
            self.close("Stale Connection")
            return
        self._pings_out += 1
        self._rtt_start = time.monotonic()
        self.queue(PING)
        loop = asyncio.get_running_loop()
        self._timers["ping"] = loop.call_later(opts.ping_interval, self._send_ping)

    def _control(self, op: object) -> None:
        """The operations routes and leafnode links answer alike: PING, PONG (the round
        trip measured), INFO and CONNECT (each kind's own handshake)."""
        if isinstance(op, routes.Ping):
            self.queue(PONG)
        elif isinstance(op, routes.Pong):
            if self._pings_out:
                self.rtt = time.monotonic() - self._rtt_start
                self._rtt_measured()
            self._pings_out = 0
        elif isinstance(op, routes.Info):
            self._on_info(op.info)
        elif isinstance(op, routes.Connect):
            self._on_connect(op.options)

    def _refuse_login(self, options: dict[str, Any]) -> None:
        """A peer's CONNECT without valid credentials: logged with the user it named, as
        the reference does, answered with -ERR, and the link closed."""
        user = options.get("user")
        who = f' - User "{user}"' if isinstance(user, str) and user else ""
        log.error("%s - authentication error%s", self.where, who)
        self.queue(encode_err(AUTH_VIOLATION))
        self.close("Authentication Failure", flush=True)

    def _hang_up(self, *, abort: bool) -> None:
        """Close the socket (our TLS close_notify first, unless aborting) and wake whoever
        waits for the link to end."""
        self._hang_up_socket(abort=abort)
        if not self.done.done():
            self.done.set_result(None)
