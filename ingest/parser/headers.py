"""The NATS/1.0 header block: `NATS/1.0[ status[ description]]\\r\\n(Key: value\\r\\n)*\\r\\n`.

Header names keep the case they were sent with (the reference does not
canonicalise them); lookups that must be case-insensitive do so themselves.
"""

from __future__ import annotations

from collections.abc import Mapping

_PREFIX = b"NATS/1.0"


class HeaderError(ValueError):
    """The block does not start with NATS/1.0 or a line is malformed."""


def parse_headers(block: bytes) -> tuple[int | None, str, dict[str, list[str]]]:
    """Split a header block into (status, description, headers with every value kept)."""
    if not block.startswith(_PREFIX):
        raise HeaderError("header block does not start with NATS/1.0")
    text = block.decode("utf-8", "surrogateescape")
    lines = text.split("\r\n")
    status: int | None = None
    description = ""
    first = lines[0][len("NATS/1.0") :].strip()
    if first:
        code, _, description = first.partition(" ")
        if not (len(code) == 3 and code.isdigit()):
            raise HeaderError(f"bad status line {lines[0]!r}")
        status = int(code)
        description = description.strip()
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise HeaderError(f"bad header line {line!r}")
        headers.setdefault(name.strip(), []).append(value.strip())
    return status, description, headers


def encode_headers(
    headers: Mapping[str, str | list[str]] | None = None,
    status: int | None = None,
    description: str = "",
) -> bytes:
    """Build a header block; list values become repeated lines, as clients expect."""
    parts = ["NATS/1.0"]
    if status is not None:
        parts.append(f" {status}")
        if description:
            parts.append(f" {description}")
    parts.append("\r\n")
    for name, value in (headers or {}).items():
        for v in [value] if isinstance(value, str) else value:
            parts.append(f"{name}: {v}\r\n")
    parts.append("\r\n")
    return "".join(parts).encode("utf-8", "surrogateescape")


def header_value(block: bytes | None, name: bytes) -> bytes | None:
    """First value of one header, found without parsing the whole block (publish hot path)."""
    if not block:
        return None
    lowered = block.lower()
    key = b"\r\n" + name.lower() + b":"
    i = lowered.find(key)
    if i < 0:
        return None
    start = i + len(key)
    end = block.find(b"\r\n", start)
    return block[start:end].strip()


def set_header(block: bytes | None, name: bytes, value: bytes) -> bytes:
    """The block with `name`'s first line holding `value`, or the line added at the end
    (a block is made if there was none); the other lines keep their order."""
    line = name + b": " + value
    if not block:
        return b"NATS/1.0\r\n" + line + b"\r\n\r\n"
    key = b"\r\n" + name.lower() + b":"
    i = block.lower().find(key)
    if i < 0:
        return block[:-2] + line + b"\r\n\r\n"
    end = block.find(b"\r\n", i + len(key))
    return block[: i + 2] + line + block[end:]


def remove_header(block: bytes, name: bytes) -> bytes:
    """The block without any line of `name`."""
    key = name.lower() + b":"
    lines = block.split(b"\r\n")
    return b"\r\n".join(
        ln for i, ln in enumerate(lines) if i == 0 or not ln.lower().startswith(key)
    )
