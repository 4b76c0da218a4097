"""Sans-IO codec of the NATS client protocol, server side.

Bytes from a client go in through `ServerCodec.receive`, operations come out;
nothing here touches a socket, a clock or asyncio. The codec finds each control
line, then jumps over a payload by its declared size instead of scanning it.

What a malformed input does is decided by the reference server and encoded in
`Violation`: some errors send `-ERR '…'` and close, some close silently, and
the rest are not the codec's business (subject rules, permissions).
"""

from __future__ import annotations

from dataclasses import dataclass

from ingest.parser.framing import (
    CRLF,
    OK,
    PING,
    PONG,
    encode_err,
    encode_info,
    json_object,
    payload_sizes,
)

__all__ = ["CRLF", "OK", "PING", "PONG", "encode_err", "encode_info"]  # shared, re-exported

MAX_CONTROL_LINE = 4096
MAX_PAYLOAD = 1024 * 1024

ERR_UNKNOWN_OP = "Unknown Protocol Operation"
ERR_MAX_CONTROL_LINE = "maximum control line exceeded"
ERR_MAX_PAYLOAD = "Maximum Payload Violation"


@dataclass(slots=True)
class Connect:
    options: dict[str, object]


@dataclass(slots=True)
class Pub:
    """PUB or HPUB. Subjects stay bytes: the router caches by them and MSG echoes them."""

    subject: bytes
    reply: bytes
    hdr: bytes | None
    payload: bytes


@dataclass(slots=True)
class Sub:
    subject: str
    queue: str | None
    sid: bytes


@dataclass(slots=True)
class Unsub:
    sid: bytes
    max_msgs: int | None


@dataclass(slots=True)
class Ping:
    pass


@dataclass(slots=True)
class Pong:
    pass


@dataclass(slots=True)
class Violation:
    """A protocol error. `error` is the -ERR text, None where the reference closes silently."""

    error: str | None
    fatal: bool = True


Op = Connect | Pub | Sub | Unsub | Ping | Pong | Violation

_PING = Ping()
_PONG = Pong()


