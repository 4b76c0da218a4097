"""`$JS.API.STREAM.SNAPSHOT.<stream>` and `$JS.API.STREAM.RESTORE.<stream>`: a stream's
backup streamed to a client and back, with the reference's protocol around jetlake's
own archive (`log.backup_archive`).

A snapshot answers with the stream's config and state, then sends the archive in
`chunk_size` pieces to the deliver subject; each full piece carries a reply subject
the client acks, and no more than `window_size` bytes wait for acks (API level 3).
The end is an empty message: status 204 once a full piece went out, 408 when acks
stop for 5 s or the receiver leaves, 500 when the store fails, as the reference.

A restore answers with a subject to send pieces to, acks each, and on the empty
one builds the stream aside (`<store>/jetstream/<account>/restores/`), then renames
its folder into place in one step: a kill -9 during a restore leaves no stream,
only a staging folder that the next start removes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import secrets
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from consensus.commits import OnCommit, settle
from consensus.types import RaftError
from consensus.wal_recovery import fsync_dir, replace_durably, write_all
from ingest.parser.subjects import is_literal, is_valid_subject
from ingest.server.jetstream.engine import META_FILE
from log import config as streamconfig
from log import errors
from log.backup_archive import ArchiveReader, ArchiveWriter, BackupError, restore_into
from log.consumers.ops import encode_create
from log.consumers.store import ConsumerStore, consumers_dir, load_all
from log.errors import ApiError
from log.request_fields import Fields
from log.segments.api import CorruptSegmentError, MsgStore, NewMsg, StoreError
from log.segments.inspect import list_segments, read_segment
from log.streams.entries import Publish, Restored
from log.streams.snapshot import Ask
from log.timefmt import now_ns, rfc3339

if TYPE_CHECKING:
    from ingest.server.jetstream.engine import JetStream
    from log.config import StreamConfig
    from log.streams.stream import Stream

log = logging.getLogger("jetlake.jetstream")

Response = dict[str, Any]
CREATE_TYPE = "io.nats.jetstream.api.v1.stream_create_response"
RESTORE_TYPE = "io.nats.jetstream.api.v1.stream_restore_response"
STAGING = "restores"
ACK_TIMEOUT = 5.0  # the reference's: a receiver silent this long has gone
INTEREST_WAIT = 2.0  # how long a snapshot waits for its receiver to subscribe
STALL_TIMEOUT = 5.0  # a restore whose client sends nothing this long is dropped
_FIELDS = Fields("JSApiStreamSnapshotRequest")
_RESTORE_FIELDS = Fields("JSApiStreamRestoreRequest")


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    deliver_subject: str
    no_consumers: bool
    chunk_size: int
    window_size: int
    jsck: bool  # verify every sealed segment against its checksums first

    @property
    def chunk(self) -> int:
        """The reference's clamps: chunks of 1 KiB..1 MiB (128 KiB by default)."""
        return min(max(self.chunk_size or 128 * 1024, 1024), 1024 * 1024)

    @property
    def in_flight(self) -> int:
        """Chunks that may await acks: a window of 1 KiB..32 MiB (8 MiB by default), at
        least one chunk."""
        window = min(max(self.window_size or 8 * 1024 * 1024, 1024), 32 * 1024 * 1024)
        return max(window, self.chunk) // self.chunk


def parse_snapshot_request(data: bytes) -> SnapshotRequest:
    raw = streamconfig.parse_json(data)
    if not isinstance(raw, dict):
        raise errors.invalid_json(
            "cannot unmarshal into Go value of type JSApiStreamSnapshotRequest"
        )
    for key in ("chunk_size", "window_size"):
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise _FIELDS.type_error(key, value, "int")
    return SnapshotRequest(
        _FIELDS.str(raw, "deliver_subject"),
        _FIELDS.bool(raw, "no_consumers"),
        int(raw.get("chunk_size") or 0),
        int(raw.get("window_size") or 0),
        _FIELDS.bool(raw, "jsck"),
    )


def is_empty_request(data: bytes) -> bool:
    """The reference's test: no body, or a JSON object without fields."""
    if not data.strip():
        return True
    try:
        return streamconfig.parse_json(data) == {}
    except ApiError:
        return False


def restore_request(tokens: list[str], data: bytes) -> tuple[StreamConfig, dict[str, Any]]:
    """`STREAM.RESTORE.<stream>`'s config, checked as the reference checks it first, and
    the config as asked (for its placement)."""
    if is_empty_request(data):
        raise errors.bad_request()
    raw = streamconfig.parse_json(data)
    if not isinstance(raw, dict):
        raise errors.invalid_json(
            "cannot unmarshal into Go value of type JSApiStreamRestoreRequest"
        )
    name = tokens[-1]
    body = raw.get("config") or {}
    if not isinstance(body, dict):
        raise _RESTORE_FIELDS.type_error("config", body, "server.StreamConfig")
    body = {**body, "name": body.get("name") or name}
    if body["name"] != name:
        raise errors.stream_name_mismatch()
    if any(ch in name for ch in "/\\"):
        raise ApiError(400, 10128, "Stream name can not contain path separators")
    return streamconfig.from_request(body), body


