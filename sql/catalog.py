"""Every stream's lake tables in a Hive metastore, where engines outside jetlake find them.

    python -m sql.catalog --dir ./metastore --port 9083   # a metastore to try (all interfaces)

A Hive metastore, because it is the one catalog that Spark (any version, no
extra jar: `spark.sql.catalogImplementation=hive`), Trino, Flink and Hive all
speak, and because pyspark already ships its server and client (Hive 2.3 with
Derby): running one costs a set-up no download. Unity Catalog OSS needs a
server of its own (from Maven Central) and a connector jar in every reader's
Spark.

The SQL service syncs the catalog (`HiveCatalog.sync`) whenever it rebuilds
its views (`sql.service.SharedViews`). A table is registered as an external
Delta table (`spark.sql.sources.provider=delta`, as Spark itself writes one)
at the stream's current table (`StreamRef.table_path`, so a re-created stream
is re-pointed), named as the stream in lower case with characters Hive
refuses turned to `_`. Its comment and `jetlake.*` parameters say the
stream, subject filter and format (`log.compactor.describe`); the same comment
is the Delta table's description, which the compactor writes, so a reader
through Delta's own catalog (which describes a Delta table from its log) sees
it too. A table of a stream that is gone is dropped (its files stay).
A catalog table is the lake alone: it lags the stream by the compactor's
interval, where jetlake's own views add the live tail.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from log.compactor.describe import table_texts
from log.compactor.layout import LakeError, StreamRef, lake_seq, qualified, streams
from log.compactor.location import Lake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("jetlake.sql")

DEFAULT_DATABASE = "jetlake"
SYNC_EVERY = 10.0  # seconds between the service's checks for a change to register
OWNER = "jetlake"
STREAM_PARAM = "jetlake.stream"  # marks a table as jetlake's: only those are re-pointed or dropped
_NOT_HIVE = re.compile(r"[^a-z0-9_]")


def hive_name(name: str) -> str:
    """A stream or table name as Hive accepts one (`[a-z0-9_]`; Hive lower-cases anyway)."""
    return _NOT_HIVE.sub("_", name.lower())


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One lake table as the metastore holds it."""

    name: str
    location: str
    comment: str
    params: dict[str, str] = field(default_factory=dict)


def catalog_entries(store_dir: Path, lake: Lake) -> list[CatalogEntry]:
    """A table per stream with rows in the lake, of every account (a named account's
    named `<account>_<stream>`); a typed stream's fan-out tables too.

    A stream the lake has no commit of yet has no Delta log to read and waits
    for the next sync; two streams whose Hive names meet keep the first's.
    """
    out: dict[str, CatalogEntry] = {}
    try:
        found = list(streams(store_dir, None))
    except LakeError as exc:
        log.error("catalog: %s", exc)
        return []
    for stream in found:
        if not stream.lake_on or lake_seq(stream, lake) == 0:
            continue
        for entry in _stream_entries(stream, lake):
            kept = out.setdefault(entry.name, entry)
            if kept is not entry:
                log.warning(
                    "catalog: stream %s's table %s has the name of stream %s's; not registered",
                    stream.qualified,
                    entry.name,
                    kept.params[STREAM_PARAM],
                )
    return list(out.values())


def _stream_entries(stream: StreamRef, lake: Lake) -> list[CatalogEntry]:
    common = {STREAM_PARAM: stream.qualified, "jetlake.created": stream.created}
    out = []
    for text in table_texts(stream):
        where = stream.typed_table_path(lake, text.table).spark
        params = {**common, "jetlake.table": text.table, "jetlake.format": text.format}
        params["jetlake.subjects"] = text.subjects
        name = hive_name(qualified(stream.account, text.table))
        out.append(CatalogEntry(name, _uri(where), text.comment, params))
    return out


def _uri(location: str) -> str:
    return location if "://" in location else Path(location).absolute().as_uri()


