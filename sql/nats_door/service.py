"""SQL over NATS: a `$JL.SQL` micro service that answers a query with its result, in chunks.

Any NATS client in any language can ask, with no Spark or JDBC client:

    request  $JL.SQL.query   body: the SQL text
             headers (optional): Jl-Sql-Format: arrow (default) | json
                                 Jl-Sql-Window: chunks in flight before an ack (default 8)
                                 Jl-Sql-Ack-Wait: seconds without an ack before the
                                   client is taken for gone (default 30)
                                 Jl-Sql-Timeout: seconds the query may take (default none)
                                 Jl-Sql-Id: an id its client may cancel it by, with a
                                   publish to $JL.SQL.cancel.<id> (`sql.nats_door.cancel`)
                                 Jl-Sql-Heartbeat: seconds between heartbeats while the
                                   query runs (default none); each may be answered
                                 Jl-Sql-Engine: spark (default) | duckdb: the query in
                                   DuckDB's dialect, on DuckDB (`sql.nats_door.duck_engine`)
    replies  to the request's inbox, in order:
             chunk messages, each with a reply subject: the body is an Arrow IPC stream
             (schema + record batches, readable alone) or JSON lines, under the server's
             max_payload; header Jl-Sql-Chunk: its index from 0
             then an empty message with Jl-Sql-Rows: the row count (the end)
             or, instead, an error: Nats-Service-Error / Nats-Service-Error-Code
             and, when asked for, empty heartbeats with Jl-Sql-Heartbeat (to ignore)

Flow control: the client answers each chunk (an empty publish to the chunk's
reply subject); the service keeps at most a window of unanswered chunks out, so a
large result never sits whole in the service: Spark hands it over a partition at
a time (`toLocalIterator`) and each chunk is built, sent and dropped. A small
result (at most `SMALL_ROWS` rows, most aggregates) is taken in one job instead,
as Arrow (or rows, for JSON): a job per partition and a row at a time through
Python cost it more than its query. The service learns which kind it has by
asking for one row more than that; a larger result is then run again, streamed. A query stops,
its Spark jobs cancelled (each query runs under a job group of its own), when no
chunk is answered for the ack wait (a client gone), when it outlives its timeout,
and when its rows pass `max_rows`.

A client gone (its connection closed, its inbox unsubscribed) is seen at once: every
chunk and heartbeat goes out with a reply subject, and the server answers a message
nobody receives with a 503 (no responders) on that subject, which stops the query
as a cancel does. A client that asks for heartbeats is thus watched while its query
computes, before any chunk; one that does not is seen at its first chunk. A reply
subject that crossed an account import reaches the importing account's inbox
through the server's mapping, and whether that inbox still listens is not told back
(the mapping takes every message). So a client may answer each heartbeat (an empty
publish to its reply subject, as it acks a chunk; `sql.nats_door.client` does): once it
has answered one, `SILENT_BEATS` heartbeats in a row unanswered mean it is gone, in
any account. A client of another account that answers none is seen gone at the ack
wait, or by its cancel.

Accounts are walls. The service answers in its own account; requests from other
accounts reach it through an import of its `$JL.SQL.>` export (the ack subjects are
under that prefix too, so acks cross back), and the server names the asking account
in `Nats-Request-Info`. A query runs in a session bound to that account
(`sql.account_views`): it reads that account's streams by their bare names and
nothing else. A service in the system account answers its own account's requests
over every account's streams; one in another account refuses other accounts.

The service is a NATS micro service (`nats micro ls` lists it, `$SRV.PING`,
`INFO` and `STATS` answer), queue-grouped, so several SQL services can share
the load. Queries run in a session of their own over the shared views
(`sql.service`), so they see what every other door sees.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from log.compactor.layout import GLOBAL
from log.compactor.location import Lake
from sql.current import ServerCopies
from sql.lake_cache import held
from sql.logins import whoami
from sql.nats_door.cancel import CANCEL_PREFIX, HEARTBEAT, CallOffs, query_id
from sql.nats_door.client import ENGINE
from sql.nats_door.encoding import encode_arrow, encode_json, encode_table
from sql.service import DEFAULT_MAX_ROWS, first_line

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.micro.request import Request
    from nats.micro.service import Service
    from pyspark.sql import DataFrame, Row, SparkSession

    from sql.nats_door.duck_engine import DuckEngine, DuckQuery

log = logging.getLogger("jetlake.sql")

SERVICE = "jetlake-sql"
SUBJECT_PREFIX = "$JL.SQL"
FORMAT = "Jl-Sql-Format"
WINDOW = "Jl-Sql-Window"
TIMEOUT = "Jl-Sql-Timeout"
ACK_WAIT_HEADER = "Jl-Sql-Ack-Wait"
CHUNK = "Jl-Sql-Chunk"
ROWS = "Jl-Sql-Rows"
REQUEST_INFO = "Nats-Request-Info"  # the server's, on a request that crossed a service import
DEFAULT_WINDOW = 8
ACK_WAIT = 30.0  # seconds without an ack before the client is taken for gone
_CANCEL_WAIT = 30.0  # seconds a cancelled query's jobs get to end before it is logged
_ROWS_PER_CHUNK = 2000  # a first guess, halved while a chunk exceeds max_payload
SMALL_ROWS = 10_000  # a result of at most these is taken whole, in one job
SILENT_BEATS = 3  # heartbeats unanswered in a row that end the query of a client that answered


# A part of a result: Spark's rows, or an Arrow table (both slice and count as lists do).
Sliced = Any


class QueryError(Exception):
    """A query refused before any chunk went out: the service error's code and text."""

    def __init__(self, code: str, text: str) -> None:
        super().__init__(text)
        self.code = code