def name_in_use() -> ApiError:
    return ApiError(400, 10130, "stream name already in use, cannot restore")


class Backups:
    """The two endpoints of one JetStream engine."""

    def __init__(self, engine: JetStream, encode: Callable[[Response], bytes]) -> None:
        self._js = engine
        self.encode = encode
        self._tasks: set[asyncio.Task[None]] = set()

    @staticmethod
    def discard_unfinished(account_dir: Path) -> None:
        """Restores a crash cut short never became streams: drop what they staged."""
        staging = account_dir / STAGING
        if staging.is_dir():
            log.warning("JetStream: removing unfinished restores in %s", staging)
            shutil.rmtree(staging, ignore_errors=True)

    # -- snapshot ----------------------------------------------------------------

    def snapshot(self, tokens: list[str], data: bytes) -> Response | Awaitable[Response]:
        if is_empty_request(data):
            raise errors.bad_request()
        stream = self._js.stream(tokens[-1])
        req = parse_snapshot_request(data)
        subject = req.deliver_subject
        if not (is_valid_subject(subject) and is_literal(subject)):
            raise ApiError(400, 10015, "deliver subject not valid")
        if req.jsck and stream.config.storage == "file":
            return self._checked_snapshot(stream, req)
        return self._start_snapshot(stream, req)

    async def _checked_snapshot(self, stream: Stream, req: SnapshotRequest) -> Response:
        await verify_segments(self._js.stream_folder(stream.name))
        return self._start_snapshot(self._js.stream(stream.name), req)

    def _start_snapshot(self, stream: Stream, req: SnapshotRequest) -> Response:
        saved = [] if req.no_consumers else load_all(self._js.stream_folder(stream.name))
        writer = ArchiveWriter(
            stream.store,
            config=stream.config.to_json(),
            consumers=saved,
            name=stream.name,
        )
        state = stream.state_json(consumers=self._js.consumers.count(stream.name))
        self._spawn(self._send(stream, req, writer))
        return {"config": stream.config.to_json(), "state": state}

    async def _send(self, stream: Stream, req: SnapshotRequest, writer: ArchiveWriter) -> None:
        messaging = self._js.messaging
        deliver, size = req.deliver_subject, req.chunk
        window = _Window(req.in_flight)
        acks = f"$JS.SNAPSHOT.ACK.{stream.name}.{secrets.token_hex(8)}"
        token = messaging.subscribe(acks + ".>", lambda *_: window.ack())
        status: bytes | None = None
        try:
            watched = await _receiver(messaging.has_subscriber, deliver)
            buf = bytearray()
            for index in itertools.count(1):
                while len(buf) < size and not writer.done:
                    buf += writer.read()
                    await asyncio.sleep(0)  # one archive frame per turn
                if len(buf) < size:
                    if buf:
                        messaging.publish(deliver, None, None, bytes(buf))
                    break
                if not await window.take(ACK_TIMEOUT):
                    status = b"408 No Flow Response"
                    break
                if watched and not messaging.has_subscriber(deliver):
                    status = b"408 No Interest"
                    break
                messaging.publish(deliver, f"{acks}.{size}.{index}", None, bytes(buf[:size]))
                del buf[:size]
                status = b"204"
        except Exception as exc:  # the store failed or the stream went: the receiver hears why
            log.warning("JetStream: snapshot of stream %s failed: %s", stream.name, exc)
            status = b"500 " + " ".join(str(exc).split()).encode()  # one header line
        finally:
            messaging.unsubscribe(token)
        hdr = b"NATS/1.0 " + status + b"\r\n\r\n" if status else None
        messaging.publish(deliver, None, hdr, b"")

    # -- restore -----------------------------------------------------------------

    def restore(self, tokens: list[str], data: bytes) -> Response:
        """A single server's restore (a cluster's meta leader places one instead, and the
        new stream's first leader takes the backup: `take_replicated`)."""
        cfg, _ = restore_request(tokens, data)
        if cfg.num_replicas > 1:
            raise errors.replicas_not_supported()
        cfg = self._js.sources.checked(cfg)
        if cfg.name in self._js.streams:
            raise name_in_use()
        folder, subject = self._staging(cfg.name)
        _Restore(self, cfg.name, folder, subject, partial(self.finish_restore, cfg))
        return {"deliver_subject": subject}

    def take_replicated(self, stream: Stream, reply: str) -> None:
        """The first leader of a stream placed by a restore: answer the client with the
        subject to send the backup to, then put its rows in the stream's log. Publishes
        wait meanwhile; a restore that fails or stalls deletes the stream, as the
        reference's does."""
        stream.restoring = True
        stream.propose_restored(Restored((), 0), lambda error: None)  # the next leader knows
        folder, subject = self._staging(stream.name)
        _Restore(
            self,
            stream.name,
            folder,
            subject,
            partial(self._load_replicated, stream),
            abandon=partial(self._abandon, stream.name),
        )
        doc = {"type": RESTORE_TYPE, "deliver_subject": subject}
        self._js.messaging.publish(reply, None, None, self.encode(doc))

    def _staging(self, name: str) -> tuple[Path, str]:
        folder = self._js.store_dir / self._js.account / STAGING / f"{name}.{secrets.token_hex(8)}"
        folder.mkdir(parents=True)
        return folder, f"$JS.SNAPSHOT.RESTORE.{name}.{secrets.token_hex(11)}"

    def _abandon(self, name: str) -> None:
        self._spawn(self._js.api.ask(f"$JS.API.STREAM.DELETE.{name}", b"", ACK_TIMEOUT))

    async def _load_replicated(self, stream: Stream, folder: Path) -> Response:
        """The backup's rows as entries of the stream's log, a frame at a time, each
        committed before the next is read, then its consumers as consumer creates."""
        with open(folder / "archive", "rb") as file:
            reader = ArchiveReader(file, stream.name)
            header = reader.header()
            gone = set(header.deleted)
            through, logged = header.keep_from - 1, 0
            while through < header.last_seq or logged < header.explicit_size:
                ask = Ask(through + 1, header.last_seq, logged, header.explicit_size)
                rows = await reader.fetch(ask)
                if not rows.helps(ask):
                    raise BackupError(f"stream {stream.name}: backup frame with nothing new")
                logged += len(rows.explicit)
                msgs = tuple(
                    Publish(NewMsg(m.subject, m.hdr, m.data, m.ts), m.seq)
                    for m in rows.msgs
                    if m.seq >= header.first_seq and m.seq not in gone
                )
                if rows.through > through:
                    through = rows.through
                    await _committed(partial(stream.propose_restored, Restored(msgs, through)))
        if header.last_seq > stream.store.state().last_seq:  # all purged: the seqs still count
            await _committed(partial(stream.propose_restored, Restored((), header.last_seq)))
        for saved in header.consumers:
            if saved.state is None:
                log.warning(
                    "JetStream: restore of %s: consumer %s has no state", stream.name, saved.name
                )
                continue
            op = encode_create(saved.config, saved.created, saved.state)
            await _committed(partial(stream.propose_consumer_op, saved.name, op))
        stream.restored()
        stream.restoring = False
        self._js.consumers.lead(stream)
        log.info("JetStream: restored stream %s to seq %d", stream.name, stream.last_seq)
        doc = self._js.describe(stream, dynamic=True)
        return {k: doc[k] for k in ("config", "created", "state", "ts")}

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def finish_restore(self, cfg: StreamConfig, folder: Path) -> Response:
        """Build the stream aside from the received archive, move it in, open it."""
        js = self._js
        store, created = await asyncio.to_thread(_build, js, cfg, folder)
        try:
            if cfg.name in js.streams:
                raise ApiError(400, 10130, "stream name already in use, cannot restore")
            js.check_overlap(cfg)
            if store is None:  # a file stream: its folder moves into place whole
                target = js.stream_folder(cfg.name)
                os.replace(folder / "stream", target)
                fsync_dir(target.parent)
        except BaseException:
            if store is not None:
                store.close()
            raise
        stream = js.open_restored(cfg, created, store)
        log.info("JetStream: restored stream %s to seq %d", cfg.name, stream.last_seq)
        doc = js.describe(stream, dynamic=True)
        return {k: doc[k] for k in ("config", "created", "state", "ts")}


