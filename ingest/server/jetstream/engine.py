"""JetStream inside the server: the stream registry, its subscriptions, timers and storage layout.

Layout on disk (the reference's): `<store_dir>/jetstream/<account>/streams/<name>/`
(`$G` for the global account; one engine per account) holds the stream's
segment files and `stream.json` (its config and creation time), written
atomically so a crash leaves the old or the new one. Memory streams are not
persisted, as in the reference: they do not survive a restart.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ingest.parser.headers import HeaderError, parse_headers
from ingest.parser.subjects import subjects_overlap
from ingest.server.accounts import js_limits
from ingest.server.accounts.settings import JetStreamLimits
from ingest.server.jetstream import direct
from ingest.server.jetstream.port import Messaging
from ingest.server.jetstream.reports import Reports
from ingest.server.jetstream.sources import Sources
from ingest.server.settings import store_base
from ingest.server.version import VERSION
from log import api_levels, errors
from log.batches import fast as fast_batch
from log.config import (
    StreamConfig,
    above_api_level,
    check_update,
    from_request,
    segment_codec,
)
from log.consumers.replicated import ConsumerFiles
from log.publish import error_ack as pub_refusal
from log.segments.api import MsgStore
from log.sources import SOURCE_HEADER, source_header_refused
from log.state_file import StateFileError, read_state, write_new_state, write_state
from log.streams.stream import GroupFactory, Stream
from log.timefmt import now_ns, parse_rfc3339

if TYPE_CHECKING:
    from ingest.server.jetstream.cluster.controller import JetStreamCluster

log = logging.getLogger("jetlake.jetstream")

ACCOUNT = "$G"
META_FILE = "stream.json"
DIRECT_PREFIX = "$JS.API.DIRECT.GET."
DIRECT_GROUP = "_zz_"  # the reference's queue group for direct gets (origin and mirrors)


class StoreOpener(Protocol):
    def __call__(self, cfg: StreamConfig, path: Path, *, replicated: bool = False) -> MsgStore:
        """`replicated`: a Raft log backs the store (it refills what a crash cut)."""


class JetStreamOptions(Protocol):
    """The part of the server options JetStream reads (`-js`, `-sd`, `sync_interval`)."""

    @property
    def store_dir(self) -> str | None: ...

    @property
    def max_memory_store(self) -> int: ...

    @property
    def max_file_store(self) -> int: ...

    @property
    def sync_interval_ns(self) -> int | None: ...


def open_store(cfg: StreamConfig, path: Path, *, replicated: bool = False) -> MsgStore:
    """The default stores: Arrow segment files, or memory for `storage: memory`."""
    if cfg.storage == "memory":
        from log.segments.memstore import MemoryStore

        return MemoryStore(name=cfg.name)
    from log.segments.filestore import FileStore, SegmentConfig

    segments = SegmentConfig(compression=segment_codec(cfg.compression), refill_from_log=replicated)
    return FileStore(path, name=cfg.name, config=segments)


def read_headers(block: bytes) -> Mapping[str, list[str]]:
    """Headers of a stored or published block; a malformed block counts as none."""
    try:
        return parse_headers(block)[2]
    except HeaderError:
        return {}


class JetStream(Reports):
    def __init__(
        self,
        config: JetStreamOptions,
        messaging: Messaging,
        *,
        server_id: str,
        server_name: str,
        store_opener: StoreOpener = open_store,
        account: str = ACCOUNT,
    ) -> None:
        from ingest.server.jetstream.api import Api
        from ingest.server.jetstream.consumers import Consumers

        self.config = config
        self.messaging = messaging
        self.server_id = server_id
        self.server_name = server_name
        self.store_dir = store_base(config.store_dir) / "jetstream"
        self.account = account
        # The account's JetStream limits (`accounts.js_limits`); None: unlimited.
        self.limits: JetStreamLimits | None = None
        # In a cluster, the account's bytes on the other servers, by tier replica count
        # (0: untiered); set by `cluster.usage`.
        self.elsewhere: Callable[[int], tuple[int, int]] | None = None
        self._root = self.store_dir / account / "streams"
        self._open_store = store_opener
        self.streams: dict[str, Stream] = {}
        self._subs: dict[str, list[object]] = {}
        self._intakes: dict[str, list[object]] = {}  # each stream's subjects, among its subs
        self._following: set[str] = set()  # replicated streams another server leads
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self.consumers = Consumers(self, VERSION)
        self.sources = Sources(
            self.streams,
            read_headers,
            messaging,
            account,
            self._serve_origin_gets,
            clustered=lambda: self.cluster is not None,
        )
        self.api = Api(self)
        self._api_subs: list[object] = []
        self.cluster: JetStreamCluster | None = None  # set before start when clustered

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        """Recover persisted streams, then start answering the API."""
        self._root.mkdir(parents=True, exist_ok=True)
        self.api.backups.discard_unfinished(self._root.parent)
        # Clustered, the meta log says which streams exist here: replaying it opens them.
        for folder in [] if self.cluster is not None else sorted(self._root.iterdir()):
            meta = folder / META_FILE
            if not meta.is_file():
                log.warning("JetStream: %s has no %s; stream not recovered", folder, META_FILE)
                continue
            try:
                doc = read_state(meta)
                cfg, created = from_request(doc["config"]), parse_rfc3339(doc["created"])
            except (StateFileError, errors.ApiError, KeyError, TypeError, ValueError) as err:
                # Nothing else knows this stream's config on a server of its own: say what is
                # lost; its messages stay in the folder for an operator.
                log.error(
                    "JetStream: stream '%s > %s' not recovered: %s is unreadable (%s); "
                    "its files are kept in %s",
                    self.account, folder.name, meta, err, folder,
                )  # fmt: skip
                continue
            stream = self._open(cfg, created)
            state = stream.store.state()
            log.info(
                "  Restored %d messages for stream '%s > %s'", state.msgs, self.account, cfg.name
            )
        self._api_subs = self.api.subscribe(self.messaging.subscribe)
        log.info("JetStream started: %d streams, store %s", len(self.streams), self.store_dir)

    async def stop(self) -> None:
        """Stop taking requests and publishes, then commit, sync and close every stream."""
        for token in self._api_subs:
            self.messaging.unsubscribe(token)
        self._api_subs = []
        for name, stream in list(self.streams.items()):
            self.consumers.detach(stream, reason="")
            self._detach(name)
        streams, self.streams = list(self.streams.values()), {}
        await asyncio.gather(*(stream.close() for stream in streams))
        for stream in streams:
            _close_consumer_files(stream)

    # -- stream registry (the API calls these) ---------------------------------

    def stream(self, name: str) -> Stream:
        stream = self.streams.get(name)
        if stream is None:
            raise errors.stream_not_found()
        return stream

    def create_stream(self, cfg: StreamConfig) -> Stream:
        """Create, or return the existing stream when the config is identical."""
        if self.limits is not None:
            js_limits.tier(self.limits, cfg.num_replicas)  # the reference asks this first
        if cfg.num_replicas > 1:
            raise errors.replicas_not_supported()
        cfg = self.sources.checked(cfg)
        existing = self.streams.get(cfg.name)
        if existing is not None:
            if existing.config == cfg:
                return existing
            raise errors.stream_name_exists()
        if self.limits is not None:
            js_limits.check_stream(self.limits, self.configs(), cfg)
        self._check_overlap(cfg)
        stream = self._open(cfg, now_ns())
        if cfg.storage == "file":  # a new config: durable as a message is (no fsync waited for)
            sync_ns = api_levels.sync_interval_ns(cfg, self.config.sync_interval_ns)
            write_new_state(self._root / cfg.name / META_FILE, stream.snapshot_config(), sync_ns)
        return stream

    def update_stream(self, cfg: StreamConfig) -> Stream:
        stream = self.stream(cfg.name)
        new = check_update(stream.config, cfg, clustered=self.cluster is not None)
        new = self.sources.checked(new)
        if self.limits is not None:
            js_limits.check_stream(self.limits, self.configs(), new)
        self._check_overlap(new)
        self.sources.retire(cfg.name, new)
        self._detach(cfg.name)
        stream.update(new)
        self._persist(stream)
        self._attach(stream)
        return stream

    async def delete_stream(self, name: str) -> None:
        """The API's delete, and the meta group's (a stream deleted or moved off here)."""
        stream = self.stream(name)
        self.consumers.detach(stream, reason="Consumer Deleted")
        self.sources.retire(name, None)
        self._detach(name)
        self._following.discard(name)
        del self.streams[name]
        await stream.delete()
        _close_consumer_files(stream)
        shutil.rmtree(self._root / name, ignore_errors=True)

    def check_overlap(self, cfg: StreamConfig) -> None:
        """A restore's check before its stream moves in (a create's is `create_stream`'s)."""
        self._check_overlap(cfg)

    def new_store(self, cfg: StreamConfig, folder: Path) -> MsgStore:
        """An empty store for a restore to fill before the stream exists."""
        return self._open_store(cfg, folder)

    def replica_store(self, cfg: StreamConfig) -> MsgStore:
        """A replicated stream's store, from its folder (on any thread: no stream yet)."""
        return self._open_store(cfg, self._root / cfg.name, replicated=True)

    def open_restored(self, cfg: StreamConfig, created_ns: int, store: MsgStore | None) -> Stream:
        """A restored stream: its files already in its folder, or its filled memory store."""
        return self._open(cfg, created_ns, store=store)

    def _check_overlap(self, cfg: StreamConfig) -> None:
        for other in self.streams.values():
            if other.name != cfg.name and any(
                subjects_overlap(a, b) for a in cfg.subjects for b in other.config.subjects
            ):
                raise errors.subjects_overlap()

    def adopt(
        self, cfg: StreamConfig, created_ns: int, group: GroupFactory, store: MsgStore | None = None
    ) -> Stream:
        """Open a replicated stream the meta group assigned here (on `store`, if opened
        already: `replica_store`); it follows until its group elects this server
        (`set_stream_leader`)."""
        stream = self._open(cfg, created_ns, group, store)
        self.set_stream_leader(stream, False)
        return stream

    def set_stream_leader(self, stream: Stream, leader: bool) -> None:
        """Leadership of a replicated stream came or went; `led` follows once it accepts.

        Only the leader takes publishes, so only its subjects draw messages from the
        peers (as the reference's leader alone subscribes): a follower that drew them
        too would get every publish over the routes besides its Raft copy, to drop it.
        """
        stream.set_leader(leader)
        for token in self._intakes.get(stream.name, ()):
            self.messaging.share(token, leader)
        if leader:
            self._following.discard(stream.name)
        else:
            self._following.add(stream.name)
            self.consumers.follow(stream)
            self.sources.follow(stream.name)

    def led(self, stream: Stream) -> None:
        """The stream's new leader caught up: its consumers run here from their files, and
        its mirror or sources are read from here, after what its replicated copies hold."""
        if self.streams.get(stream.name) is stream and stream.accepting:
            self.consumers.lead(stream)
            self.sources.refresh()

    def _open(
        self,
        cfg: StreamConfig,
        created_ns: int,
        group: GroupFactory | None = None,
        store: MsgStore | None = None,
    ) -> Stream:
        folder = self._root / cfg.name
        if cfg.storage == "file":
            folder.mkdir(parents=True, exist_ok=True)
        stream = Stream(
            cfg,
            store or self._open_store(cfg, folder, replicated=group is not None),
            created_ns=created_ns,
            read_headers=read_headers,
            sync_interval_ns=api_levels.sync_interval_ns(cfg, self.config.sync_interval_ns),
            group=group,
            on_sooner_expiry=partial(self._rearm_expiry, cfg.name),
            republish=lambda subject, hdr, data: self.messaging.publish(subject, None, hdr, data),
        )
        if group is not None:  # before the group applies anything: consumer ops included
            stream.consumer_ops = ConsumerFiles(
                cfg.name, folder, sync_interval_ns=self.config.sync_interval_ns
            )
        self.streams[cfg.name] = stream
        self._attach(stream)
        self.consumers.attach(stream, folder)
        return stream

    def stream_folder(self, name: str) -> Path:
        return self._root / name

    def _persist(self, stream: Stream) -> None:
        """Write stream.json atomically: a crash leaves the old file or the new one."""
        if stream.config.storage == "file":
            write_state(self._root / stream.name / META_FILE, stream.snapshot_config())

    # -- subscriptions -------------------------------------------------------

    def _attach(self, stream: Stream) -> None:
        subscribe = self.messaging.subscribe
        on_msg, on_run = self._publish_handlers(stream)
        intakes = [subscribe(s, on_msg, intake=on_run) for s in stream.config.subjects]
        if stream.name in self._following:  # subjects updated at a follower
            for token in intakes:
                self.messaging.share(token, False)
        tokens = list(intakes)
        if stream.config.allow_direct:
            tokens += self._direct_subs(stream, stream.name)
        self._subs[stream.name] = tokens
        self._intakes[stream.name] = intakes
        self.sources.open(stream)
        self._arm_expiry(stream)

    def _detach(self, name: str) -> None:
        self.sources.close(name)
        self._intakes.pop(name, None)
        for token in self._subs.pop(name, []):
            self.messaging.unsubscribe(token)
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    def _publish_handlers(
        self, stream: Stream
    ) -> tuple[Callable[..., None], Callable[[bytes, list[bytes], list[bytes]], None]]:
        """Run for every message a stream stores, one at a time or in the codec's runs:
        what can be decided once is decided here (the stream's name never changes), and
        the rare cases (a fast batch's reply, a timed stream) cost a test, not a call,
        for every other message."""
        publish = self.messaging.publish
        timers = self._timers
        name = stream.name
        fast_suffix = fast_batch.SUFFIX
        fast_tail = fast_suffix.encode()

        def on_msg(subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
            headers = read_headers(hdr) if hdr else {}
            if SOURCE_HEADER in headers:  # a client's: only sourcing writes that header
                if reply and stream.accepting and not stream.config.no_ack:
                    publish(reply, None, None, pub_refusal(name, source_header_refused()))
                return
            ack = fast = None
            if reply:
                target = reply

                def ack(body: bytes) -> None:
                    publish(target, None, None, body)

                if reply.endswith(fast_suffix):
                    fast = fast_batch.parse(reply)
            stream.publish(subject, hdr, data, headers, ack, fast)
            if name not in timers and _timed(stream.config):
                self._arm_expiry(stream)

        send = self.messaging.replies

        def on_run(subject: bytes, replies: list[bytes], payloads: list[bytes]) -> None:
            text = subject.decode("utf-8", "surrogateescape")
            if any(reply.endswith(fast_tail) for reply in replies):  # a fast batch's
                for reply, data in zip(replies, payloads, strict=True):
                    on_msg(text, reply.decode("utf-8", "surrogateescape") or None, None, data)
                return
            stream.publish_run(text, replies, payloads, send)
            if name not in timers and _timed(stream.config):
                self._arm_expiry(stream)

        if self.limits is not None:
            return js_limits.limited(self, stream, on_msg)
        return on_msg, on_run

    def _direct_subs(self, stream: Stream, name: str) -> list[object]:
        """Answer direct gets for stream `name` from `stream` (itself, or its mirror), in
        the reference's queue group, so one of them answers."""
        on_get = self._direct_handler(stream, name)
        prefix = DIRECT_PREFIX + name
        subscribe = self.messaging.subscribe
        return [subscribe(s, on_get, queue=DIRECT_GROUP) for s in (prefix, prefix + ".>")]

    def _serve_origin_gets(self, stream: Stream) -> None:
        """A mirror with `mirror_direct` caught up: it answers its origin's direct gets too
        (until it goes or changes), never from a copy still catching up."""
        mirror = stream.config.mirror
        if stream.config.mirror_direct and mirror is not None and stream.name in self._subs:
            self._subs[stream.name] += self._direct_subs(stream, mirror.name)

    def _direct_handler(self, stream: Stream, name: str) -> Callable[..., None]:
        prefix = DIRECT_PREFIX + name + "."
        publish = self.messaging.publish

        def on_get(subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
            if not reply:
                return
            if above_api_level(hdr):
                publish(reply, None, direct.REQUIRED_API_LEVEL, b"")
                return
            key = subject[len(prefix) :] if subject.startswith(prefix) else ""
            try:
                req = direct.parse_request(data, key)
            except direct.BadDirectRequest as bad:
                publish(reply, None, bad.hdr, b"")
                return
            read = stream.read_point()
            if read is None:
                respond(reply, req)
            else:  # unanswered where the read cannot be shown current: never a stale copy
                read.add_done_callback(
                    lambda done: done.cancelled() or done.exception() or respond(reply, req)
                )

        def respond(reply: str, req: direct.DirectRequest) -> None:
            out = direct.answer(stream, req)

            def send(*_: object) -> None:
                for r in out.replies:
                    publish(reply, None, r.hdr or None, r.data)

            barrier = stream.commit_barrier(out.reveal) if out.reveal else None
            if barrier is None:
                send()
            else:
                barrier.add_done_callback(send)

        return on_get

    async def visible(self, stream: Stream, seq: int) -> None:
        """Wait until message `seq` is committed, so a reader never sees an unacked write."""
        barrier = stream.commit_barrier(seq)
        if barrier is not None:
            try:
                await asyncio.shield(barrier)
            except Exception:
                raise errors.no_message_found() from None

    # -- expiry (max_age, Nats-TTL) ------------------------------------------

    def _arm_expiry(self, stream: Stream) -> None:
        """Schedule the next expiry; before anything is committed, check back after one period."""
        cfg = stream.config
        if not _timed(cfg) or stream.name in self._timers:
            return
        deadline = stream.next_expiry()
        if deadline is None:
            if stream.last_seq == 0:
                return
            deadline = now_ns() + (cfg.max_age or 1_000_000_000)
        delay = max(deadline - now_ns(), 0) / 1e9
        loop = asyncio.get_running_loop()
        self._timers[stream.name] = loop.call_later(delay, self._expire, stream.name)

    def _rearm_expiry(self, name: str) -> None:
        """A TTL shorter than the armed deadline committed: the timer must fire sooner."""
        timer = self._timers.pop(name, None)
        if timer is not None:
            timer.cancel()
        stream = self.streams.get(name)
        if stream is not None:
            self._arm_expiry(stream)

    def _expire(self, name: str) -> None:
        self._timers.pop(name, None)
        stream = self.streams.get(name)
        if stream is None:
            return
        stream.expire(now_ns())  # its commit re-arms the timer (`on_sooner_expiry`)
        if stream.next_expiry() is not None:
            self._arm_expiry(stream)


def _timed(cfg: StreamConfig) -> bool:
    """Whether messages of the stream can expire (max_age, Nats-TTL, schedules)."""
    return bool(cfg.max_age or cfg.allow_msg_ttl or cfg.allow_msg_schedules)


def _close_consumer_files(stream: Stream) -> None:
    """A replicated stream's consumer logs stay open between ops: close them with it."""
    if isinstance(stream.consumer_ops, ConsumerFiles):
        stream.consumer_ops.close()