def chunks(rows: Sliced, encode: Callable[[Sliced], bytes], limit: int) -> Iterator[bytes]:
    """`rows` encoded in as few chunks as fit `limit` bytes each (halving until they do)."""
    body = encode(rows)
    if len(body) <= limit:
        yield body
        return
    if len(rows) == 1:
        raise QueryError("413", f"a row of {len(body)} bytes exceeds max_payload {limit}")
    half = len(rows) // 2
    yield from chunks(rows[:half], encode, limit)
    yield from chunks(rows[half:], encode, limit)


def _small(frame: DataFrame, cap: int, as_json: bool) -> pa.Table | list[Row] | None:
    """The whole result when it has at most `cap` rows (None: it has more), in one job."""
    head = frame.limit(cap + 1)
    found = head.collect() if as_json else head.toArrow()
    return found if len(found) <= cap else None


def _rows(it: Iterator[Row], n: int) -> list[Row]:
    return list(itertools.islice(it, n))


class NatsSql:
    """The `$JL.SQL` service of one SQL service process, on one NATS server."""

    def __init__(
        self,
        spark: SparkSession,
        url: str,
        *,
        creds: str | None = None,
        login: dict[str, str] | None = None,
        max_rows: int = DEFAULT_MAX_ROWS,
        store: Path | None = None,
        lake: Lake | None = None,
        copies: ServerCopies | None = None,
    ) -> None:
        self._spark = spark
        self._copies = copies or ServerCopies()  # asked through this door's connection
        self._duck: DuckEngine | None = None  # for `Jl-Sql-Engine: duckdb` (None: no store)
        if store is not None and lake is not None:
            from sql.nats_door.duck_engine import DuckEngine

            self._duck = DuckEngine(store, lake, self._copies)
        self._url = url
        self._creds = creds
        self._login = login or {}  # user and password, or token: the service's own
        self._max_rows = max_rows
        self._nc: Client | None = None
        self._service: Service | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._call_offs = CallOffs()  # queries their clients may cancel (`sql.nats_door.cancel`)
        self._account = GLOBAL  # the service's own, learnt at start
        self._system = False  # the service's account is the system account: it sees all

    async def start(self) -> None:
        import nats
        from nats.micro import add_service

        async def disconnected() -> None:
            log.info("sql service: disconnected from %s; reconnecting", self._url)

        self._nc = await nats.connect(
            self._url,
            name="jetlake sql service",
            user_credentials=self._creds,
            **self._login,
            max_reconnect_attempts=-1,
            disconnected_cb=disconnected,
        )
        self._account, self._system = await whoami(self._nc)
        self._copies.connected(self._nc)
        self._service = await add_service(
            self._nc,
            name=SERVICE,
            version="1.0.0",
            description="SQL over every stream's history (Spark): Arrow IPC or JSON rows",
            stats_handler=lambda _: {"lake_cache": held()},  # `nats micro stats` shows it
        )
        group = self._service.add_group(name=SUBJECT_PREFIX)
        await group.add_endpoint(name="query", handler=self._handle)
        await self._nc.subscribe(f"{CANCEL_PREFIX}.*", cb=self._on_cancel)
        log.info(
            "sql service: answering %s.query on %s in account %s%s",
            SUBJECT_PREFIX, self._url, self._account,
            " (system: every account's streams)" if self._system else "",
        )  # fmt: skip

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._service is not None:
            with contextlib.suppress(Exception):
                await self._service.stop()
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.close()

    async def _handle(self, request: Request) -> None:
        """Check the request here (a bad one fails as a service error the stats count), then
        plan and stream the query from a task of its own: one user's long plan (a large
        lake's log) or result holds up no other request."""
        from nats.micro.request import ServiceError

        if not request._msg.reply:  # a publish, not a request: nowhere to answer
            return
        headers = request.headers or {}
        fmt = headers.get(FORMAT, "arrow").lower()
        engine = headers.get(ENGINE, "spark").lower()
        try:
            account = self._asker(headers)
            if fmt not in ("arrow", "json"):
                raise QueryError("400", f"{FORMAT} {fmt!r} is neither arrow nor json")
            if engine not in ("spark", "duckdb"):
                raise QueryError("400", f"{ENGINE} {engine!r} is neither spark nor duckdb")
            if engine == "duckdb" and self._duck is None:
                raise QueryError("501", "this SQL service has no DuckDB engine (no store)")
            window = _positive(headers, WINDOW, DEFAULT_WINDOW)
            timeout = _positive(headers, TIMEOUT, None)
            ack_wait = _positive(headers, ACK_WAIT_HEADER, ACK_WAIT)
            beat = _positive(headers, HEARTBEAT, None)
            text = request.data.decode(errors="replace").strip()
            if not text:
                raise QueryError("400", "empty query: the request's body is the SQL text")
            called = query_id(headers)
        except (QueryError, ValueError) as exc:  # ValueError: a bad Jl-Sql-Id
            raise ServiceError(getattr(exc, "code", "400"), str(exc)) from None
        query: _Query | DuckQuery
        if engine == "duckdb":
            from sql.nats_door.duck_engine import DuckQuery

            assert self._duck is not None
            query = DuckQuery(self._duck, account, text)
        else:
            query = _Query(self._spark, account, text)
        acks = _Acks(window, ack_wait, fmt == "json")
        task = asyncio.get_running_loop().create_task(
            self._stream(request, query, acks, timeout, beat)
        )
        acks.on_gone = lambda: query.call_off(task, "its client went")
        # A reply subject mapped across an import: only the client's answers tell.
        acks.told_gone = REQUEST_INFO not in headers
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if called is not None:
            key = (account, called)
            self._call_offs.add(key, lambda: query.call_off(task))
            task.add_done_callback(lambda _: self._call_offs.discard(key))

    async def _on_cancel(self, msg: Msg) -> None:
        """A client gave up on its query (`sql.nats_door.cancel`): stop it, if it is the asker's."""
        try:
            account = self._asker(msg.headers or {})
        except QueryError:  # another account's, through a service of one account: not ours
            return
        key = CallOffs.key_of(msg.subject, account)
        if key is not None:
            self._call_offs.call_off(key)

    def _asker(self, headers: dict[str, str]) -> str | None:
        """The account a request is answered for (None: every account's streams).

        A request from another account reaches the service through an import of its
        export, and the server then names that account in `Nats-Request-Info` (replacing
        any the client sent). One without it comes from the service's own account."""
        info = headers.get(REQUEST_INFO)
        if info is None:
            return None if self._system else self._account
        try:
            asker = json.loads(info)["acc"]
        except (ValueError, KeyError, TypeError):
            raise QueryError("400", f"{REQUEST_INFO} {info!r} names no account") from None
        if not self._system and asker != self._account:
            raise QueryError(
                "403",
                f"this SQL service answers account {self._account} only; export $JL.SQL.> "
                "from the system account to serve others",
            )
        return str(asker)

    async def _stream(
        self,
        request: Request,
        query: _Query | DuckQuery,
        acks: _Acks,
        timeout: float | None,
        beat: float | None,
    ) -> None:
        """Send the rows, a chunk at a time; stop Spark's job when the client is gone, the
        query outlives its `Jl-Sql-Timeout`, or the rows pass `max_rows`."""
        try:
            await asyncio.wait_for(self._send(request, query, acks, beat), timeout)
        except TimeoutError:
            await query.cancel("no ack" if query.abandoned else f"past its {TIMEOUT}")
            if not query.abandoned:
                await request.respond_error(
                    "408", f"query cancelled: it ran past its {TIMEOUT} of {timeout:g}s"
                )
        except QueryError as exc:
            if exc.code != "400":  # refused while its rows flowed, not at its plan
                await query.cancel(exc.code)
            await request.respond_error(exc.code, str(exc))
        except asyncio.CancelledError:
            if query.called_off is None:
                await query.cancel("the service stopping")
                raise
            await query.cancel(query.called_off)
        except Exception as exc:  # Spark's execution errors (a file gone, a cast)
            await request.respond_error("500", first_line(exc))
        finally:
            query.close()

    async def _send(
        self, request: Request, query: _Query | DuckQuery, acks: _Acks, beat: float | None
    ) -> None:
        nc = self._nc
        assert nc is not None
        reply = request._msg.reply
        limit = nc.max_payload - 1024  # room for the headers
        # Under the exported prefix, so a client in an importing account reaches it too.
        acked = f"{SUBJECT_PREFIX}.ack.{nc.new_inbox().rsplit('.', 1)[-1]}"
        sub = await nc.subscribe(f"{acked}.*", cb=acks.on_ack)
        beating = None
        if beat is not None:
            said = {HEARTBEAT: f"{beat:g}"}

            async def send_beat() -> None:
                acks.beat_sent(beat)
                await nc.publish(reply, b"", reply=f"{acked}.{_BEAT}", headers=said)

            beating = asyncio.get_running_loop().create_task(_beat(send_beat, beat))
        rows = 0
        sent = 0

        async def send(batch: Sliced, encode: Callable[[Sliced], bytes]) -> None:
            nonlocal rows, sent
            rows += len(batch)
            if rows > self._max_rows:
                raise too_many(self._max_rows)
            for body in chunks(batch, encode, limit):
                try:
                    await acks.room(sent)
                except TimeoutError:
                    query.abandoned = True
                    raise
                await nc.publish(reply, body, reply=f"{acked}.{sent}", headers={CHUNK: str(sent)})
                sent += 1

        try:
            frame = await query.run(query.plan)
            parts = query.results(frame, acks.as_json, self._max_rows)
            while (part := await query.run(next, parts, None)) is not None:
                await send(*part)
            if beating is not None:  # no heartbeat after the end, which the client leaves at
                beating.cancel()
            await nc.publish(reply, b"", headers={ROWS: str(rows)})
        finally:
            if beating is not None:
                beating.cancel()
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


