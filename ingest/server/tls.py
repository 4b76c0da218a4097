"""TLS contexts from `tls {}` options (Python's ssl, no extra deps), and the memory-BIO
layer every connection kind drives its handshake and records through.

Routes use both sides: the server that dialled is the TLS client, presenting the
same certificate as its server side, and checks the peer's against `ca_file` and
the route URL's host, as the reference does."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from typing import TYPE_CHECKING, Protocol

from ingest.server.pinning import check_pinned

log = logging.getLogger("jetlake")


class _TLSOptions(Protocol):
    cert_file: str | None
    key_file: str | None
    ca_file: str | None
    verify: bool
    insecure: bool
    pinned_certs: frozenset[str] | None


class Context(ssl.SSLContext):
    """A context that also carries the `pinned_certs` its handshakes check."""

    pinned_certs: frozenset[str] | None = None


def make_server_context(tls: _TLSOptions) -> ssl.SSLContext:
    """A context that presents our certificate and, with verify, demands the client's."""
    if not tls.cert_file or not tls.key_file:
        raise ValueError(
            "TLS needs both a certificate (tlscert/cert_file) and a key (tlskey/key_file)"
        )
    ctx = Context(ssl.PROTOCOL_TLS_SERVER)
    ctx.pinned_certs = tls.pinned_certs
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.ca_file:
        ctx.load_verify_locations(tls.ca_file)
    if tls.verify:
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def make_client_context(tls: _TLSOptions) -> ssl.SSLContext:
    """The dialling side of a route or leafnode link: our certificate when configured (the
    peer may demand it), the peer's checked against `ca_file` (else the system's roots)
    and the host dialled, unless `insecure`."""
    if bool(tls.cert_file) != bool(tls.key_file):
        raise ValueError("TLS needs both a certificate (cert_file) and a key (key_file)")
    ctx = Context(ssl.PROTOCOL_TLS_CLIENT)
    ctx.pinned_certs = tls.pinned_certs
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls.cert_file and tls.key_file:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.ca_file:
        ctx.load_verify_locations(tls.ca_file)
    else:
        ctx.load_default_certs()
    if tls.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def route_contexts(tls: _TLSOptions | None) -> tuple[ssl.SSLContext, ssl.SSLContext] | None:
    """The accepting and the dialling contexts of `cluster { tls {} }`; None without it."""
    if tls is None:
        return None
    return make_server_context(tls), make_client_context(tls)


def handshake_error(exc: ssl.SSLError) -> str:
    """What went wrong, for the log line naming the peer: the certificate check's
    verdict when there is one."""
    detail = getattr(exc, "verify_message", None)
    return f"certificate verify failed: {detail}" if detail else str(exc.reason or exc)


class TLSLayer:
    """TLS over memory BIOs, owned by one connection (the server side unless given the
    host it dialled).

    asyncio's start_tls hands decrypted bytes to the protocol before it returns
    the new transport, so a reply could leave in plain text; feeding the
    SSLObject ourselves keeps every byte on one path, in order.
    """

    __slots__ = ("_in", "_obj", "_out", "_pinned", "established", "peer_closed")

    def __init__(self, ctx: ssl.SSLContext, *, dialled: str | None = None) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = ctx.wrap_bio(
            self._in, self._out, server_side=dialled is None, server_hostname=dialled
        )
        self._pinned = getattr(ctx, "pinned_certs", None)
        self.established = False
        self.peer_closed = False  # the client sent close_notify: answer and close

    def receive(self, data: bytes) -> bytes:
        """Raw bytes in, plaintext out (empty while the handshake runs). Raises ssl.SSLError."""
        self._in.write(data)
        if not self.established:
            try:
                self._obj.do_handshake()
            except ssl.SSLWantReadError:
                return b""
            check_pinned(self._obj, self._pinned)
            self.established = True
        chunks: list[bytes] = []
        while True:
            try:
                chunk = self._obj.read(262144)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                chunk = b""
            if not chunk:  # an SSLObject reads b"" once close_notify arrived
                self.peer_closed = True
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def pinned_by(self, pinned: frozenset[str] | None) -> bool:
        """Whether the peer's key is in `pinned` (a reload's new set); any peer without one."""
        try:
            check_pinned(self._obj, pinned)
        except ssl.SSLError:
            return False
        return True

    def encrypt(self, data: bytes) -> bytes:
        self._obj.write(data)
        return self._out.read()

    def shutdown(self) -> bytes:
        """Our close_notify, so the client's TLS close completes instead of timing out."""
        # The peer's half may not have arrived yet; ours is queued either way.
        with contextlib.suppress(ssl.SSLError):
            self._obj.unwrap()
        return self._out.read()

    def outgoing(self) -> bytes:
        """Handshake records (or alerts) waiting to be sent."""
        return self._out.read()


class TLSLink:
    """The TLS part of a server-to-server connection (a route, a leafnode link), mixed
    into its asyncio.Protocol: the handshake driven through a `TLSLayer`, a timeout on
    it, and a failure logged naming the peer. The connection keeps what waits for the
    handshake in its output queue and encrypts in its own `flush`."""

    tls_kind = ""  # in the log line: "route", "leafnode"
    tls: TLSLayer | None = None
    if TYPE_CHECKING:
        transport: asyncio.Transport | None
        closed: bool
        _timers: dict[str, asyncio.TimerHandle]

        @property
        def where(self) -> str: ...
        def flush(self) -> None: ...
        def close(self, reason: str) -> None: ...

    def begin_tls(self, ctx: ssl.SSLContext, timeout: float, *, dialled: str | None) -> None:
        """Start the handshake: as the TLS client (sending the ClientHello) when this side
        dialled `dialled`, else as the server."""
        self.tls = TLSLayer(ctx, dialled=dialled)
        if dialled is not None:
            self.tls.receive(b"")  # the ClientHello
            self._write_raw(self.tls.outgoing())
        loop = asyncio.get_running_loop()
        self._timers["tls"] = loop.call_later(timeout, self._tls_timeout)

    def _plain(self, data: bytes) -> bytes:
        """What the peer sent, decrypted when the link runs TLS: empty while the handshake
        runs or once it failed (the connection then closed)."""
        if self.tls is None:
            return data
        return self._tls_receive(self.tls, data) or b""

    def _tls_receive(self, tls: TLSLayer, data: bytes) -> bytes | None:
        """Decrypt; None when the handshake failed and the connection is gone."""
        was_established = tls.established
        try:
            plain = tls.receive(data)
        except ssl.SSLError as exc:
            error = handshake_error(exc)
            log.error("%s - TLS %s handshake error: %s", self.where, self.tls_kind, error)
            self._write_raw(tls.outgoing())
            self.close("TLS Handshake Failure")
            return None
        self._write_raw(tls.outgoing())
        if tls.established and not was_established:
            log.debug("%s - TLS handshake complete", self.where)
            timer = self._timers.pop("tls", None)
            if timer is not None:
                timer.cancel()
            self.flush()  # what waited for the handshake: CONNECT, INFO
        if tls.peer_closed:
            self.close("Client Closed")
            return None
        return plain

    def _tls_timeout(self) -> None:
        if self.tls is not None and not self.tls.established and not self.closed:
            log.error("%s - TLS %s handshake error: timeout", self.where, self.tls_kind)
            self.close("TLS Handshake Failure")

    def _write_raw(self, data: bytes) -> None:
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)