class HiveCatalog:
    """The metastore's Thrift client inside a (classic) Spark session's JVM, which ships it."""

    def __init__(self, spark: SparkSession, uri: str, database: str = DEFAULT_DATABASE) -> None:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        self._jvm = jvm
        self._api: Any = jvm.org.apache.hadoop.hive.metastore.api
        self.uri = uri
        self.database = database

    def sync(self, entries: Iterable[CatalogEntry]) -> None:
        """Create, re-point or drop jetlake's tables so they are exactly `entries`."""
        conf = self._jvm.org.apache.hadoop.hive.conf.HiveConf()
        conf.set("hive.metastore.uris", self.uri)
        client = self._jvm.org.apache.hadoop.hive.metastore.HiveMetaStoreClient(conf)
        try:
            self._sync(client, {entry.name: entry for entry in entries})
        finally:
            client.close()

    def _sync(self, client: Any, wanted: dict[str, CatalogEntry]) -> None:
        if self.database not in list(client.getAllDatabases()):
            note = "jetlake's streams: each stream's lake table (external Delta)"
            client.createDatabase(self._api.Database(self.database, note, None, self._map({})))
        for name in list(client.getAllTables(self.database)):
            if name in wanted:
                continue
            table = client.getTable(self.database, name)
            if table.getParameters().containsKey(STREAM_PARAM):
                client.dropTable(self.database, name, False, True)  # files stay: external
        for name, entry in wanted.items():
            table = self._table(entry)
            if client.tableExists(self.database, name):
                client.alter_table(self.database, name, table)
            else:
                client.createTable(table)

    def _table(self, entry: CatalogEntry) -> Any:
        """The table as Spark writes a data source table Hive cannot read itself: a
        placeholder column, the path in the SerDe's parameters, the provider in the table's."""
        api, jvm = self._api, self._jvm
        serde = api.SerDeInfo()
        serde.setSerializationLib("org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe")
        serde.setParameters(self._map({"path": entry.location, "serialization.format": "1"}))
        cols = jvm.java.util.ArrayList()
        cols.add(api.FieldSchema("col", "array<string>", "from deserializer"))
        sd = api.StorageDescriptor()
        sd.setCols(cols)
        sd.setLocation(entry.location)
        sd.setInputFormat("org.apache.hadoop.mapred.SequenceFileInputFormat")
        sd.setOutputFormat("org.apache.hadoop.hive.ql.io.HiveSequenceFileOutputFormat")
        sd.setSerdeInfo(serde)
        sd.setNumBuckets(-1)
        sd.setBucketCols(jvm.java.util.ArrayList())
        sd.setSortCols(jvm.java.util.ArrayList())
        params = {
            **entry.params,
            "EXTERNAL": "TRUE",
            "comment": entry.comment,
            "spark.sql.sources.provider": "delta",
        }
        table = api.Table()
        table.setDbName(self.database)
        table.setTableName(entry.name)
        table.setOwner(OWNER)
        table.setTableType("EXTERNAL_TABLE")
        table.setCreateTime(int(time.time()))
        table.setSd(sd)
        table.setPartitionKeys(jvm.java.util.ArrayList())
        table.setParameters(self._map(params))
        return table

    def _map(self, values: dict[str, str]) -> Any:
        out = self._jvm.java.util.HashMap()
        for key, value in values.items():
            out.put(key, value)
        return out


async def keep_synced(refresh: Callable[[], None], stop: asyncio.Event) -> None:
    """Run the views' refresh (which syncs the catalog when anything changed) every
    `SYNC_EVERY` seconds until `stop`: a table's readers elsewhere never ask jetlake."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SYNC_EVERY)
        if not stop.is_set():
            await asyncio.to_thread(refresh)


def metastore_command(folder: Path, port: int) -> list[str]:
    """A standalone Hive metastore on `port` with its Derby database in `folder`, run from
    the jars pyspark ships (Hive 2.3): a catalog to try jetlake's with, not one to run a
    business on (Derby takes one process; point Hive at MySQL or Postgres for that)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    log4j = Path(__file__).parent.parent / "log" / "compactor" / "log4j2.properties"
    folder = folder.absolute()
    conf = {
        "hive.async.log.enabled": "false",  # its async logger's jar is not in pyspark
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={folder / 'db'};create=true",
        "datanucleus.schema.autoCreateAll": "true",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": str(folder / "warehouse"),
    }
    argv = ["java", "-Xmx256m", f"-Dlog4j2.configurationFile={log4j}"]
    argv += [f"-Dderby.stream.error.file={folder / 'derby.log'}", "-cp", f"{jars}/*"]
    argv += ["org.apache.hadoop.hive.metastore.HiveMetaStore", "-p", str(port)]
    for key, value in conf.items():
        argv += ["--hiveconf", f"{key}={value}"]
    return argv


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sql.catalog", description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True, type=Path, help="folder for its Derby database")
    p.add_argument("--port", type=int, default=9083, help="Thrift port (default: 9083)")
    args = p.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    os.execvp("java", metastore_command(args.dir, args.port))
    return 0  # not reached: exec replaced the process


if __name__ == "__main__":
    sys.exit(main())
