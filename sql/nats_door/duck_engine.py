"""The DuckDB engine behind SQL over NATS: a request with `Jl-Sql-Engine: duckdb`.

Spark's floor is tens of milliseconds for `SELECT 1` (a plan, a job, py4j); DuckDB
answers an aggregate over a million lake rows in a few. The door, its chunks, flow
control, cancel, timeout, max_rows and error headers are `sql.nats_door.service`'s; only
the engine differs, and the query is in DuckDB's dialect.

Each query gets a connection of its own, with external access off and its
configuration locked before the query runs, so SQL can neither read a file nor a
URL (`read_parquet('/…')`, `ATTACH`) nor turn that back on. Into it go the views of
the streams the query names (DuckDB tells which), built as `jetlake inspect`
builds them (`sql.duck_views`): the lake up to L, then the live tail after L, cut
by `sql.union`, so a row acknowledged before the query started is in its result.

Accounts are walls: only the asking account's stream folders are read, named by
their bare names; the system account (`account` None) sees every account's
streams, a named account's under a schema of that name (`A.ORDERS`), as Spark's
views name them. Another account's stream is thus not in the connection at all.

What stays warm: the Arrow dataset of an unchanged table version
(`sql.lake_snapshot.lake_dataset`); the tail is read again at each query, which
the exact union needs. The query runs on a thread of its own, never on the
server's event loop, and a cancel interrupts it (`DuckDBPyConnection.interrupt`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pyarrow as pa

from log.compactor.layout import GLOBAL, LakeError, StreamRef, stream_dirs
from log.compactor.location import Lake
from sql.current import ServerCopies
from sql.duck_views import register, stream_views, view_names
from sql.nats_door.encoding import encode_json_table, encode_table
from sql.nats_door.service import QueryError, QueryThread
from sql.service_info import first_line
from sql.union import read_live

CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "python_enable_replacements": False,  # no name resolves to a Python object of ours
}
BATCH_ROWS = 10_000  # rows DuckDB hands over at a time; `chunks` splits them to max_payload


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _streams(store: Path, account: str | None) -> list[tuple[str | None, StreamRef]]:
    """(schema, stream) of each stream the account may read."""
    out = []
    for folder in stream_dirs(store, account):
        try:
            ref = StreamRef.load(folder)
        except LakeError:
            continue
        out.append((None if account is not None or ref.account == GLOBAL else ref.account, ref))
    return out


QUERIES = (duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN)


class DuckEngine:
    """DuckDB over one store's streams, kept warm between queries.

    Opening a DuckDB database costs tens of milliseconds (up to 150 at a load of 5), a
    cursor of an open one nothing: an account's query runs in a cursor of one database
    opened once, its views temporary (the cursor's alone), so concurrent queries of
    several accounts share nothing but the engine. The system account's views live in
    one schema per account (temporary objects have no schemas), so its queries each
    open a database of their own. Only queries run (SELECT, EXPLAIN): nothing a query
    does outlives it or reaches another's cursor."""

    def __init__(self, store: Path, lake: Lake, copies: ServerCopies | None = None) -> None:
        self.store = store
        self.lake = lake
        self._copies = copies or ServerCopies()
        self._base: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.Lock()

    def _warm(self) -> duckdb.DuckDBPyConnection:
        with self._lock:
            if self._base is None:
                base = duckdb.connect(config=CONFIG)
                base.execute("SET lock_configuration = true")
                self._base = base
            return self._base

    def connection(self, account: str | None, text: str) -> duckdb.DuckDBPyConnection:
        """A locked connection holding the views of the streams `text` names, for `account`
        (None: every account's); duckdb.Error for a statement that is not one query."""
        con = duckdb.connect(config=CONFIG) if account is None else self._warm().cursor()
        try:
            # On `con`, locked: DuckDB's module-level parser binds table functions on a
            # default connection, whose file access would tell which paths exist.
            statements = con.extract_statements(text)
            if len(statements) != 1 or statements[0].type not in QUERIES:
                raise duckdb.InvalidInputException("the DuckDB engine answers one SELECT query")
            wanted = {t.casefold() for t in con.get_table_names(text)}
            named = [
                (schema, ref)
                for schema, ref in _streams(self.store, account)
                if any(v.casefold() in wanted for v in view_names(ref.name, ref.dir, ref))
            ]
            # Before their files are read: the server's copies of them shown current.
            self._copies.wait([(ref.account, ref.name) for _, ref in named])
            index = 0
            for schema, ref in named:
                if schema is not None:
                    con.execute(f"CREATE SCHEMA IF NOT EXISTS {_quoted(schema)}")
                for view, parts in stream_views(ref.name, ref.dir, self.lake, read_live).items():
                    if account is not None:
                        register(con, index, view, parts, temp=True)
                    else:
                        internal = f"_jetlake_view_{index}"
                        register(con, index, internal, parts)
                        where = (
                            _quoted(view)
                            if schema is None
                            else f"{_quoted(schema)}.{_quoted(view)}"
                        )
                        con.execute(f"CREATE VIEW {where} AS SELECT * FROM {internal}")
                    index += 1
            if account is None:
                con.execute("SET lock_configuration = true")
        except BaseException:
            con.close()
            raise
        return con


class DuckQuery(QueryThread):
    """One query on DuckDB, shaped as `sql.nats_door.service`'s Spark query: `plan` then `results`,
    every step on one thread of its own, `cancel` interrupting it."""

    def __init__(self, engine: DuckEngine, account: str | None, text: str) -> None:
        super().__init__("jetlake-duck")
        self._engine = engine
        self._account = account
        self._text = text
        self._con: duckdb.DuckDBPyConnection | None = None

    def plan(self) -> pa.RecordBatchReader:
        try:
            self._con = self._engine.connection(self._account, self._text)
            found = self._con.sql(self._text)
            if found is None:  # a statement with no result (a SET): no rows
                return pa.RecordBatchReader.from_batches(pa.schema([]), [])
            return found.to_arrow_reader(BATCH_ROWS)
        except duckdb.Error as exc:  # syntax, an unknown table, a file it may not read
            raise QueryError("400", first_line(exc)) from None

    def results(
        self, reader: pa.RecordBatchReader, as_json: bool, max_rows: int
    ) -> Iterator[tuple[pa.Table, Callable[[pa.Table], bytes]]]:
        """The result a batch at a time (one, for a small result); `max_rows` is the door's."""
        encode = encode_json_table if as_json else encode_table
        for batch in reader:
            if batch.num_rows:
                yield pa.Table.from_batches([batch]), encode

    async def cancel(self, why: str) -> None:
        if self._con is not None:
            self._con.interrupt()

    def close(self) -> None:
        """Interrupt what still runs and close the connection on the query's own thread,
        after it: a connection is not closed under a running query."""
        con = self._con
        if con is not None:
            con.interrupt()
            self._pool.submit(con.close)
        self._pool.shutdown(wait=False)