def too_many(max_rows: int) -> QueryError:
    return QueryError(
        "413",
        f"the result has more than {max_rows} rows, the service's "
        "max_rows (lake { sql { max_rows } }): aggregate, or add a LIMIT",
    )


async def _beat(send: Callable[[], Awaitable[None]], every: float) -> None:
    """A heartbeat every `every` seconds until cancelled (the query's end)."""
    while True:
        await asyncio.sleep(every)
        await send()


def _positive(headers: dict[str, str], name: str, default: Any) -> Any:
    """A header's positive number (an int for the window), or `default` when absent."""
    if name not in headers:
        return default
    try:
        value = (int if name == WINDOW else float)(headers[name])
        if value <= 0:
            raise ValueError
        return value
    except ValueError:
        text = f"{name} must be a positive number, not {headers[name]!r}"
        raise QueryError("400", text) from None


class QueryThread:
    """A query of either engine: every step on one thread of its own (an engine's cancel
    reaches what runs there), and how its client's end was told."""

    def __init__(self, thread_name: str) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=thread_name)
        # The step on the thread now: it goes on when the task awaiting it is cancelled.
        self._step: concurrent.futures.Future[Any] | None = None
        self.abandoned = False  # the client stopped answering: nobody to tell
        self.called_off: str | None = None  # why its client ended it: nobody to tell either

    def call_off(self, task: asyncio.Task[None], why: str = "cancelled by its client") -> None:
        if self.called_off is None:
            self.called_off = why
            task.cancel()

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        self._step = self._pool.submit(fn, *args)
        return await asyncio.wrap_future(self._step)

    def stepping(self) -> bool:
        """A step still runs on the query's thread (and may yet start a job)."""
        return self._step is not None and not self._step.done()


