"""The JetStream JSON API: request subjects in, the reference's response documents out.

Each endpoint is its own internal subscription, as in nats-server, so a
request to an endpoint jetlake does not serve (or a direct get on a stream
without allow_direct) gets the core no-responders status instead of silence.
Response field order and presence follow the reference, since some clients
and many tests compare documents.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ingest.parser.subjects import subjects_overlap
from ingest.server.accounts import js_limits
from ingest.server.jetstream.backup import Backups
from log import config as streamconfig
from log import errors
from log.errors import ApiError
from log.mirror import check_create
from log.timefmt import rfc3339

if TYPE_CHECKING:
    from ingest.server.jetstream.engine import JetStream
    from log.streams.stream import Stream

log = logging.getLogger("jetlake.jetstream")

PREFIX = "$JS.API."
TYPE = "io.nats.jetstream.api.v1."
NAMES_LIMIT = 1024
LIST_LIMIT = 256
SUBJECT_DETAILS_LIMIT = 100_000

Response = dict[str, Any]
T = TypeVar("T")
Handler = Callable[[list[str], bytes], "Response | Awaitable[Response | None] | None"]
HEADERS = "_headers"  # a response's key for the header block it goes out with (not sent)


def encode(doc: Response) -> bytes:
    """JSON as Go's encoder writes it (HTML characters escaped), compact."""
    text = json.dumps(doc, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


class Api:
    """Dispatches `$JS.API.…` requests to the engine and answers them."""

    def __init__(self, engine: JetStream) -> None:
        self._js = engine
        self.total = 0
        self.errors = 0
        self._tasks: set[asyncio.Task[None]] = set()
        # Clustered, whether this server answers (it has the role the request needs).
        self.gate: Callable[[str, list[str]], bool] | None = None
        self.current_reply = ""  # the inbox of the request being handled, for handlers
        self.current_hdr: bytes | None = None  # and its header block
        consumers = engine.consumers
        self.backups = Backups(engine, encode)
        self.routes: dict[str, tuple[str, Handler]] = {
            "INFO": ("account_info_response", self._account_info),
            "STREAM.CREATE.*": ("stream_create_response", self._stream_create),
            "STREAM.UPDATE.*": ("stream_update_response", self._stream_update),
            "STREAM.INFO.*": ("stream_info_response", self._stream_info),
            "STREAM.DELETE.*": ("stream_delete_response", self._stream_delete),
            "STREAM.PURGE.*": ("stream_purge_response", self._stream_purge),
            "STREAM.NAMES": ("stream_names_response", self._stream_names),
            "STREAM.LIST": ("stream_list_response", self._stream_list),
            "STREAM.MSG.GET.*": ("stream_msg_get_response", self._msg_get),
            "STREAM.MSG.DELETE.*": ("stream_msg_delete_response", self._msg_delete),
            "STREAM.SNAPSHOT.*": ("stream_snapshot_response", self.backups.snapshot),
            "STREAM.RESTORE.*": ("stream_restore_response", self.backups.restore),
            "CONSUMER.CREATE.*": ("consumer_create_response", consumers.create),
            "CONSUMER.CREATE.*.>": ("consumer_create_response", consumers.create),
            "CONSUMER.DURABLE.CREATE.*.*": ("consumer_create_response", consumers.create),
            "CONSUMER.INFO.*.*": ("consumer_info_response", consumers.info),
            "CONSUMER.DELETE.*.*": ("consumer_delete_response", consumers.delete),
            "CONSUMER.PAUSE.*.*": ("consumer_pause_response", consumers.pause),
            "CONSUMER.UNPIN.*.*": ("consumer_unpin_response", consumers.unpin),
            "CONSUMER.RESET.*.*": ("consumer_reset_response", consumers.reset),
            "CONSUMER.NAMES.*": ("consumer_names_response", consumers.names),
            "CONSUMER.LIST.*": ("consumer_list_response", consumers.list),
        }

    def subscribe(self, subscribe: Callable[[str, Callable[..., None]], object]) -> list[object]:
        return [
            subscribe(PREFIX + pattern, self._callback(kind, handler))
            for pattern, (kind, handler) in self.routes.items()
        ]

    def _callback(self, kind: str, handler: Handler) -> Callable[..., None]:
        def on_request(subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
            if reply:
                tokens = subject[len(PREFIX) :].split(".")
                self._handle(kind, handler, tokens, reply, hdr, data)

        return on_request

    def _handle(
        self,
        kind: str,
        handler: Handler,
        tokens: list[str],
        reply: str,
        hdr: bytes | None,
        data: bytes,
    ) -> None:
        if self.gate is not None and not self.gate(kind, tokens):
            return
        self.total += 1
        self.current_reply, self.current_hdr = reply, hdr
        try:
            if streamconfig.above_api_level(hdr):
                raise errors.required_api_level()
            result = handler(tokens, data)
        except ApiError as err:
            self._send(reply, self._error(kind, err))
            return
        if inspect.isawaitable(result):
            task = asyncio.get_running_loop().create_task(self._finish(kind, result, reply))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif result is not None:  # None: another server answers (clustered creates)
            self._send(reply, {"type": TYPE + kind, **result})

    async def _finish(self, kind: str, result: Awaitable[Response | None], reply: str) -> None:
        try:
            answer = await result
            if answer is None:  # nobody to answer for after all (as a sync None)
                return
            doc = {"type": TYPE + kind, **answer}
        except ApiError as err:
            doc = self._error(kind, err)
        self._send(reply, doc)

    def _error(self, kind: str, err: ApiError) -> Response:
        """Error documents carry the endpoint's paging or count fields, as the reference's do."""
        self.errors += 1
        doc: Response = {"type": TYPE + kind, "error": err.to_json()}
        if kind == "stream_info_response":
            doc.update(total=0, offset=0, limit=0)
        elif kind == "stream_purge_response":
            doc["purged"] = 0
        elif kind == "stream_restore_response":
            doc["deliver_subject"] = ""
        elif kind == "consumer_reset_response":
            doc["reset_seq"] = 0
        elif kind in ("consumer_names_response", "consumer_list_response"):
            doc.update(total=0, offset=0, limit=0, consumers=[])
        return doc

    def _send(self, reply: str, doc: Response) -> None:
        hdr = doc.pop(HEADERS, None)
        self._js.messaging.publish(reply, None, hdr, encode(doc))

    def created(self, stream: Stream, reply: str) -> None:
        """A clustered create's answer, sent by the new stream's first leader."""
        doc = {**self._js.describe(stream, dynamic=True), "did_create": True}
        self._send(reply, {"type": TYPE + "stream_create_response", **doc})

    async def ask(self, subject: str, data: bytes, timeout: float) -> Response | None:
        """Request an API document as a client would (wherever the answering server is);
        None when nobody answers in time."""
        messaging = self._js.messaging
        inbox = f"$JSC.R.{secrets.token_hex(8)}"
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        def on_reply(subject: str, reply: str | None, hdr: bytes | None, body: bytes) -> None:
            if not future.done():
                future.set_result(body)

        token = messaging.subscribe(inbox, on_reply)
        try:
            messaging.publish(subject, inbox, None, data)
            body = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return None
        finally:
            messaging.unsubscribe(token)
        doc = json.loads(body)
        return doc if isinstance(doc, dict) else None

    # -- account -------------------------------------------------------------

    def _account_info(self, tokens: list[str], data: bytes) -> Response:
        js = self._js
        counts = {name: js.consumers.count(name) for name in js.streams}
        return self.account_document(js.configs(), counts, js.consumers.total())

    def account_document(
        self,
        configs: Mapping[str, streamconfig.StreamConfig],
        consumers: Mapping[str, int],
        total: int,
    ) -> Response:
        """An account info response: of the account's streams (`configs`), their consumer
        counts and all its consumers (`total`), with the bytes it stores (`usage`: in a
        cluster, on every server)."""
        usage = self._js.usage()
        domain = {"domain": self._js.config.domain} if self._js.config.domain else {}
        return {
            "memory": usage["memory"],
            "storage": usage["storage"],
            "reserved_memory": js_limits.reserved(configs, memory=True, each=False),
            "reserved_storage": js_limits.reserved(configs, memory=False, each=False),
            "streams": len(configs),
            "consumers": total,
            "limits": js_limits.limits_document(self._js.limits),
            # The reference counts a request once answered: this one is not in it yet.
            "api": {
                "level": streamconfig.API_LEVEL,
                "total": self.total - 1,
                "errors": self.errors,
            },
            **domain,
            **js_limits.tiers_document(self._js, configs, consumers),
        }

    # -- streams -------------------------------------------------------------

    def _stream_create(self, tokens: list[str], data: bytes) -> Response:
        cfg, _ = create_request(tokens, data)
        stream = self._js.create_stream(cfg)
        return {**self._js.describe(stream, dynamic=True), "did_create": True}

    def _stream_update(self, tokens: list[str], data: bytes) -> Response:
        stream = self._js.update_stream(update_request(tokens, data))
        return self._js.describe(stream, dynamic=True)

    def _stream_info(self, tokens: list[str], data: bytes) -> Response:
        req = optional_json(data)
        stream = self._js.stream(tokens[-1])
        subjects_filter = str(req.get("subjects_filter") or "")
        offset = max(int(req.get("offset") or 0), 0)
        info = self._js.describe(
            stream,
            dynamic=True,
            deleted_details=bool(req.get("deleted_details")),
            subjects_filter=subjects_filter,
        )
        subjects = info["state"].get("subjects")
        paging = {"total": 0, "offset": 0, "limit": 0}
        if subjects:
            names = sorted(subjects)
            start = min(offset, len(names))
            window = names[start : start + SUBJECT_DETAILS_LIMIT]
            info["state"]["subjects"] = {name: subjects[name] for name in window}
            paging = {"total": len(names), "offset": offset, "limit": SUBJECT_DETAILS_LIMIT}
        cluster = info.pop("cluster", None) or {"leader": self._js.server_name}
        ts = info.pop("ts")
        return {**paging, **info, "cluster": cluster, "ts": ts}

    async def _stream_delete(self, tokens: list[str], data: bytes) -> Response:
        require_empty(data)
        await self._js.delete_stream(tokens[-1])
        return {"success": True}

    async def _stream_purge(self, tokens: list[str], data: bytes) -> Response:
        req = optional_json(data)
        stream = self._js.stream(tokens[-1])
        seq, keep = int(req.get("seq") or 0), int(req.get("keep") or 0)
        if seq and keep:
            raise errors.bad_request()
        purged = await stream.purge(str(req.get("filter") or ""), upto_seq=seq, keep=keep)
        return {"success": True, "purged": purged}

    def _matching_streams(self, req: Response) -> list[str]:
        subject = str(req.get("subject") or "")
        return sorted(
            name
            for name, stream in self._js.streams.items()
            if not subject or any(subjects_overlap(subject, s) for s in stream.config.subjects)
        )

    def _stream_names(self, tokens: list[str], data: bytes) -> Response:
        req = optional_json(data)
        return paged(req, self._matching_streams(req), NAMES_LIMIT, "streams", lambda p: p or None)

    def _stream_list(self, tokens: list[str], data: bytes) -> Response:
        req = optional_json(data)
        return paged(
            req,
            self._matching_streams(req),
            LIST_LIMIT,
            "streams",
            lambda page: [self._js.describe(self._js.streams[name]) for name in page],
        )

    # -- messages ------------------------------------------------------------

    def _msg_get(self, tokens: list[str], data: bytes) -> Response | Awaitable[Response]:
        """Answered at once when the message is committed (a KV get, nearly always)."""
        stream = self._js.stream(tokens[-1])
        req = optional_json(data)
        seq, last, nxt = int(req.get("seq") or 0), req.get("last_by_subj"), req.get("next_by_subj")
        if (seq and last) or (last and nxt) or not (seq or last or nxt):
            raise errors.bad_request()
        if last:
            msg = stream.store.load_last(str(last))
        elif nxt:
            msg = stream.store.load_next(seq, str(nxt))
        else:
            msg = stream.store.load(seq)
        if msg is None:
            raise errors.no_message_found()
        message: Response = {"subject": msg.subject, "seq": msg.seq}
        if msg.hdr:
            message["hdrs"] = base64.b64encode(msg.hdr).decode()
        if msg.data:
            message["data"] = base64.b64encode(msg.data).decode()
        message["time"] = rfc3339(msg.ts)
        if msg.seq <= stream.committed_seq:
            return {"message": message}
        return self._once_visible(stream, msg.seq, {"message": message})

    async def _once_visible(self, stream: Stream, seq: int, doc: Response) -> Response:
        await self._js.visible(stream, seq)
        return doc

    async def _msg_delete(self, tokens: list[str], data: bytes) -> Response:
        stream = self._js.stream(tokens[-1])
        req = streamconfig.parse_json(data) if data.strip() else {}
        seq = int(req.get("seq") or 0) if isinstance(req, dict) else 0
        if seq > stream.last_seq or seq == 0:
            raise ApiError(400, 10043, f"sequence {seq} not found")
        await stream.delete_msg(seq)  # answered once the delete commits
        return {"success": True}


def optional_json(data: bytes) -> dict[str, Any]:
    """Bodies that may be empty; a non-object body is ignored like the reference does."""
    if not data.strip():
        return {}
    req = streamconfig.parse_json(data)
    return req if isinstance(req, dict) else {}


def create_request(tokens: list[str], data: bytes) -> tuple[streamconfig.StreamConfig, Response]:
    """A STREAM.CREATE's config and its request document (a clustered create reads the
    placement from it): the name in the subject compared first, then the request
    checked, as the reference does on one server and in a cluster alike."""
    raw = optional_json(data)
    if raw.get("name") != tokens[-1]:
        raise errors.stream_name_mismatch()
    check_create(raw)
    return streamconfig.from_request(raw), raw


def update_request(tokens: list[str], data: bytes) -> streamconfig.StreamConfig:
    """A STREAM.UPDATE's config: the reference validates an update before it compares
    names, unlike a create."""
    cfg = streamconfig.from_request(optional_json(data))
    if cfg.name != tokens[-1]:
        raise errors.stream_name_mismatch()
    return cfg


def page_of(req: Response, items: list[T], limit: int) -> tuple[int, list[T]]:
    """The request's `offset`, at most the number of items as the reference answers it,
    and the page of up to `limit` sorted items from there."""
    offset = min(max(int(req.get("offset") or 0), 0), len(items))
    return offset, items[offset : offset + limit]


def listed_total(items: list[Any], page: list[Any], clustered: bool) -> int:
    """A list answer's `total`. In a cluster the reference answers an empty page (an
    offset at or past the end) before it counts anything, so its total is 0 there."""
    return len(items) if page or not clustered else 0


def paged(
    req: Response,
    names: list[str],
    limit: int,
    key: str,
    show: Callable[[list[str]], object],
    *,
    clustered_list: bool = False,
) -> Response:
    """A names or list answer (streams, consumers): the page of the sorted `names`
    (`page_of`) under `key` as `show` renders them, after the paging fields the
    reference writes first (`listed_total` for a list in a cluster)."""
    offset, page = page_of(req, names, limit)
    total = listed_total(names, page, clustered_list)
    return {"total": total, "offset": offset, "limit": limit, key: show(page)}


def require_empty(data: bytes) -> None:
    if data.strip():
        raise errors.not_empty_request()
