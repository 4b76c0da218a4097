"""Framing rules the client and the route protocol share.

Both protocols are control lines ended by CRLF, some followed by a payload
whose size the line declares; a parser jumps over the payload by that size
rather than scanning it. What is the same in both lives here once: how a
declared size is read, how header and total sizes relate, how a JSON argument
(CONNECT, INFO) is read, and how the shared control lines are written.
"""

from __future__ import annotations

import json

CRLF = b"\r\n"
PING = b"PING\r\n"
PONG = b"PONG\r\n"
OK = b"+OK\r\n"


def declared_size(token: bytes) -> int:
    """A declared size: ASCII digits only (the reference refuses signs and spaces)."""
    if not token.isdigit():
        raise ValueError(token)
    return int(token)


def payload_sizes(args: list[bytes], *, headers: bool) -> tuple[int, int]:
    """(header size or -1, total size) from the last arguments of a control line.

    Raises ValueError when a size is not digits or the header is larger than the total.
    """
    total = declared_size(args[-1])
    hlen = declared_size(args[-2]) if headers else -1
    if hlen > total:
        raise ValueError(args[-2])
    return hlen, total


def json_object(text: bytes) -> dict[str, object]:
    """The JSON object a CONNECT or INFO line carries; ValueError when it is not one."""
    try:
        value = json.loads(text)
    except RecursionError as exc:  # nesting deeper than the interpreter allows
        raise ValueError("JSON nested too deeply") from exc
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    return value


def encode_info(info: dict[str, object]) -> bytes:
    return b"INFO " + json.dumps(info, separators=(",", ":")).encode() + CRLF


def encode_err(message: str) -> bytes:
    return b"-ERR '" + message.encode() + b"'\r\n"
