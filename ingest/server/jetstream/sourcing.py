"""A mirror's or source's reader that goes through the JetStream API, as the reference's
durable sourcing does (`log.sourcing` has the rules and names).

It asks the origin for a flow-controlled push consumer, copies what arrives on
its delivery subject, and answers each flow-control request only once the
copies before it are committed here: on an interest or work-queue origin that
answer is the acknowledgement that lets the origin retire them, so a crash
loses nothing. Because it only speaks subjects, it reaches origins behind an
`external` API prefix (another account's exported API) as well as local ones.
Gaps (a heartbeat naming a delivery it did not see, a skipped delivery
number) and silence make it ask again from after its last copy; deliveries it
already copied are passed over, so nothing is copied twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Protocol

from ingest.parser.headers import header_value
from ingest.server.jetstream.port import Messaging
from log import sourcing
from log.consumers.wire import random_token
from log.segments.api import StoredMsg
from log.sources import StreamSource
from log.streams.stream import Stream
from log.timefmt import now_ns

log = logging.getLogger("jetlake.jetstream")

_LAST_CONSUMER = b"Nats-Last-Consumer"
_STALLED = b"Nats-Consumer-Stalled"
_CONTROL = b"NATS/1.0 100"
_IDENTITY = sourcing.STREAM_IDENTITY.encode()


class Copier(Protocol):
    """The link a reader feeds (`ingest.server.jetstream.sources._Link`)."""

    target: Stream
    source: StreamSource
    mirror: bool
    last_active: int
    ident: str  # the origin's identity as last told (a source's only)
    error: dict[str, Any] | None  # why the origin last refused, for stream info

    def copy(self, msg: StoredMsg) -> None: ...

    def caught_up(self) -> None: ...


class ConsumerFeed:
    """Reads one origin for one link through a sourcing consumer."""

    def __init__(
        self,
        link: Copier,
        messaging: Messaging,
        name: str,
        metadata: dict[str, str],
    ) -> None:
        self._link = link
        self._messaging = messaging
        self.name = name  # the stable name asked for; the origin may make it unique
        self._metadata = metadata
        self.sseq = 0  # origin seq of the newest delivery taken (copied or filtered out)
        self.dseq = 0  # its delivery number
        # Origin seq of the newest delivery in this numbering, one copied before included:
        # what a flow-control answer acknowledges. Below `sseq` while a rewound durable
        # resends what is here already, and the origin ignores an ack past its deliveries.
        self.confirmable = 0
        self.lag = 0
        self._fresh = True  # the first delivery of a new consumer sets the numbering
        self.consumer = ""  # the name the origin gave it
        self._subs: list[object] = []  # the delivery subscription
        self._inbox: object | None = None  # while a create request is unanswered
        self._retired = False  # its consumer is to be deleted
        self._fails = 0  # create requests refused in a row
        self._taking: tuple[int, int, int] | None = None  # (dseq, sseq, confirmable) before it
        self._retry: asyncio.TimerHandle | None = None
        self._health: asyncio.TimerHandle | None = None
        self._heard = 0
        self._closed = False
        self._confirming: set[asyncio.Future[None]] = set()
        self._level = sourcing.DURABLE_LEVEL if link.mirror else sourcing.SOURCE_LEVEL
        self._request: tuple[str, bytes] = ("", b"")  # the create request, kept for a retry

    # -- lifecycle ----------------------------------------------------------------

    def start(self, after: int, first_time: bool) -> None:
        """Ask for delivery from after origin seq `after` (0: the configured start)."""
        self._cancel()
        self.sseq, self.dseq, self.confirmable, self._fresh = after, 0, 0, True
        source = self._link.source
        if source.consumer is not None:  # the user's durable: its subject, its start
            deliver = source.consumer.deliver_subject
        else:
            deliver = sourcing.deliver_subject(source, random_token(8), mirror=self._link.mirror)
            start = sourcing.Start(seq=after + 1) if after else self._configured_start(first_time)
            self._request = sourcing.create_request(
                source, self.name, deliver, start, self._metadata
            )
        self._subs = [self._messaging.subscribe(deliver, self._on_msg)]
        self._heard = now_ns()
        self._ask()
        loop = asyncio.get_running_loop()
        self._health = loop.call_later(sourcing.HEALTH_CHECK_NS / 1e9, self._check_health)

    def _ask(self) -> None:
        """Send the create request, or the reset of the user's durable."""
        source, mirror = self._link.source, self._link.mirror
        if source.consumer is not None:
            subject, body = sourcing.reset_subject(source), b""
        else:
            subject, body = self._request
        hdr = sourcing.request_headers(
            source, mirror=mirror, level=self._level, identity=self._link.ident
        )
        inbox = f"_INBOX.{random_token(22)}"
        self._inbox = self._messaging.subscribe(inbox, self._on_created)
        self._messaging.publish(subject, inbox, hdr, body)

    def delete_consumer(self) -> None:
        """The reading stream or this source went: its consumer on the origin must not keep
        holding messages for it (best effort, unanswered, as the reference's clean-up).
        One still being made is deleted when the origin answers."""
        self._retired = True
        if self.consumer and self._link.source.consumer is None:  # the user's stays
            self._send_delete(self.consumer)

    def _send_delete(self, name: str) -> None:
        subject = f"$JS.API.CONSUMER.DELETE.{self._link.source.name}.{name}"
        inbox = f"_INBOX.{random_token(22)}"
        self._messaging.publish(sourcing.api_subject(self._link.source, subject), inbox, None, b"")

    def _configured_start(self, first_time: bool) -> sourcing.Start:
        source = self._link.source
        if not first_time:
            return sourcing.Start()
        return sourcing.Start(seq=source.opt_start_seq, time=source.opt_start_time)

    def stop(self) -> None:
        self._closed = True
        self._cancel(keep_inbox=self._retired)

    def _cancel(self, *, keep_inbox: bool = False) -> None:
        for token in self._subs:
            self._messaging.unsubscribe(token)
        self._subs = []
        if self._inbox is not None and not keep_inbox:
            self._messaging.unsubscribe(self._inbox)
            self._inbox = None
        for timer in (self._retry, self._health):
            if timer is not None:
                timer.cancel()
        self._retry = self._health = None

    def _again(self, delay_ns: int = 0, after: int | None = None) -> None:
        """Set the reader up anew from after the last delivery taken (or origin seq
        `after`: 0 for the configured start)."""
        if self._closed:
            return
        self._cancel()
        loop = asyncio.get_running_loop()
        first_time = after == 0
        seq = self.sseq if after is None else after
        self._retry = loop.call_later(delay_ns / 1e9, self.start, seq, first_time)

    # -- inbound ------------------------------------------------------------------

    def _on_created(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if self._inbox is not None:
            self._messaging.unsubscribe(self._inbox)
            self._inbox = None
        try:
            answer = json.loads(data)
        except ValueError:
            answer = {"error": {"code": 500, "description": "invalid consumer create response"}}
        if not isinstance(answer, dict):
            answer = {"error": {"code": 500, "description": "invalid consumer create response"}}
        error = answer.get("error")
        self.consumer = str(answer.get("name") or "") if error is None else ""
        if self._closed:
            if self._retired and self.consumer and self._link.source.consumer is None:
                self._send_delete(self.consumer)
            return
        if error is None:
            error = sourcing.durable_refused(self._link.source, answer, mirror=self._link.mirror)
        if error is not None:
            self._refused(error)
            return
        self._fails = 0
        self._link.error = None
        self._link.last_active = self._heard = now_ns()
        told = header_value(hdr, _IDENTITY) if hdr and not self._link.mirror else None
        if told is not None:
            ident = told.decode()
            if ident and self._link.ident and ident != self._link.ident:
                self._recreated()
                self.sseq = 0  # the user's durable, reset, delivers the new origin
            self._link.ident = ident

    def _refused(self, error: dict[str, Any]) -> None:
        if not self._link.mirror and error.get("err_code") == sourcing.IDENTITY_MISMATCH:
            self._recreated()
            self._link.ident = ""
            self._again(after=0)
            return
        if not self._link.mirror and sourcing.level_refused(error, self._level):
            self._level = sourcing.DURABLE_LEVEL
            self._ask()
            return
        log.warning(
            "stream %s: reading %s failed: %s",
            self._link.target.name,
            self._link.source.name,
            error.get("description"),
        )
        self._link.error = error
        self._fails += 1
        self._again(sourcing.retry_delay(self._fails))

    def _recreated(self) -> None:
        """The origin was deleted and made anew: its seqs started over, and so does copying."""
        log.warning(
            "stream %s: source %s was recreated, copying it anew",
            self._link.target.name,
            self._link.source.name,
        )

    def _on_msg(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if not self._subs:  # dispatched before this reader was set up anew
            return
        self._heard = now_ns()
        if hdr is not None and hdr.startswith(_CONTROL):
            self._on_control(reply, hdr)
            return
        info = sourcing.parse_ack_reply(reply or "")
        if info is None or info.delivered > 1:
            return
        if info.stream_seq <= self.sseq:  # copied already (a rewound durable resends it)
            if self._fresh or info.consumer_seq == self.dseq + 1:
                self.dseq, self._fresh = info.consumer_seq, False
                self.confirmable = info.stream_seq
            return
        if info.consumer_seq != self.dseq + 1 and not self._fresh:
            self._again()
            return
        self._fresh = False
        self._taking = self.dseq, self.sseq, self.confirmable
        self.dseq = info.consumer_seq
        self.sseq = self.confirmable = info.stream_seq
        self.lag = max(info.pending - 1, 0)
        self._link.copy(StoredMsg(info.stream_seq, info.ts, subject, hdr, data))
        self._taking = None
        if not info.pending:
            self._link.caught_up()

    def refused(self) -> None:
        """This stream refused the copy in hand (full with `discard: new`, say): it is not
        acknowledged, and is asked for again after a pause, as the reference retries."""
        if self._taking is None:
            return  # not the copy in hand: a commit that failed is retried by the flush
        self.dseq, self.sseq, self.confirmable = self._taking
        self._again(sourcing.RETRY_NS)

    def _on_control(self, reply: str | None, hdr: bytes) -> None:
        self._link.last_active = self._heard
        if reply:  # flow control: answered once the copies so far are committed
            self._answer(reply)
            return
        last = header_value(hdr, _LAST_CONSUMER)
        if last and last.isdigit() and int(last) != self.dseq and not self._fresh:
            self._again()
            return
        stalled = header_value(hdr, _STALLED)
        if stalled:
            self._answer(stalled.decode())
        elif not self.lag:
            self._link.caught_up()

    def _answer(self, reply: str) -> None:
        task = asyncio.ensure_future(self._confirm(reply, self.dseq, self.confirmable))
        self._confirming.add(task)
        task.add_done_callback(self._confirming.discard)

    async def _confirm(self, reply: str, dseq: int, sseq: int) -> None:
        try:
            await self._link.target.flush()
        except Exception as err:  # the copies did not commit: the origin must keep them
            log.warning("stream %s: copies not committed: %s", self._link.target.name, err)
            self._again(sourcing.RETRY_NS)
            return
        hdr = f"NATS/1.0\r\nNats-Last-Consumer: {dseq}\r\nNats-Last-Stream: {sseq}\r\n\r\n"
        self._messaging.publish(reply, None, hdr.encode(), b"")

    def _check_health(self) -> None:
        self._health = None
        if self._closed:
            return
        if now_ns() - self._heard >= sourcing.HEALTH_CHECK_NS:
            self._again()
            return
        loop = asyncio.get_running_loop()
        self._health = loop.call_later(sourcing.HEALTH_CHECK_NS / 1e9, self._check_health)
