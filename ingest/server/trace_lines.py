"""A client's control lines as the reference's trace (`-V`, `trace: true`) shows them:
an operation as the line that carried it, a payload quoted. No I/O: the connection
logs what these return."""

from __future__ import annotations

import json

from ingest.parser import nats


def quoted(payload: bytes) -> str:
    """A payload as the reference's trace quotes it."""
    return json.dumps(payload.decode("utf-8", "replace"), ensure_ascii=False)


def describe(op: nats.Op) -> str:
    """An operation as the control line that carried it (payloads are not traced)."""
    if isinstance(op, nats.Pub):
        size = len(op.payload) + (len(op.hdr) if op.hdr else 0)
        args = [op.subject, op.reply] if op.reply else [op.subject]
        verb = "HPUB" if op.hdr is not None else "PUB"
        return f"{verb} {b' '.join(args).decode('utf-8', 'replace')} {size}"
    if isinstance(op, nats.Sub):
        queue = f" {op.queue}" if op.queue else ""
        return f"SUB {op.subject}{queue} {op.sid.decode('utf-8', 'replace')}"
    if isinstance(op, nats.Unsub):
        limit = f" {op.max_msgs}" if op.max_msgs is not None else ""
        return f"UNSUB {op.sid.decode('utf-8', 'replace')}{limit}"
    if isinstance(op, nats.Connect):
        return "CONNECT " + json.dumps(op.options, separators=(",", ":"))
    return type(op).__name__.upper()
