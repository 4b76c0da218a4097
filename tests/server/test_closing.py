"""The close every connection kind shares: once only, and the socket hung up alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ingest.server.closing import Closing


@dataclass
class FakeTransport:
    written: list[bytes] = field(default_factory=list)
    state: str = "open"

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.state != "open"

    def close(self) -> None:
        self.state = "closed"

    def abort(self) -> None:
        self.state = "aborted"


@dataclass
class FakeTLS:
    established: bool = True

    def shutdown(self) -> bytes:
        return b"close_notify"


class Conn(Closing):
    def __init__(self, transport: Any, tls: Any = None) -> None:
        self.closed = False
        self.close_reason = ""
        self._timers: dict[str, Any] = {}
        self.transport = transport
        self.tls = tls
        self.flushed = 0

    def flush(self) -> None:
        self.flushed += 1


def test_a_second_close_does_nothing() -> None:
    conn = Conn(FakeTransport())
    assert conn._closing("Client Closed", flush=True)
    assert not conn._closing("Stale Connection", flush=True)
    assert (conn.close_reason, conn.flushed) == ("Client Closed", 1)


def test_tls_says_close_notify_before_the_socket_closes() -> None:
    transport = FakeTransport()
    Conn(transport, FakeTLS())._hang_up_socket(abort=False)
    assert (transport.written, transport.state) == ([b"close_notify"], "closed")


def test_an_abort_drops_what_is_unsent_and_says_nothing() -> None:
    transport = FakeTransport()
    Conn(transport, FakeTLS())._hang_up_socket(abort=True)
    assert (transport.written, transport.state) == ([], "aborted")


def test_plain_or_unfinished_tls_just_closes() -> None:
    for tls in (None, FakeTLS(established=False)):
        transport = FakeTransport()
        Conn(transport, tls)._hang_up_socket(abort=False)
        assert (transport.written, transport.state) == ([], "closed")
    Conn(None)._hang_up_socket(abort=False)  # never connected: nothing to hang up