class _Query(QueryThread):
    """One query's Spark work, on a thread of its own so its job group can be cancelled.

    Spark's job group is a property of the thread that starts the job, and py4j pins a
    JVM thread to each Python thread: every call of the query (the plan, each partition
    the iterator fetches) runs on this one thread, under one group."""

    def __init__(self, spark: SparkSession, account: str | None, text: str) -> None:
        super().__init__("jetlake-sql")
        self._spark = spark
        self._account = account
        self._text = text
        self.group = f"jetlake-sql-{uuid.uuid4().hex}"

    def plan(self) -> Any:
        from pyspark.errors import AnalysisException, ParseException

        from sql.account_views import bind, told

        self._spark.sparkContext.setJobGroup(self.group, "SQL over NATS", interruptOnCancel=True)
        session = self._spark.newSession()
        bind(session, self._account)
        try:
            return session.sql(self._text)
        except (AnalysisException, ParseException) as exc:
            raise QueryError("400", told(session, exc)) from None

    def results(
        self, frame: DataFrame, as_json: bool, max_rows: int
    ) -> Iterator[tuple[Sliced, Callable[[Sliced], bytes]]]:
        """The result in parts, each with its encoding: a small one whole, in one job (see
        the module doc), a larger one a partition at a time."""
        from pyspark.sql.pandas.types import to_arrow_schema

        cap = min(SMALL_ROWS, max_rows)
        small = _small(frame, cap, as_json)
        if small is not None:
            yield small, encode_json if as_json else encode_table
            return
        if cap == max_rows:
            raise too_many(max_rows)
        schema = to_arrow_schema(frame.schema, timezone="UTC")
        encode = encode_json if as_json else (lambda r: encode_arrow(r, schema))
        it = frame.toLocalIterator(False)
        while batch := _rows(it, _ROWS_PER_CHUNK):
            yield batch, encode

    async def cancel(self, why: str) -> None:
        """Stop the query's Spark jobs, and say so once its thread is idle and none of their
        tasks runs any more (a job is marked cancelled at once; its tasks end when they
        next look). The cancel is repeated until then: a step under way when it came
        (the plan, a collect still submitting) starts its job after it, and a job
        cancelled before it began would run on, holding the executors' cores."""
        sc = self._spark.sparkContext
        deadline = time.monotonic() + _CANCEL_WAIT
        while time.monotonic() < deadline:
            await asyncio.to_thread(sc.cancelJobGroup, self.group)
            if not self.stepping() and not await asyncio.to_thread(self._tasks_running):
                log.info("sql service: query %s stopped (%s): no Spark task left", self.group, why)
                return
            await asyncio.sleep(0.1)
        log.error("sql service: query %s still runs %gs after its cancel", self.group, _CANCEL_WAIT)

    def _tasks_running(self) -> int:
        tracker = self._spark.sparkContext.statusTracker()
        running = 0
        for job in tracker.getJobIdsForGroup(self.group):
            info = tracker.getJobInfo(job)
            for stage in info.stageIds if info is not None else ():
                found = tracker.getStageInfo(stage)
                running += found.numActiveTasks if found is not None else 0
        return running

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


