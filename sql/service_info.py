"""What a client needs to find the SQL service and report its answers, without Spark.

`jetlake sql` imports this rather than `sql.service`, whose imports (Spark's
session builder, the catalog, the compactor's typing) cost a new process more
than the query it asks.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

SERVICE_FILE = "jetlake-sql.json"


def split_hostport(value: str, what: str) -> tuple[str, int]:
    """`host:port` (IPv6 in brackets); a clear error naming `what` otherwise."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{what}: {value!r} is not host:port")
    return host.strip("[]"), int(port)


def first_line(exc: BaseException) -> str:
    """Spark's message without the JVM stack trace and plan it may append."""
    text = str(exc).split("\n\nJVM stacktrace:", 1)[0]
    return text.split(";\n", 1)[0].strip()


def quiet_query_errors() -> None:
    """PySpark logs each failed query's error with its JVM stack; the caller reports it."""
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)


@dataclass(frozen=True, slots=True)
class Endpoints:
    """What `<store>/jetlake-sql.json` records: the doors, and the process to check is alive."""

    pid: int
    connect: str  # sc://host:port
    jdbc: str | None = None  # jdbc:hive2://host:port
    nats: str | None = None  # the server the `$JL.SQL` service answers on

    def write(self, store_dir: Path) -> None:
        tmp = store_dir / f".{SERVICE_FILE}.tmp"
        tmp.write_text(json.dumps(asdict(self)))
        tmp.replace(store_dir / SERVICE_FILE)

    @classmethod
    def read(cls, store_dir: Path) -> Endpoints | None:
        try:
            return cls(**json.loads((store_dir / SERVICE_FILE).read_text()))
        except (OSError, ValueError, TypeError):
            return None
