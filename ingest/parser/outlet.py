"""A connection's unsent bytes: the reference for `jetlake_native.Outlet`.

Control replies, deliveries Python routes and (with the extension) deliveries the
codec's fast path frames all go into one buffer per connection, so they keep one
order; the server hands it to the transport once per loop turn. The outlet also
counts what it framed, which is the connection's out_msgs and out_bytes.
"""

from __future__ import annotations

from collections.abc import Iterable

from ingest.parser.nats import encode_hmsg, encode_msg

WireMsg = tuple[bytes, bytes, bytes | None, bytes]
"""(subject, reply, headers, payload) as a subscriber sees them."""
RunMsg = tuple[bytes, bytes | None, bytes, int, int, int, int, int]
"""(subject, headers, payload, and five numbers its reply spells after a prefix): a
JetStream delivery, whose `$JS.ACK` reply the outlet frames itself."""


def dotted(prefix: bytes, a: int, b: int, c: int, d: int, e: int) -> bytes:
    """`prefix` followed by five numbers joined by dots: a delivery's ack reply."""
    return b"%b%d.%d.%d.%d.%d" % (prefix, a, b, c, d, e)


class Outlet:
    """`owner` and `notify` are for the compiled fast path, which dirties outlets itself."""

    __slots__ = ("_out", "bytes", "dirty", "headers", "msgs")

    def __init__(self, owner: object = None, notify: object = None) -> None:
        self._out: list[bytes] = []
        self.headers = False  # negotiated by CONNECT: HMSG, else MSG without the headers
        self.msgs = self.bytes = 0
        self.dirty = False

    def write(self, data: bytes) -> bool:
        """Queue raw protocol bytes; True when the outlet was clean before."""
        self._out.append(data)
        was = self.dirty
        self.dirty = True
        return not was

    def msg(
        self, subject: bytes, sid: bytes, reply: bytes, hdr: bytes | None, payload: bytes
    ) -> bool:
        """Queue one delivery; True when the outlet was clean before."""
        if hdr is not None and self.headers:
            self._out.append(encode_hmsg(subject, sid, reply, hdr, payload))
        else:
            self._out.append(encode_msg(subject, sid, reply, payload))
        self.msgs += 1
        self.bytes += len(payload)
        was = self.dirty
        self.dirty = True
        return not was

    def run(self, sid: bytes, prefix: bytes, msgs: Iterable[RunMsg]) -> tuple[bool, int]:
        """A run of deliveries to one subscription, framed as `msg` frames each with the
        reply `dotted(prefix, ...)` (a consumer's run is one call, its replies never Python
        bytes). Returns whether the outlet was clean before (and the run not empty), and
        the run's header and payload bytes."""
        was, size = self.dirty, 0
        for subject, hdr, payload, a, b, c, d, e in msgs:
            self.msg(subject, sid, dotted(prefix, a, b, c, d, e), hdr, payload)
            size += len(payload) if hdr is None else len(payload) + len(hdr)
        return self.dirty and not was, size

    def take(self) -> bytes:
        """Everything queued, leaving the outlet clean and empty."""
        self.dirty = False
        out = self._out
        if not out:
            return b""
        self._out = []
        return out[0] if len(out) == 1 else b"".join(out)

    def __len__(self) -> int:
        return sum(map(len, self._out))

    def close(self) -> None:
        self._out = []