_BEAT = "beat"  # the last token of a heartbeat's reply subject (a chunk's is its index)


class _Acks:
    """Chunks the client answered; `room` waits until fewer than a window are out, and
    fails when none was answered for `wait` seconds (the client is gone). Also the
    client's answers to heartbeats, by which a client is seen gone across an import."""

    def __init__(self, window: int, wait: float, as_json: bool) -> None:
        self.window = window
        self.wait = wait
        self.as_json = as_json
        self.count = 0
        self._moved = asyncio.Event()
        self.on_gone: Callable[[], None] = lambda: None  # the client is gone: stop its query
        self.told_gone = True  # the server's 503s reach us (no import between)
        self._answered: float | None = None  # when the client last answered a heartbeat

    async def on_ack(self, msg: Msg) -> None:
        if (msg.headers or {}).get("Status") == "503":  # the server: no responders
            if self.told_gone:
                self.on_gone()
            return
        if msg.subject.endswith(f".{_BEAT}"):
            self._answered = time.monotonic()
            return
        self.count += 1
        self._moved.set()

    def beat_sent(self, every: float) -> None:
        """Before each heartbeat: a client that answers heartbeats and left the last
        `SILENT_BEATS` unanswered is gone (see the module doc)."""
        if self._answered is not None and time.monotonic() - self._answered > SILENT_BEATS * every:
            self.on_gone()

    async def room(self, sent: int) -> None:
        while sent - self.count >= self.window:
            self._moved.clear()
            await asyncio.wait_for(self._moved.wait(), self.wait)
