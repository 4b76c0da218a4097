"""The lake beside `jetlake serve`: seal on a timer, hold reclaim, report lag, start the compactor.

The server never waits for Spark. It keeps to cheap file work on its own
loop, once per tick:
- seal the active segment of each lake stream once its first message is
  `seal_interval` old (an idle stream's segment too, not only on the next
  append), so a message reaches the lake within seconds;
- read each stream's pin (`lake.json`, written by the compactor after each
  Delta commit) and hold reclaim above it, so space reclaim never destroys a
  row the lake has not taken;
- merge one run of small sealed segments at or below the pin
  (`FileStore.merge_small`), so 0.5-s seals do not pile up ~170,000 files a day;
- start the compactor process (`jetlake job compact --follow`, one long-lived
  SparkSession) the first time a sealed segment waits for the lake. Until then
  no JVM runs: a short-lived `-js` server that seals nothing costs nothing.
  If it dies it is started again after `_RESTART_BACKOFF`; at shutdown it gets
  SIGTERM, then SIGKILL (safe: every append is an idempotent transaction); if
  the server itself is killed, the compactor notices its parent is gone.
Lag per stream (messages and seconds behind the lake) is what `/jsz` and
`/metrics` show. Every account's engine is watched alike: a named account's
stream goes by `<account>.<stream>` there and in the lake (`layout`).

In a cluster every server runs its own supervisor over its own replicas, and
all of them share one lake dir (`lake { dir: … }` / `--lake_dir` naming the
same object store or shared folder on every server; the per-server default
would give a stream one table per server, so it draws a warning). The
compactor follows the stream's leader: each tick, the supervisor writes a
replicated stream's `replica.json` (its config, and whether this server leads
it and has caught up: `Stream.accepting`), and a compactor takes only the
streams its server leads. Every replica seals on its own timer and holds
reclaim above the lake's pin (the higher of its own and the shared one in
the table dir), so a follower still has every row the lake lacks when it is
elected. A new leader's compactor starts from the seq the table records; the
deposed leader's, if it still runs for a moment, loses its conditional append
(`log.compactor.txn`) rather than duplicating a row.

A lake in object storage (`s3://…`) is never called from the server's loop: a
store that is slow or gone would stall every client. A worker thread checks
the bucket and reads the shared pins every 2 s; the tick uses what it last
found. While the bucket is missing or refuses the credentials, `/jsz` says so,
naming the bucket, and no compactor is started (it could only fail); reclaim
waits and publishes go on being acknowledged, the live log being the buffer.
The bucket's options reach the compactor in its environment, never argv.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingest.server.child import stop_child
from log.compactor.layout import (
    REPLICA_FILE,
    TYPING_FILE,
    StreamRef,
    default_lake_dir,
    describe_replica,
    lake_enabled,
    lake_seq,
    read_shared_pin,
    read_typing,
    streams_root,
)
from log.compactor.location import Lake, LakeStoreError
from log.compactor.typed.registry import PREFIX as SCHEMAS_PREFIX
from log.compactor.typed.registry import STREAM as SCHEMAS_STREAM
from log.config import StreamConfig
from log.segments.api import MsgStore
from log.segments.filestore import FileStore
from log.timefmt import now_ns, rfc3339

if TYPE_CHECKING:
    from ingest.server.jetstream import JetStream
    from ingest.server.settings import LakeConfig
    from log.streams.stream import Stream

log = logging.getLogger("jetlake")

_TICK_MAX = 1.0  # seconds between ticks at most
_RESTART_BACKOFF = 10.0
_STOP_GRACE = 5.0
_STORE_EVERY = 2.0  # seconds between looks at a remote lake's bucket and shared pins


@dataclass(frozen=True, slots=True)
class Lag:
    stream: str
    lake_seq: int
    messages: int
    seconds: float
    table: str

    def json(self) -> dict[str, Any]:
        return {
            "lake_seq": self.lake_seq,
            "lag_messages": self.messages,
            "lag_seconds": round(self.seconds, 3),
            "table": self.table,
        }


class LakeSupervisor:
    def __init__(self, config: LakeConfig) -> None:
        self.config = config
        self.store_base = Path()
        self.lake = Lake.at(".")
        self._engines: Callable[[], list[JetStream]] = list
        self._task: asyncio.Task[None] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._failed_at = 0.0
        self._clustered = False
        # per stream: replica.json's content
        self._described: dict[str, tuple[dict[str, Any], bool]] = {}
        self.lags: dict[str, Lag] = {}
        self._refs: dict[str, StreamRef] = {}  # the lake streams of the last tick
        self._typing_seen: dict[str, int] = {}  # per stream: mtime of the typing record read
        self._inferred: dict[tuple[str, str], bytes] = {}  # (account, table): schema published
        self._watch: asyncio.Task[None] | None = None  # a remote lake's store, off the loop
        self._shared: dict[str, int] = {}  # by app id: a remote lake's shared pins, as last read
        self.store_error: str | None = None  # the bucket missing, credentials refused, …
        self._store_ok = True  # a remote lake: its bucket answered the last check

    # -- the store opener JetStream calls ----------------------------------------------

    def open_store(self, cfg: StreamConfig, path: Path, *, replicated: bool = False) -> MsgStore:
        """The engine's store, holding reclaim at once when the stream goes to the lake."""
        from ingest.server.jetstream.engine import open_store

        store = open_store(cfg, path, replicated=replicated)
        if isinstance(store, FileStore) and lake_enabled(cfg.storage, cfg.metadata):
            store.hold_for_lake(0)  # the first tick raises it to the pin
        return store

    # -- lifecycle ----------------------------------------------------------------------

    def start(self, store_base: Path, engines: Callable[[], list[JetStream]]) -> None:
        """Begin ticking over the streams of every engine `engines` lists (one per account
        with JetStream, as it is now: operator mode adds accounts while the server runs)."""
        self._engines = engines
        self._clustered = any(js.cluster is not None for js in engines())
        self.store_base = store_base
        self.lake = Lake.at(self.config.dir or default_lake_dir(self.store_base), self.config.s3)
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run())
        if self.lake.remote:
            self._store_ok = False  # until the first check of the bucket answers
            self._watch = loop.create_task(self._watch_store())
        log.info("Lake on: tables in %s, seal every %gs", self.lake.root, self.config.seal_interval)
        if self._clustered and not self.config.dir:
            log.warning(
                "Lake: clustered with the default lake dir %s; give every server the same "
                "`lake { dir }` or each replica's leader writes its own table",
                self.lake.root,
            )

    async def stop(self) -> None:
        for task in (self._task, self._watch):
            if task is not None:
                task.cancel()
        self._task = self._watch = None
        proc, self._proc = self._proc, None
        code = await stop_child(proc, _STOP_GRACE)
        if proc is not None and code:  # it did not finish its pass and exit on SIGTERM
            log.error("lake compactor (pid %d) exited with code %d", proc.pid, code)

    async def _run(self) -> None:
        interval = min(max(self.config.seal_interval / 2, 0.05), _TICK_MAX)
        while True:
            try:
                self.tick()
            except Exception:
                log.exception("lake supervisor: tick failed")
            await asyncio.sleep(interval)

    async def _watch_store(self) -> None:
        """A remote lake: check the bucket and read the shared pins in a thread, every
        `_STORE_EVERY` (requests cost money on a cloud store; a pin read late only holds
        reclaim a little longer)."""
        while True:
            refs = list(self._refs.values())
            try:
                await asyncio.to_thread(self._read_store, refs)
            except Exception:
                log.exception("lake supervisor: reading the lake's store failed")
            await asyncio.sleep(_STORE_EVERY)

    def _read_store(self, refs: list[StreamRef]) -> None:
        try:
            self.lake.check()
        except LakeStoreError as exc:
            if self.store_error is None:  # once per outage (each answer has its own request id)
                log.error("Lake unavailable: %s", exc)
            self.store_error = str(exc)
            self._store_ok = False
            return
        self._store_ok = True
        if self.store_error is not None:
            log.info("Lake available again: %s", self.lake.root)
            self.store_error = None
        # Only a cluster's replicas need the lake's pin: a single server's own pin is as high.
        pins = {r.app_id: read_shared_pin(r, self.lake) for r in refs if self._clustered}
        self._shared = {app_id: pin.seq for app_id, pin in pins.items() if pin is not None}

    def _lake_seq(self, ref: StreamRef) -> int:
        """The pins' seq: the lake's read now from a folder, as last read from a bucket."""
        if self.lake.remote:
            return max(lake_seq(ref, None), self._shared.get(ref.app_id, 0))
        return lake_seq(ref, self.lake)

    # -- one tick -----------------------------------------------------------------------

    def tick(self) -> None:
        now = now_ns()
        bound = now - int(self.config.seal_interval * 1e9)
        lags: dict[str, Lag] = {}
        refs: dict[str, StreamRef] = {}
        waiting = False
        every = [(js, s) for js in self._engines() for s in list(js.streams.values())]
        for js, stream in every:
            store = stream.store
            if not isinstance(store, FileStore):
                continue
            ref = self._ref(js.account, stream)
            if self._clustered:
                self._describe(stream, ref)
            if not ref.lake_on:
                store.hold_for_lake(None)
                continue
            done = self._lake_seq(ref)
            store.hold_for_lake(done)
            store.seal(older_than_ns=bound)
            store.merge_small()
            waiting |= ref.leads and store.sealed_last_seq > done
            lags[ref.qualified] = self._lag(ref, store, done, now)
            refs[ref.qualified] = ref
            if ref.leads:
                self._publish_inferred(js, ref)
        self.lags = lags
        self._refs = refs
        if waiting:
            self._ensure_compactor()

    def _ref(self, account: str, stream: Stream) -> StreamRef:
        """The stream as the compactor will see it; a replica leads once it accepts publishes."""
        cfg = stream.config
        return StreamRef(
            name=cfg.name,
            dir=streams_root(self.store_base, account) / cfg.name,
            created=rfc3339(stream.created_ns),
            metadata=dict(cfg.metadata),
            storage=cfg.storage,
            leads=not self._clustered or stream.accepting,
            account=account,
        )

    def _describe(self, stream: Stream, ref: StreamRef) -> None:
        """Keep the replica's `replica.json` current (the compactor and `jetlake sql` read it)."""
        snapshot = stream.snapshot_config()
        known = (snapshot, ref.leads)
        if self._described.get(ref.qualified) == known and (ref.dir / REPLICA_FILE).is_file():
            return
        describe_replica(ref.dir, snapshot, leader=ref.leads)
        self._described[ref.qualified] = known

    def _lag(self, ref: StreamRef, store: FileStore, done: int, now: int) -> Lag:
        last = store.state().last_seq
        behind = max(last - done, 0)
        oldest = store.ts_after(done) if behind else None
        seconds = max(now - oldest, 0) / 1e9 if oldest is not None else 0.0
        return Lag(ref.qualified, done, behind, seconds, str(ref.table_path(self.lake)))

    # -- the compactor process ----------------------------------------------------------

    def _ensure_compactor(self) -> None:
        if self.config.compact_interval <= 0 or not self._store_ok:
            return
        if self._proc is not None:
            code = self._proc.poll()
            if code is None:
                return
            log.error("lake compactor (pid %d) exited with code %d", self._proc.pid, code)
            self._proc = None
            self._failed_at = time.monotonic()
        if self._failed_at and time.monotonic() - self._failed_at < _RESTART_BACKOFF:
            return
        argv = [
            sys.executable,
            "-m",
            "jobs.lake_job",
            "compact",
            "--follow",
            "--store",
            str(self.store_base),
            "--lake",
            self.lake.root,
            "--interval",
            str(self.config.compact_interval),
            "--optimize_interval",
            str(self.config.optimize_interval),
            "--parent",
            str(os.getpid()),
        ]
        if self.config.spark_master:
            argv += ["--spark_master", self.config.spark_master]
        env = {**os.environ, **self.lake.child_env()}
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env)
        log.info("Started the lake compactor (pid %d)", self._proc.pid)

    def status(self) -> dict[str, Any]:
        """The `lake` object of /jsz: the compactor and every lake stream's lag; a typed
        stream's also its reject count and its tables (columns, inferred conflicts, schema
        revisions used), as the compactor last wrote them."""
        running = self._proc is not None and self._proc.poll() is None
        streams = {}
        for name, lag in sorted(self.lags.items()):
            streams[name] = lag.json()
            typing = self.typing(name)
            if typing:
                streams[name].update(rejects=typing.get("rejects", 0), tables=typing["tables"])
        out: dict[str, Any] = {
            "dir": self.lake.root,
            "compactor": {"running": running, "pid": self._proc.pid if running else 0},
            "streams": streams,
        }
        if self.store_error is not None:
            out["error"] = self.store_error
        return out

    def _publish_inferred(self, js: JetStream, ref: StreamRef) -> None:
        """Put each inferred table's schema (JSON Schema) in the schemas bucket, key
        `<table>.inferred`, when the compactor's record of it changes: a user sees it with
        `nats kv get` and freezes it by putting it under a name the stream declares.

        Published as any client of the stream's account would (the account's bucket takes
        it, with no ack); nothing while the bucket does not exist. A stat per typed stream
        per tick."""
        try:
            changed = (ref.dir / TYPING_FILE).stat().st_mtime_ns
        except FileNotFoundError:
            return
        if self._typing_seen.get(ref.qualified) == changed or SCHEMAS_STREAM not in js.streams:
            return
        self._typing_seen[ref.qualified] = changed
        for table, info in read_typing(ref).get("tables", {}).items():
            body = json.dumps(info.get("inferred"), sort_keys=True).encode()
            known = (ref.account, table)
            if "inferred" in info and self._inferred.get(known) != body:
                self._inferred[known] = body
                js.messaging.publish(f"{SCHEMAS_PREFIX}{table}.inferred", None, None, body)

    def typing(self, name: str) -> dict[str, Any]:
        """What the compactor wrote about a typed stream's tables ({} for a raw stream);
        `name` as `/jsz` keys it (`<account>.<stream>` for a named account's)."""
        ref = self._refs.get(name)
        return read_typing(ref) if ref is not None else {}
