"""Sans-IO codec of the leafnode protocol spoken between a hub and its leaf servers.

A leafnode connection is bound to one account on each side, so its operations are
the route protocol's without the account token; everything else (framing, payload
sizes, the rare operations, what a malformed input does) is the route codec's, which
this one extends rather than repeats.

Wire forms, as the reference writes them:
    LS+ <subject> [<queue> <weight>]
    LS- <subject> [<queue>]
    LMSG <subject> [<reply>] <size>
    LMSG <subject> + <reply> <queue>… <size>     (reply and queue groups)
    LMSG <subject> | <queue>… <size>             (queue groups, no reply)
    HMSG …the same… <header size> <size>         (with a header block)

Operations come out as the route codec's types with an empty `account`: `RSub` for
LS+, `RUnsub` for LS-, `RMsg` for LMSG/HMSG. `receive_runs` also gathers consecutive
plain LMSGs on one subject into an `LRun`, cut out by the compiled extension when it
is installed (`split_leaf` in native/src/leafnodes.rs); the rest still parses here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ingest.parser.fast import native
from ingest.parser.routes import (
    PING,
    PONG,
    Connect,
    Err,
    Info,
    Ok,
    PayloadTooLarge,
    Ping,
    Pong,
    RMsg,
    RouteCodec,
    RouteOp,
    RouteProtocolError,
    RSub,
    RUnsub,
    encode_connect,
    encode_err,
    encode_info,
    reply_and_queues,
)

__all__ = [
    "PING",
    "PONG",
    "Connect",
    "Err",
    "Info",
    "LRun",
    "LeafCodec",
    "LeafOp",
    "LeafProtocolError",
    "Ok",
    "PayloadTooLarge",
    "Ping",
    "Pong",
    "RMsg",
    "RSub",
    "RUnsub",
    "encode_connect",
    "encode_err",
    "encode_info",
    "encode_lmsg",
    "encode_lsub",
    "encode_lunsub",
    "shown_suffix_at",
]

LOOP_DETECTION_PREFIX = "$LDS."
"""Each account announces one subject under this prefix to its leafnodes; hearing its
own back over a link means the link closes a loop."""

JS_ACK = b"$JS.ACK."


def shown_suffix_at(reply: bytes) -> int:
    """Where `@<subject>` starts in a JetStream delivery's reply, else -1.

    Across a link a consumer's delivery travels on its deliver subject, the stored
    subject its client is shown appended to the ack reply after `@`, as the reference
    writes it: `$JS.ACK.<stream>.<consumer>.<n>.<sseq>.<cseq>.<ts>.<pending>@<subject>`.
    Tokens before may hold `@` too, so only one after the eighth dot counts."""
    if not reply.startswith(JS_ACK):
        return -1
    dots = 0
    for at, byte in enumerate(reply):
        if byte == 0x2E:
            dots += 1
        elif byte == 0x40 and dots >= 8:
            return at
    return -1


LeafOp = RouteOp
LeafProtocolError = RouteProtocolError
_NO_ACCOUNT = b""  # what the route codec's message parser reads in the account's place


@dataclass(slots=True)
class LRun:
    """Consecutive plain LMSGs (no reply, queue group or header block) on one subject."""

    subject: bytes
    payloads: list[bytes]


_split = getattr(native, "split_leaf", None)  # None: pure, or a build before it


class LeafCodec(RouteCodec):
    """Parses what a hub or a leaf sends. After an error it must not be fed again."""

    __slots__ = ()

    def receive_runs(self, data: bytes) -> list[RouteOp | LRun]:
        """`receive`, with runs of plain LMSGs as `LRun`s: the compiled walk hands this
        codec only whole frames, so it never holds a partial one of its own (it does
        only after input the walk could not read, which then all comes here)."""
        if _split is None or self._buf or self._pending is not None:
            return list(self.receive(data))
        buf = self._tail + data if self._tail else data
        items, used = _split(buf, self.max_control_line, self.max_payload)
        self._tail = buf[used:]
        ops: list[RouteOp | LRun] = []
        for item in items:
            if type(item) is bytes:
                ops += self.receive(item)
            else:
                ops.append(LRun(item[0], item[1]))
        return ops

    def _control(self, line: bytes) -> RouteOp | None:
        verb, _, rest = line.partition(b" ")
        upper = verb.upper()
        if upper == b"LMSG" or upper == b"HMSG":
            args = rest.split()
            self._pending = self._message([_NO_ACCOUNT, *args], headers=upper == b"HMSG")
            return None
        if upper == b"LS+":
            return _lsub(rest.split())
        if upper == b"LS-":
            return _lunsub(rest.split())
        if upper in (b"RMSG", b"RS+", b"RS-"):
            raise LeafProtocolError(f"unknown leafnode operation {verb[:32]!r}")
        return super()._control(line)


def _text(token: bytes) -> str:
    return token.decode("utf-8", "surrogateescape")


def _lsub(args: list[bytes]) -> RSub:
    if len(args) == 1:
        return RSub("", _text(args[0]), None, 0)
    if len(args) == 3:
        if not args[2].isdigit():
            raise LeafProtocolError(f"malformed LS+ weight {args[2][:32]!r}")
        return RSub("", _text(args[0]), _text(args[1]), int(args[2]))
    raise LeafProtocolError(f"malformed LS+: {len(args)} fields")


def _lunsub(args: list[bytes]) -> RUnsub:
    if len(args) == 1:
        return RUnsub("", _text(args[0]), None)
    if len(args) == 2:
        return RUnsub("", _text(args[0]), _text(args[1]))
    raise LeafProtocolError(f"malformed LS-: {len(args)} fields")


# ---- encoding ----------------------------------------------------------------------------


def encode_lsub(subject: str, queue: str | None, weight: int) -> bytes:
    if queue is None:
        return f"LS+ {subject}\r\n".encode("utf-8", "surrogateescape")
    return f"LS+ {subject} {queue} {weight}\r\n".encode("utf-8", "surrogateescape")


def encode_lunsub(subject: str, queue: str | None) -> bytes:
    tail = f" {queue}" if queue is not None else ""
    return f"LS- {subject}{tail}\r\n".encode("utf-8", "surrogateescape")


def encode_lmsg(
    subject: bytes,
    reply: bytes,
    queues: tuple[bytes, ...] | list[bytes],
    hdr: bytes | None,
    payload: bytes,
) -> bytes:
    """One LMSG (HMSG with a header block), formatted once so the payload is copied once."""
    middle = reply_and_queues(reply, queues)
    if hdr is None:
        return b"LMSG %b%b %d\r\n%b\r\n" % (subject, middle, len(payload), payload)
    return b"HMSG %b%b %d %d\r\n%b%b\r\n" % (
        subject,
        middle,
        len(hdr),
        len(hdr) + len(payload),
        hdr,
        payload,
    )
