"""Sans-IO codec of the route protocol spoken between servers of one cluster.

Bytes from a peer go in through `RouteCodec.receive`, operations come out; a
malformed input raises `RouteProtocolError` (a peer is a server, not a client
to be coached with -ERR variants: the connection is dropped and redialled).
Payloads of RMSG/HMSG are jumped over by their declared size.

Wire forms, as the reference writes them:
    RS+ <account> <subject> [<queue> <weight>]
    RS- <account> <subject> [<queue>]
    RMSG <account> <subject> [<reply>] <size>
    RMSG <account> <subject> + <reply> <queue>… <size>     (reply and queue groups)
    RMSG <account> <subject> | <queue>… <size>             (queue groups, no reply)
    HMSG …the same… <header size> <size>
"""

from __future__ import annotations

from dataclasses import dataclass

from ingest.parser.fast import native
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

__all__ = ["OK", "PING", "PONG", "encode_err", "encode_info"]  # shared, re-exported

MAX_CONTROL_LINE = 4096
MAX_PAYLOAD = 1024 * 1024


class RouteProtocolError(Exception):
    """What a peer sent cannot be parsed; the connection it came on must be closed."""


class PayloadTooLarge(RouteProtocolError):
    """A message over this server's `max_payload`: the reference names both sizes and
    closes the connection for it alone, apart from other parse errors."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"message of {size} bytes exceeds the maximum payload")
        self.size = size
        self.limit = limit


@dataclass(frozen=True, slots=True)
class Info:
    info: dict[str, object]


@dataclass(frozen=True, slots=True)
class Connect:
    options: dict[str, object]


@dataclass(frozen=True, slots=True)
class RSub:
    """Interest of the peer's clients; `weight` is the size of a queue group there."""

    account: str
    subject: str
    queue: str | None
    weight: int


@dataclass(frozen=True, slots=True)
class RUnsub:
    account: str
    subject: str
    queue: str | None


@dataclass(slots=True)
class RMsg:
    """A message the peer routed here; `queues` are the groups this server is to serve.

    Not frozen, unlike the rare operations: it is built once per routed message and a
    frozen dataclass pays for `object.__setattr__` on every field."""

    account: str
    subject: bytes
    reply: bytes
    queues: tuple[bytes, ...]
    hdr: bytes | None
    payload: bytes


@dataclass(frozen=True, slots=True)
class Ping:
    pass


@dataclass(frozen=True, slots=True)
class Pong:
    pass


@dataclass(frozen=True, slots=True)
class Ok:
    pass


@dataclass(frozen=True, slots=True)
class Err:
    message: str


RouteOp = Info | Connect | RSub | RUnsub | RMsg | Ping | Pong | Ok | Err

_PING, _PONG, _OK = Ping(), Pong(), Ok()


@dataclass(slots=True)
class _Pending:
    """An RMSG/HMSG whose control line is read and whose payload is awaited."""

    account: str
    subject: bytes
    reply: bytes
    queues: tuple[bytes, ...]
    hlen: int
    total: int


_split = getattr(native, "split_route", None)  # None: pure, or a build before it


