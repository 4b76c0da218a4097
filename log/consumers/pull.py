"""Pull requests (`CONSUMER.MSG.NEXT`): parsing, the waiting queue and the status replies.

A pull request is a reply subject plus a budget (batch, max_bytes) and a
lifetime (expires, no_wait); the consumer serves waiting requests round-robin
as the reference does, so two fetchers of one consumer share its messages.
Status replies are header-only messages whose first line clients switch on
(`404 No Messages`, `408 Request Timeout`, `409 …`, `100 Idle Heartbeat`), so
their wording is the reference's, byte for byte.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ingest.parser.headers import encode_headers
from log.consumers.config import ConsumerConfig
from log.consumers.priority import UNRANKED, PriorityRequest, Verdict
from log.consumers.priority import parse_request as parse_priority
from log.consumers.wire import Output, Status

PENDING_MSGS = "Nats-Pending-Messages"
PENDING_BYTES = "Nats-Pending-Bytes"
LAST_CONSUMER = "Nats-Last-Consumer"
LAST_STREAM = "Nats-Last-Stream"
CONSUMER_STALLED = "Nats-Consumer-Stalled"


class BadPullRequest(ValueError):
    """The request body is not a valid pull request; the text follows `Bad Request - `."""


@dataclass(slots=True)
class PullRequest:
    reply: str
    batch: int
    max_bytes: int = 0
    no_wait: bool = False
    expires: int = 0  # absolute ns; 0 = never
    heartbeat: int = 0  # ns between idle heartbeats; 0 = none
    next_heartbeat: int = 0
    delivered: int = 0
    pg: PriorityRequest | None = None  # set whenever the body was JSON, as the reference

    @property
    def rank(self) -> int:
        return self.pg.priority if self.pg is not None else UNRANKED

    def remaining(self) -> dict[str, str]:
        return {PENDING_MSGS: str(self.batch), PENDING_BYTES: str(self.max_bytes)}


def parse_request(reply: str, body: bytes, now: int) -> PullRequest:
    """A MSG.NEXT body: empty (one message), a bare count, or the JSON request."""
    text = body.strip()
    if not text:
        return PullRequest(reply, 1)
    if not text.startswith(b"{"):
        try:
            return PullRequest(reply, int(text))
        except ValueError:
            return PullRequest(reply, 1)
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise BadPullRequest(str(exc)) from None
    if not isinstance(doc, dict):
        raise BadPullRequest("json: cannot unmarshal into JSApiConsumerGetNextRequest")
    batch, expires = _num(doc, "batch"), _num(doc, "expires")
    heartbeat, max_bytes = _num(doc, "idle_heartbeat"), _num(doc, "max_bytes")
    if heartbeat > 0 and heartbeat * 2 > expires:
        raise BadPullRequest("heartbeat value too large")
    try:
        pg = parse_priority(doc)
    except ValueError as exc:
        raise BadPullRequest(str(exc)) from None
    return PullRequest(
        reply,
        batch,
        max_bytes=max_bytes,
        no_wait=bool(doc.get("no_wait")),
        expires=now + expires if expires > 0 else 0,
        heartbeat=heartbeat if heartbeat > 0 else 0,
        next_heartbeat=now + heartbeat if heartbeat > 0 else 0,
        pg=pg,
    )


def refusal(cfg: ConsumerConfig, req: PullRequest, now: int) -> str:
    """Why the consumer's limits refuse a request (the 409 text), or "" to queue it."""
    if req.batch <= 0:
        req.batch = 1
    if cfg.max_batch > 0 and req.batch > cfg.max_batch:
        return f"Exceeded MaxRequestBatch of {cfg.max_batch}"
    if req.expires and cfg.max_expires > 0 and req.expires > now + cfg.max_expires:
        return f"Exceeded MaxRequestExpires of {format_duration(cfg.max_expires)}"
    if req.max_bytes > 0 and cfg.max_bytes > 0 and req.max_bytes > cfg.max_bytes:
        return f"Exceeded MaxRequestMaxBytes of {cfg.max_bytes}"
    return ""


def _num(doc: dict[str, object], key: str) -> int:
    value = doc.get(key) or 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadPullRequest(f"json: cannot unmarshal into field {key}")
    return int(value)


Gate = Callable[[PullRequest], Verdict]


