"""What a consumer puts on the wire: its outputs, ack subjects, advisories, header rewrites.

Kept apart from the state machine so the formats clients parse (nats-py's
`_get_metadata` splits the ack subject by position; tools match advisory
types) sit in one place.
"""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ingest.parser.outlet import RunMsg, WireMsg, dotted
from log.publish import go_duration_ns
from log.segments.api import StoredMsg, StoreState, SubjectState
from log.timefmt import rfc3339

ACK_PREFIX = "$JS.ACK"
FC_PREFIX = "$JS.FC"
ADVISORY = "$JS.EVENT.ADVISORY.CONSUMER"
MSG_SIZE = "Nats-Msg-Size"


class StoreReader(Protocol):
    """The read side of `MsgStore` a consumer uses."""

    def load(self, seq: int) -> StoredMsg | None: ...

    def load_many(self, seqs: Sequence[int]) -> list[StoredMsg]: ...

    def load_run(self, start_seq: int, upto: int, limit: int) -> list[StoredMsg]: ...

    def load_next(self, start_seq: int, subject_filter: str = ">") -> StoredMsg | None: ...

    def load_last(self, subject_filter: str = ">") -> StoredMsg | None: ...

    def state(self, *, with_deleted: bool = False) -> StoreState: ...

    def subject_state(self, subject: str) -> SubjectState | None: ...

    def subjects(self, subject_filter: str = ">") -> dict[str, int]: ...

    def seqs_for(self, subject_filter: str, start_seq: int) -> Iterable[int]: ...


@dataclass(slots=True)
class Deliveries:
    """A run of messages to one subject, in order: the owner routes the run once.

    Tuples, not an object per message: at a few µs of server time per message,
    allocating and reading back per-message objects was a measurable share.
    """

    subject: str
    ack_prefix: bytes  # `$JS.ACK.<stream>.<consumer>.`; each reply adds the message's numbers
    msgs: list[RunMsg]

    def wire(self) -> list[WireMsg]:
        """Each message as a subscriber sees it, its reply spelt out (the routed path)."""
        p = self.ack_prefix
        return [(s, dotted(p, a, b, c, e, f), h, d) for s, h, d, a, b, c, e, f in self.msgs]


@dataclass(frozen=True, slots=True)
class Status:
    subject: str
    hdr: bytes
    reply: str = ""


@dataclass(frozen=True, slots=True)
class Advisory:
    subject: str
    body: dict[str, Any]


Output = Deliveries | Status | Advisory


@dataclass(frozen=True, slots=True)
class AckResult:
    confirm: bool  # send the empty reply an ack with a reply subject asks for
    request: bytes | None = None  # +NXT: a pull request riding on the ack


CONFIRMED = AckResult(True)
IGNORED = AckResult(False)


def max_deliveries(stream: str, consumer: str, seq: int, deliveries: int, now: int) -> Advisory:
    body = _advisory("max_deliver", stream, consumer, now)
    body |= {"stream_seq": seq, "deliveries": deliveries}
    return Advisory(f"{ADVISORY}.MAX_DELIVERIES.{stream}.{consumer}", body)


def terminated(
    stream: str, consumer: str, seq: int, dseq: int, dc: int, reason: str, now: int
) -> Advisory:
    body = _advisory("terminated", stream, consumer, now)
    body |= {"consumer_seq": dseq, "stream_seq": seq, "deliveries": dc, "reason": reason}
    return Advisory(f"{ADVISORY}.MSG_TERMINATED.{stream}.{consumer}", body)


def group_pinned(stream: str, consumer: str, group: str, pin: str, now: int) -> Advisory:
    body = _advisory("consumer_group_pinned", stream, consumer, now)
    body |= {"group": group, "pinned_id": pin}
    return Advisory(f"{ADVISORY}.PINNED.{stream}.{consumer}", body)


def group_unpinned(stream: str, consumer: str, group: str, reason: str, now: int) -> Advisory:
    """`reason` is the reference's: "admin" (CONSUMER.UNPIN) or "timeout" (the TTL ran out)."""
    body = _advisory("consumer_group_unpinned", stream, consumer, now)
    body |= {"group": group, "reason": reason}
    return Advisory(f"{ADVISORY}.UNPINNED.{stream}.{consumer}", body)


def _advisory(kind: str, stream: str, consumer: str, now: int) -> dict[str, Any]:
    return {
        "type": f"io.nats.jetstream.advisory.v1.{kind}",
        "id": random_token(22),
        "timestamp": rfc3339(now),
        "stream": stream,
        "consumer": consumer,
    }


def random_token(n: int) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(n))


def nak_delay(arg: bytes) -> int | None:
    """`-NAK {"delay": ns}` or `-NAK 5s`; None means redeliver now."""
    if not arg:
        return None
    if arg.startswith(b"{"):
        try:
            delay = json.loads(arg).get("delay")
        except (ValueError, AttributeError):
            return None
        return int(delay) if isinstance(delay, int | float) and delay > 0 else None
    delay = go_duration_ns(arg.decode("utf-8", "replace"))
    return delay if delay and delay > 0 else None


def headers_only(hdr: bytes | None, size: int) -> bytes:
    line = f"{MSG_SIZE}: {size}\r\n\r\n".encode()
    if hdr and hdr.endswith(b"\r\n\r\n"):
        return hdr[:-2] + line
    return b"NATS/1.0\r\n" + line


_ALPHABET = string.ascii_letters + string.digits
