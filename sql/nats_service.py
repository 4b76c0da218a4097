"""SQL over NATS: a `$JL.SQL` micro service that answers a query with its result, in chunks.

Any NATS client in any language can ask, with no Spark or JDBC client:

    request  $JL.SQL.query   body: the SQL text
             headers (optional): Jl-Sql-Format: arrow (default) | json
                                 Jl-Sql-Window: chunks in flight before an ack (default 8)
    replies  to the request's inbox, in order:
             chunk messages, each with a reply subject: the body is an Arrow IPC stream
             (schema + record batches, readable alone) or JSON lines, under the server's
             max_payload; header Jl-Sql-Chunk: its index from 0
             then an empty message with Jl-Sql-Rows: the row count (the end)
             or, instead, an error: Nats-Service-Error / Nats-Service-Error-Code

Flow control: the client answers each chunk (an empty publish to the chunk's
reply subject); the service keeps at most a window of unanswered chunks out
and stops when none is answered for `ACK_WAIT` seconds (a client gone), so a
result never sits whole in the service: Spark hands it over a partition at a
time (`toLocalIterator`) and each chunk is built, sent and dropped.

The service is a NATS micro service (`nats micro ls` lists it, `$SRV.PING`,
`INFO` and `STATS` answer), queue-grouped, so several SQL services can share
the load. Queries run in a session of their own over the shared views
(`sql.service`), so they see what every other door sees.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import decimal
import io
import itertools
import json
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sql.service import first_line

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.micro.request import Request
    from nats.micro.service import Service
    from pyspark.sql import Row, SparkSession

log = logging.getLogger("jetlake.sql")

SERVICE = "jetlake-sql"
SUBJECT_PREFIX = "$JL.SQL"
FORMAT = "Jl-Sql-Format"
WINDOW = "Jl-Sql-Window"
CHUNK = "Jl-Sql-Chunk"
ROWS = "Jl-Sql-Rows"
DEFAULT_WINDOW = 8
ACK_WAIT = 30.0  # seconds without an ack before the client is taken for gone
_ROWS_PER_CHUNK = 2000  # a first guess, halved while a chunk exceeds max_payload


class QueryError(Exception):
    """A query refused before any chunk went out: the service error's code and text."""

    def __init__(self, code: str, text: str) -> None:
        super().__init__(text)
        self.code = code


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return base64.b64encode(value).decode()
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return value


def encode_json(rows: list[Row]) -> bytes:
    """JSON lines: binary as UTF-8 text when it is, else base64; times in ISO 8601."""
    return b"".join(
        json.dumps({k: _json_value(v) for k, v in row.asDict(recursive=True).items()}).encode()
        + b"\n"
        for row in rows
    )


def encode_arrow(rows: list[Row], schema: pa.Schema) -> bytes:
    """One self-contained Arrow IPC stream: the schema and a record batch of `rows`, built a
    column at a time (Spark's rows are tuples in the schema's order)."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    arrays = [
        pa.array(column, type=field.type) for column, field in zip(columns, schema, strict=True)
    ]
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def chunks(rows: list[Row], encode: Callable[[list[Row]], bytes], limit: int) -> Iterator[bytes]:
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


def _rows(it: Iterator[Row], n: int) -> list[Row]:
    return list(itertools.islice(it, n))


class NatsSql:
    """The `$JL.SQL` service of one SQL service process, on one NATS server."""

    def __init__(self, spark: SparkSession, url: str, *, creds: str | None = None) -> None:
        self._spark = spark
        self._url = url
        self._creds = creds
        self._nc: Client | None = None
        self._service: Service | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        import nats
        from nats.micro import add_service

        async def disconnected() -> None:
            log.info("sql service: disconnected from %s; reconnecting", self._url)

        self._nc = await nats.connect(
            self._url,
            name="jetlake sql service",
            user_credentials=self._creds,
            max_reconnect_attempts=-1,
            disconnected_cb=disconnected,
        )
        self._service = await add_service(
            self._nc,
            name=SERVICE,
            version="1.0.0",
            description="SQL over every stream's history (Spark): Arrow IPC or JSON rows",
        )
        group = self._service.add_group(name=SUBJECT_PREFIX)
        await group.add_endpoint(name="query", handler=self._handle)
        log.info("sql service: answering %s.query on %s", SUBJECT_PREFIX, self._url)

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
        """Plan the query here (a bad one fails as a service error the stats count), then
        stream its rows from a task of their own so other requests go on meanwhile."""
        from nats.micro.request import ServiceError

        if not request._msg.reply:  # a publish, not a request: nowhere to answer
            return
        headers = request.headers or {}
        fmt = headers.get(FORMAT, "arrow").lower()
        try:
            if fmt not in ("arrow", "json"):
                raise QueryError("400", f"{FORMAT} {fmt!r} is neither arrow nor json")
            window = int(headers.get(WINDOW, DEFAULT_WINDOW))
            if window < 1:
                raise ValueError
        except ValueError:
            raise ServiceError("400", f"{WINDOW} must be a positive integer") from None
        except QueryError as exc:
            raise ServiceError(exc.code, str(exc)) from None
        text = request.data.decode(errors="replace").strip()
        if not text:
            raise ServiceError("400", "empty query: the request's body is the SQL text")
        try:
            frame = await asyncio.to_thread(self._plan, text)
        except QueryError as exc:
            raise ServiceError(exc.code, str(exc)) from None
        task = asyncio.get_running_loop().create_task(
            self._stream(request, frame, fmt == "json", window)
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _plan(self, text: str) -> Any:
        from pyspark.errors import AnalysisException, ParseException

        try:
            return self._spark.newSession().sql(text)
        except (AnalysisException, ParseException) as exc:
            raise QueryError("400", first_line(exc)) from None

    async def _stream(self, request: Request, frame: Any, as_json: bool, window: int) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        nc = self._nc
        assert nc is not None
        reply = request._msg.reply
        limit = nc.max_payload - 1024  # room for the headers
        acks = _Acks()
        inbox = nc.new_inbox()
        sub = await nc.subscribe(f"{inbox}.*", cb=acks.on_ack)
        rows = 0
        sent = 0
        try:
            schema = to_arrow_schema(frame.schema, timezone="UTC")
            encode = encode_json if as_json else (lambda r: encode_arrow(r, schema))
            it = await asyncio.to_thread(frame.toLocalIterator, False)
            while True:
                batch = await asyncio.to_thread(_rows, it, _ROWS_PER_CHUNK)
                if not batch:
                    break
                rows += len(batch)
                for body in chunks(batch, encode, limit):
                    await acks.room(sent, window)
                    await nc.publish(
                        reply, body, reply=f"{inbox}.{sent}", headers={CHUNK: str(sent)}
                    )
                    sent += 1
            await nc.publish(reply, b"", headers={ROWS: str(rows)})
        except TimeoutError:
            log.info("sql service: no ack for %gs on %s; query abandoned", ACK_WAIT, reply)
        except QueryError as exc:
            await request.respond_error(exc.code, str(exc))
        except Exception as exc:  # Spark's execution errors (a file gone, a cast)
            await request.respond_error("500", first_line(exc))
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


class _Acks:
    """Chunks the client answered; `room` waits until fewer than a window are out."""

    def __init__(self) -> None:
        self.count = 0
        self._moved = asyncio.Event()

    async def on_ack(self, _msg: Msg) -> None:
        self.count += 1
        self._moved.set()

    async def room(self, sent: int, window: int) -> None:
        while sent - self.count >= window:
            self._moved.clear()
            await asyncio.wait_for(self._moved.wait(), ACK_WAIT)
