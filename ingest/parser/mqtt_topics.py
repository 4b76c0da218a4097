"""MQTT topics and filters as NATS subjects, the way the reference maps them.

MQTT and NATS clients share one subject space, so the mapping must be the
reference's byte for byte: a NATS subscriber of `a.b` sees what an MQTT client
published on `a/b`, and subjects stored in `$MQTT_*` streams by either server
mean the same topics. Levels become tokens (`/` ↔ `.`), a `.` inside a level
is written `//`, and empty levels (leading, trailing, doubled `/`) are kept
with a `/` beside the separator so the mapping can be undone: `/a` ↔ `/.a`,
`a/` ↔ `a./`, `a//b` ↔ `a./.b`.
"""

from __future__ import annotations

import re

_SEP, _DOT = ord("/"), ord(".")
_UNSUPPORTED = frozenset(b" \t\n\r\f\x7f")
# A topic with none of these maps by turning each `/` into `.` (the common case, in C).
_NEEDS_CARE = re.compile(rb"[ \t\n\r\f\x7f.+#]|//|^/|/$")


class TopicError(ValueError):
    """A topic or filter that has no NATS subject (whitespace, wildcard in a topic name)."""


def to_subject(topic: bytes, *, wildcards: bool = False) -> bytes:
    """The NATS subject of a topic name, or of a topic filter when `wildcards`."""
    if not _NEEDS_CARE.search(topic):
        return topic.replace(b"/", b".")
    out = bytearray()
    last = len(topic) - 1
    for i, ch in enumerate(topic):
        if ch == _SEP:
            if i == 0 or out[-1] == _DOT:
                out += b"/."
            elif i == last or topic[i + 1] == _SEP:
                out += b"./"
            else:
                out.append(_DOT)
        elif ch == _DOT:
            out += b"//"
        elif ch in _UNSUPPORTED:
            raise TopicError(f"character not supported for MQTT topics: {topic!r}")
        elif ch in b"+#":
            if not wildcards:
                raise TopicError(f"wildcards not allowed in publish's topic: {topic!r}")
            out.append(ord("*") if ch == ord("+") else ord(">"))
        else:
            out.append(ch)
    if out and out[-1] == _DOT:
        out.append(_SEP)
    return bytes(out)


def to_topic(subject: bytes) -> bytes:
    """The topic an MQTT subscriber sees for a NATS subject (the inverse of `to_subject`)."""
    if b"/" not in subject:
        return subject.replace(b".", b"/")
    out = bytearray()
    i, last = 0, len(subject) - 1
    while i <= last:
        ch = subject[i]
        if ch == _SEP:
            if i < last and subject[i + 1] in (_DOT, _SEP):
                out.append(_SEP if subject[i + 1] == _DOT else _DOT)
                i += 1
        elif ch == _DOT:
            out.append(_SEP)
        else:
            out.append(ch)
        i += 1
    return bytes(out)


def filter_subjects(topic_filter: bytes) -> tuple[bytes, ...]:
    """The NATS subscriptions a filter needs: `a/#` also matches `a` itself."""
    subject = to_subject(topic_filter, wildcards=True)
    if len(subject) >= 3 and subject.endswith(b".>"):
        return subject, subject[:-2]
    return (subject,)


def skips_reserved(filter_subject: bytes) -> bool:
    """A filter starting with a wildcard, which must not match `$` topics ([MQTT-4.7.2-1])."""
    return filter_subject in (b">", b"*") or filter_subject.startswith(b"*.")


def is_valid_filter(topic_filter: bytes) -> bool:
    """`#` only as a whole last level, `+` only as a whole level ([MQTT-4.7.1])."""
    levels = topic_filter.split(b"/")
    for i, level in enumerate(levels):
        if b"#" in level and (level != b"#" or i != len(levels) - 1):
            return False
        if b"+" in level and level != b"+":
            return False
    return True