class ServerCodec:
    """Parses what a client sends. After a fatal Violation the codec yields nothing more."""

    __slots__ = (
        "_buf",
        "_dead",
        "_pending",
        "headers",
        "max_control_line",
        "max_payload",
    )

    def __init__(
        self, *, max_control_line: int = MAX_CONTROL_LINE, max_payload: int = MAX_PAYLOAD
    ) -> None:
        self.max_control_line = max_control_line
        self.max_payload = max_payload
        self.headers = False  # CONNECT negotiates them; HPUB is refused before
        self._buf = b""
        self._pending: tuple[bytes, bytes, int, int] | None = None  # subject, reply, hdr, total
        self._dead = False

    def receive(self, data: bytes) -> list[Op]:
        """Every whole operation in the bytes seen so far, in order."""
        if self._dead:
            return []
        buf = self._buf + data if self._buf else data
        ops: list[Op] = []
        pos = 0
        end = len(buf)
        while pos < end:
            pending = self._pending
            if pending is not None:
                subject, reply, hlen, total = pending
                stop = pos + total
                if stop + 2 > end:
                    break
                if buf[stop : stop + 2] != CRLF:
                    return self._fail(ops, ERR_UNKNOWN_OP)
                if hlen >= 0:
                    ops.append(Pub(subject, reply, buf[pos : pos + hlen], buf[pos + hlen : stop]))
                else:
                    ops.append(Pub(subject, reply, None, buf[pos:stop]))
                self._pending = None
                pos = stop + 2
                continue
            nl = buf.find(b"\n", pos)
            if nl < 0:
                if end - pos > self.max_control_line:
                    return self._fail(ops, ERR_MAX_CONTROL_LINE)
                break
            line = buf[pos:nl]
            pos = nl + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > self.max_control_line:
                return self._fail(ops, ERR_MAX_CONTROL_LINE)
            op = self._control(line)
            if op is None:
                continue
            if type(op) is Violation:
                return self._fail(ops, op.error)
            ops.append(op)
        self._buf = buf[pos:] if pos < end else b""
        return ops

    def _fail(self, ops: list[Op], error: str | None) -> list[Op]:
        self._dead = True
        self._buf = b""
        ops.append(Violation(error))
        return ops

    def _control(self, line: bytes) -> Op | None:
        """One control line; a PUB only arms `_pending`, its payload comes next."""
        head = line[:4].upper()
        if head == b"PUB " or head == b"PUB\t":
            return self._pub(line.split()[1:], headers=False)
        if head == b"HPUB":
            if not self.headers:
                return Violation(None)
            return self._pub(line.split()[1:], headers=True)
        if head == b"PING":
            return _PING
        if head == b"PONG":
            return _PONG
        if head == b"SUB " or head == b"SUB\t":
            return self._sub(line.split()[1:])
        if head == b"UNSU":
            return self._unsub(line)
        if head == b"CONN":
            return self._connect(line)
        if head == b"INFO" or line[:3] == b"+OK":
            return None  # the reference accepts and ignores these from clients
        if line[:4] == b"-ERR":
            return Violation(None)
        return Violation(ERR_UNKNOWN_OP)

    def _pub(self, args: list[bytes], *, headers: bool) -> Op | None:
        want = 3 if headers else 2
        if len(args) not in (want, want + 1):
            return Violation(None)
        try:
            hlen, total = payload_sizes(args, headers=headers)
        except ValueError:
            return Violation(None)
        if total > self.max_payload:
            return Violation(ERR_MAX_PAYLOAD)
        reply = args[1] if len(args) == want + 1 else b""
        self._pending = (args[0], reply, hlen, total)
        return None

    @staticmethod
    def _sub(args: list[bytes]) -> Op:
        if len(args) == 2:
            return Sub(args[0].decode("utf-8", "surrogateescape"), None, args[1])
        if len(args) == 3:
            subject, queue, sid = args
            return Sub(
                subject.decode("utf-8", "surrogateescape"),
                queue.decode("utf-8", "surrogateescape"),
                sid,
            )
        return Violation(None)

    @staticmethod
    def _unsub(line: bytes) -> Op:
        parts = line.split()
        if parts[0].upper() != b"UNSUB":
            return Violation(ERR_UNKNOWN_OP)
        args = parts[1:]
        if len(args) == 1:
            return Unsub(args[0], None)
        if len(args) == 2:
            # A max the reference cannot parse counts as "already reached".
            return Unsub(args[0], int(args[1]) if args[1].isdigit() else 0)
        if not args:
            return Violation(ERR_UNKNOWN_OP)
        return Violation(None)

    def _connect(self, line: bytes) -> Op:
        name, _, rest = line.partition(b" ")
        if name.upper() != b"CONNECT":
            return Violation(ERR_UNKNOWN_OP)
        try:
            options = json_object(rest)
        except ValueError:
            return Violation(None)
        # Negotiated here, not by the caller: an HPUB may follow in the same read.
        self.headers = bool(options.get("headers", False))
        if options.get("no_responders") and not self.headers:
            return Violation("no responders requires headers support")
        return Connect(options)


def encode_msg(subject: bytes, sid: bytes, reply: bytes, payload: bytes) -> bytes:
    """One format per message: each extra concatenation copies the payload again."""
    if reply:
        return b"MSG %b %b %b %d\r\n%b\r\n" % (subject, sid, reply, len(payload), payload)
    return b"MSG %b %b %d\r\n%b\r\n" % (subject, sid, len(payload), payload)


def encode_hmsg(subject: bytes, sid: bytes, reply: bytes, hdr: bytes, payload: bytes) -> bytes:
    total = len(hdr) + len(payload)
    if reply:
        return b"HMSG %b %b %b %d %d\r\n%b%b\r\n" % (
            subject,
            sid,
            reply,
            len(hdr),
            total,
            hdr,
            payload,
        )
    return b"HMSG %b %b %d %d\r\n%b%b\r\n" % (subject, sid, len(hdr), total, hdr, payload)