class WaitQueue:
    """Waiting pull requests, served round-robin; bounded by max_waiting.

    Ranked (the `prioritized` policy), requests are kept ordered by priority and one
    that wants more goes back behind the last of its rank, not to the very back.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.ranked = False
        self._queue: deque[PullRequest] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[PullRequest]:
        return iter(list(self._queue))

    @property
    def full(self) -> bool:
        return len(self._queue) >= self.limit

    def add(self, req: PullRequest) -> None:
        queue = self._queue
        if self.ranked:
            rank = req.rank
            at = next((i for i, other in enumerate(queue) if other.rank > rank), len(queue))
            queue.insert(at, req)
        else:
            queue.append(req)

    def remove(self, req: PullRequest) -> None:
        self._queue.remove(req)

    def only(self) -> PullRequest | None:
        """The waiting request when it is the only one (nothing to take turns with)."""
        return self._queue[0] if len(self._queue) == 1 else None

    def charge(self, req: PullRequest, n: int, now: int) -> None:
        """`claim` of n messages at once by the only request, one without a byte budget."""
        req.batch -= n
        req.delivered += n
        if req.batch <= 0:
            self._queue.remove(req)
        if req.heartbeat:
            req.next_heartbeat = now + req.heartbeat

    def claim(
        self, size: int, now: int, out: list[Output], gate: Gate | None = None
    ) -> PullRequest | None:
        """The request the next message of `size` bytes goes to, round-robin.

        The head request is charged one message and goes to the back while it wants
        more. Requests whose max_bytes it exceeds are answered (409) and dropped on
        the way; a request whose byte budget it exhausts is told its batch completed.
        A priority `gate` may pass a request over (to the back) or drop it (423); when
        it passes over every one, the message waits.
        """
        queue = self._queue
        skipped = 0
        while queue:
            if gate is not None:
                verdict = gate(queue[0])
                if verdict is Verdict.SKIP:
                    queue.rotate(-1)
                    skipped += 1
                    if skipped >= len(queue):
                        return None
                    continue
                if verdict is Verdict.WRONG_PIN:
                    req = queue.popleft()
                    hdr = status(423, "Nats-Wrong-Pin-Id", req.remaining())
                    out.append(Status(req.reply, hdr))
                    continue
            req = queue.popleft()
            if req.max_bytes > 0:
                if size > req.max_bytes:
                    hdr = status(409, "Message Size Exceeds MaxBytes", req.remaining())
                    out.append(Status(req.reply, hdr))
                    continue
                req.max_bytes -= size
                if req.max_bytes == 0:
                    req.batch = 1
            req.batch -= 1
            req.delivered += 1
            if req.batch > 0:
                self.add(req)
            if req.heartbeat:
                req.next_heartbeat = now + req.heartbeat
            if req.batch <= 0 and req.max_bytes > 0:
                out.append(Status(req.reply, status(409, "Batch Completed", req.remaining())))
            return req
        return None

    def expire(self, now: int, out: list[Output]) -> None:
        """Answer (408) and drop the requests whose time is up. Asked before each
        delivery too, not only when a request's timer fires: the timer can run late, and
        a message claimed by a request its client stopped waiting on would lie in that
        inbox until the client's next fetch (the reference checks expiry as it claims)."""
        for req in [r for r in self._queue if r.expires and now >= r.expires]:
            self._queue.remove(req)
            out.append(Status(req.reply, status(408, "Request Timeout", req.remaining())))

    def sweep(
        self, now: int, heartbeat: Callable[[], bytes], exhausted: Callable[[], bool] | None
    ) -> list[Output]:
        """Answer no_wait requests once nothing can go out now (404; `exhausted` is asked
        only for those, as it may read ahead; None: not at the end of the stream), and send
        heartbeats that are due. Expired requests are `expire`'s, asked before this."""
        out: list[Output] = []
        for req in list(self._queue):
            if (
                req.no_wait
                and (not req.expires or req.delivered > 0)
                and exhausted is not None
                and exhausted()
            ):
                self._queue.remove(req)
                out.append(Status(req.reply, status(404, "No Messages")))
            elif req.heartbeat and now >= req.next_heartbeat:
                out.append(Status(req.reply, heartbeat()))
                req.next_heartbeat = now + req.heartbeat
        return out

    def drain(self) -> list[PullRequest]:
        out = list(self._queue)
        self._queue.clear()
        return out

    def outstanding(self) -> int:
        return sum(r.batch for r in self._queue)


def status(code: int, description: str, headers: dict[str, str] | None = None) -> bytes:
    """A status header block, `NATS/1.0 <code> <description>` and its headers."""
    return encode_headers(headers or {}, code, description)


def format_duration(ns: int) -> str:
    """Go's time.Duration.String() for the durations the reference puts in status texts."""
    if ns == 0:
        return "0s"
    if ns < 1_000:
        return f"{ns}ns"
    if ns < 1_000_000:
        return f"{_trim(ns / 1_000)}µs"
    if ns < 1_000_000_000:
        return f"{_trim(ns / 1_000_000)}ms"
    secs = ns / 1_000_000_000
    hours, rest = divmod(secs, 3600)
    minutes, seconds = divmod(rest, 60)
    out = f"{int(hours)}h" if hours else ""
    if hours or minutes:
        out += f"{int(minutes)}m"
    return out + f"{_trim(seconds)}s"


def _trim(value: float) -> str:
    return f"{value:.9f}".rstrip("0").rstrip(".")