async def verify_segments(folder: Path) -> None:
    """`jsck`: the reference checks every message before it answers; jetlake reads every
    sealed segment back against its batch checksums (in a thread: it is all of the
    stream's bytes). The active segment was checked as the store opened it."""
    for info in await asyncio.to_thread(list_segments, folder):
        if not info.sealed:
            continue
        try:
            await asyncio.to_thread(read_segment, info)
        except CorruptSegmentError as exc:
            raise ApiError(500, 10064, f"snapshot failed: {exc}") from None
        except FileNotFoundError:
            continue  # rewritten meanwhile (a reclaim or merge): checked as it was written


class _Window:
    """Chunks in flight: a slot per chunk, freed by its ack (never more than the size)."""

    def __init__(self, size: int) -> None:
        self._size = self._free = size
        self._freed = asyncio.Event()

    def ack(self) -> None:
        self._free = min(self._free + 1, self._size)
        self._freed.set()

    async def take(self, timeout: float) -> bool:
        while self._free == 0:
            self._freed.clear()
            try:
                await asyncio.wait_for(self._freed.wait(), timeout)
            except TimeoutError:
                return False
        self._free -= 1
        return True


async def _receiver(has_subscriber: Callable[[str], bool], subject: str) -> bool:
    """Give the receiver a moment to subscribe to the deliver subject itself (clients
    subscribe once they have the response; the reference waits up to 2 s); whether it
    did, so that its leaving can end the snapshot."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + INTEREST_WAIT
    while not has_subscriber(subject):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(0.005)
    return True


class _Restore:
    """One restore in progress: pieces appended to a staging file, each acked; `finish`
    makes the stream of it once the empty piece comes, `abandon` undoes what a restore
    that fails or stalls leaves."""

    def __init__(
        self,
        owner: Backups,
        name: str,
        folder: Path,
        subject: str,
        finish: Callable[[Path], Awaitable[Response]],
        *,
        abandon: Callable[[], None] | None = None,
    ) -> None:
        self._owner = owner
        self._name = name
        self._folder = folder
        self._finish_with = finish
        self._abandon = abandon
        self._messaging = owner._js.messaging
        self._fd: int | None = os.open(folder / "archive", os.O_WRONLY | os.O_CREAT, 0o644)
        self._token = self._messaging.subscribe(subject, self._on_piece)
        self._stall = asyncio.get_running_loop().call_later(STALL_TIMEOUT, self._drop)

    def _on_piece(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if self._fd is None:
            return
        if not reply:  # the reference drops a restore whose pieces cannot be answered
            log.warning("JetStream: restore of %s got a piece without reply", self._name)
            self._drop()
            return
        if data:
            write_all(self._fd, data)
            self._stall.cancel()
            self._stall = asyncio.get_running_loop().call_later(STALL_TIMEOUT, self._drop)
            self._messaging.publish(reply, None, None, b"")
            return
        self._close()
        self._owner._spawn(self._finish(reply))

    async def _finish(self, reply: str) -> None:
        try:
            doc = await self._finish_with(self._folder)
            doc = {"type": CREATE_TYPE, **doc}
        except (ApiError, BackupError, StoreError, OSError, ValueError, RaftError) as exc:
            log.warning("JetStream: restore of stream %s failed: %s", self._name, exc)
            failed = ApiError(500, 10062, f"restore failed: {exc}")
            if isinstance(exc, ApiError):
                failed = exc
            doc = {"type": CREATE_TYPE, "error": failed.to_json()}
            if self._abandon is not None:
                self._abandon()
        finally:
            shutil.rmtree(self._folder, ignore_errors=True)
        self._messaging.publish(reply, None, None, self._owner.encode(doc))

    def _drop(self) -> None:
        log.warning("JetStream: restore of stream %s stalled; dropped", self._name)
        self._close()
        shutil.rmtree(self._folder, ignore_errors=True)
        if self._abandon is not None:
            self._abandon()

    def _close(self) -> None:
        self._stall.cancel()
        self._messaging.unsubscribe(self._token)
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None


async def _committed(propose: Callable[[OnCommit], None]) -> None:
    """Propose (the callable takes the commit callback) and wait for the commit."""
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    propose(partial(settle, future, 0))
    await future


def _build(js: JetStream, cfg: StreamConfig, folder: Path) -> tuple[MsgStore | None, int]:
    """(In a worker thread.) The store filled from the archive, with the consumers and
    stream.json beside it; a file store is closed (its folder moves into place), a
    memory store is handed back open. Returns it (or None) and the creation time."""
    target = folder / "stream"
    if cfg.storage == "file":
        target.mkdir()
    store = js.new_store(cfg, target)
    try:
        with open(folder / "archive", "rb") as file:
            reader = ArchiveReader(file, cfg.name)
            header = asyncio.run(restore_into(store, reader, cfg.name))
        store.sync()
        created = now_ns()  # a new stream to the reference too: sources see it recreated
        if cfg.storage != "file":
            return store, created
        store.close()
    except BaseException:
        store.close()
        raise
    for saved in header.consumers:
        consumer = ConsumerStore(consumers_dir(target) / saved.name, sync_interval_ns=None)
        if saved.state is not None:
            consumer.save_state(saved.state)
        consumer.save_meta(saved.config, saved.created)
        consumer.close()
    meta = {"config": cfg.to_json(), "created": rfc3339(created)}
    replace_durably(target / META_FILE, json.dumps(meta, indent=1).encode())
    fsync_dir(target)
    return None, created