class RouteCodec:
    """Parses what a peer server sends. After an error the codec must not be fed again."""

    __slots__ = ("_buf", "_pending", "_tail", "max_control_line", "max_payload")

    def __init__(
        self, *, max_control_line: int = MAX_CONTROL_LINE, max_payload: int = MAX_PAYLOAD
    ) -> None:
        self.max_control_line = max_control_line
        self.max_payload = max_payload
        self._buf = b""
        self._pending: _Pending | None = None
        self._tail = b""  # a frame not whole yet, for the compiled walk

    def receive_walked(self, data: bytes) -> list[RouteOp]:
        """`receive`, with plain RMSGs built by the compiled walk (`split_route`), which
        hands this codec only whole frames, so it never holds a partial one of its own
        (it does only after input the walk could not read, which then all comes here)."""
        buf = self._tail + data if self._tail else data
        self._tail = b""
        if _split is None or self._buf or self._pending is not None:
            return self.receive(buf)
        items, used = _split(buf, self.max_control_line, self.max_payload, RMsg)
        self._tail = buf[used:]
        ops: list[RouteOp] = []
        for item in items:
            if type(item) is bytes:
                ops += self.receive(item)
            else:
                ops.append(item)
        return ops

    def receive(self, data: bytes) -> list[RouteOp]:
        """Every whole operation in the bytes seen so far, in order."""
        buf = self._buf + data if self._buf else data
        ops: list[RouteOp] = []
        pos, end = 0, len(buf)
        while pos < end:
            pending = self._pending
            if pending is not None:
                stop = pos + pending.total
                if stop + 2 > end:
                    break
                if buf[stop : stop + 2] != CRLF:
                    raise RouteProtocolError("message payload not followed by CRLF")
                hdr = buf[pos : pos + pending.hlen] if pending.hlen >= 0 else None
                body = buf[pos + max(pending.hlen, 0) : stop]
                ops.append(
                    RMsg(
                        pending.account,
                        pending.subject,
                        pending.reply,
                        pending.queues,
                        hdr,
                        body,
                    )
                )
                self._pending = None
                pos = stop + 2
                continue
            nl = buf.find(b"\n", pos)
            if nl < 0:
                if end - pos > self.max_control_line:
                    raise RouteProtocolError("maximum control line exceeded")
                break
            line = buf[pos:nl]
            pos = nl + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > self.max_control_line:
                raise RouteProtocolError("maximum control line exceeded")
            op = self._control(line)
            if op is not None:
                ops.append(op)
        self._buf = buf[pos:] if pos < end else b""
        return ops

    def _control(self, line: bytes) -> RouteOp | None:
        verb, _, rest = line.partition(b" ")
        verb = verb.upper()
        if verb == b"RMSG" or verb == b"HMSG":
            self._pending = self._message(rest.split(), headers=verb == b"HMSG")
            return None
        if verb == b"RS+":
            return _rsub(rest.split())
        if verb == b"RS-":
            return _runsub(rest.split())
        if verb == b"PING":
            return _PING
        if verb == b"PONG":
            return _PONG
        if verb == b"+OK":
            return _OK
        if verb == b"-ERR":
            return Err(rest.strip().strip(b"'").decode("utf-8", "replace"))
        if verb == b"INFO":
            return Info(_json(rest, "INFO"))
        if verb == b"CONNECT":
            return Connect(_json(rest, "CONNECT"))
        raise RouteProtocolError(f"unknown route operation {verb[:32]!r}")

    def _message(self, args: list[bytes], *, headers: bool) -> _Pending:
        sizes = 2 if headers else 1
        if len(args) < 2 + sizes:
            raise RouteProtocolError(f"malformed {'HMSG' if headers else 'RMSG'}: too few fields")
        try:
            hlen, total = payload_sizes(args, headers=headers)
        except ValueError as exc:
            raise RouteProtocolError(f"malformed message size {exc}") from None
        if total > self.max_payload:
            raise PayloadTooLarge(total, self.max_payload)
        account, subject, middle = args[0], args[1], args[2 : len(args) - sizes]
        reply, queues = b"", ()
        if middle and middle[0] == b"+":
            if len(middle) < 3:
                raise RouteProtocolError("malformed message: '+' without reply and queue")
            reply, queues = middle[1], tuple(middle[2:])
        elif middle and middle[0] == b"|":
            if len(middle) < 2:
                raise RouteProtocolError("malformed message: '|' without queue")
            queues = tuple(middle[1:])
        elif len(middle) == 1:
            reply = middle[0]
        elif middle:
            raise RouteProtocolError("malformed message: too many fields")
        return _Pending(_text(account), subject, reply, queues, hlen, total)


def _text(token: bytes) -> str:
    return token.decode("utf-8", "surrogateescape")


def _json(rest: bytes, verb: str) -> dict[str, object]:
    try:
        return json_object(rest)
    except ValueError as exc:
        raise RouteProtocolError(f"malformed {verb}: {exc}") from None


def _rsub(args: list[bytes]) -> RSub:
    if len(args) == 2:
        return RSub(_text(args[0]), _text(args[1]), None, 0)
    if len(args) in (3, 4):
        weight = 1
        if len(args) == 4:
            if not args[3].isdigit():
                raise RouteProtocolError(f"malformed RS+ weight {args[3][:32]!r}")
            weight = int(args[3])
        return RSub(_text(args[0]), _text(args[1]), _text(args[2]), weight)
    raise RouteProtocolError(f"malformed RS+: {len(args)} fields")


def _runsub(args: list[bytes]) -> RUnsub:
    if len(args) == 2:
        return RUnsub(_text(args[0]), _text(args[1]), None)
    if len(args) == 3:
        return RUnsub(_text(args[0]), _text(args[1]), _text(args[2]))
    raise RouteProtocolError(f"malformed RS-: {len(args)} fields")


# ---- encoding ----------------------------------------------------------------------------


def encode_connect(options: dict[str, object]) -> bytes:
    return b"CONNECT " + encode_info(options)[5:]


def encode_rsub(account: str, subject: str, queue: str | None, weight: int) -> bytes:
    if queue is None:
        return f"RS+ {account} {subject}\r\n".encode("utf-8", "surrogateescape")
    return f"RS+ {account} {subject} {queue} {weight}\r\n".encode("utf-8", "surrogateescape")


def encode_runsub(account: str, subject: str, queue: str | None) -> bytes:
    tail = f" {queue}" if queue is not None else ""
    return f"RS- {account} {subject}{tail}\r\n".encode("utf-8", "surrogateescape")


def reply_and_queues(reply: bytes, queues: tuple[bytes, ...] | list[bytes]) -> bytes:
    """The part of a routed message's control line between subject and sizes, with its
    leading space (empty for neither): `+ reply q…`, `| q…`, or the reply alone."""
    if queues:
        lead = b"+ " + reply + b" " if reply else b"| "
        return b" " + lead + b" ".join(queues)
    return b" " + reply if reply else b""


def encode_rmsg(
    account: bytes,
    subject: bytes,
    reply: bytes,
    queues: tuple[bytes, ...] | list[bytes],
    hdr: bytes | None,
    payload: bytes,
) -> bytes:
    """One RMSG (or HMSG with headers) in a single format, so the payload is copied once."""
    middle = reply_and_queues(reply, queues)
    if hdr is None:
        return b"RMSG %b %b%b %d\r\n%b\r\n" % (account, subject, middle, len(payload), payload)
    total = len(hdr) + len(payload)
    return b"HMSG %b %b%b %d %d\r\n%b%b\r\n" % (
        account,
        subject,
        middle,
        len(hdr),
        total,
        hdr,
        payload,
    )
