"""The SQL service on a server with accounts, shared by the walls' test modules (one per door:
`test_service_walls` for SQL over NATS, `_connect` for Spark Connect, `_jdbc` for JDBC).

One server and one service JVM for the package (`walled`, registered by the package's
conftest), started as `jetlake serve` starts it: the service joins the system account,
which exports `$JL.SQL.>`; accounts A and B import it, as an operator sets it up.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from pyspark.sql import SparkSession

from sql.service import quiet_query_errors
from tests.sql.test_service_e2e import (
    START_DEADLINE,
    _Answer,
    _ask,
    _until,
    _wait_for_service,
    start_with_service,
)
from tests.support.cluster import free_port
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess

TIMEOUT = pytest.mark.timeout(START_DEADLINE + 180)  # each module's
MAX_ROWS = 5000
IMPORT = '{service: {account: SYS, subject: "$JL.SQL.>"}}'
# The system account SYS serving $JL.SQL.> to accounts A and B (users a/a, b/b, sys/sys).
ACCOUNTS = f"""system_account: SYS
accounts {{
  SYS {{ users: [{{user: sys, password: sys}}],
         exports: [{{service: "$JL.SQL.>", response_type: stream}}] }}
  A {{ jetstream: enabled, users: [{{user: a, password: a}}], imports: [{IMPORT}] }}
  B {{ jetstream: enabled, users: [{{user: b, password: b}}], imports: [{IMPORT}] }}
}}
"""


@dataclass
class Walled:
    server: ServerProcess
    store: Path
    connect_port: int
    jdbc: str
    spark: SparkSession  # Spark Connect, logged in as the system account's user

    def url(self, user: str) -> str:
        return f"nats://{user}:{user}@127.0.0.1:{self.server.port}"

    def connect(self, token: str | None) -> str:
        return connect_url(self.connect_port, token)


def connect_url(port: int, token: str | None) -> str:
    """Spark Connect's URL with a NATS login as its bearer token: pyspark sends a token in
    the clear to `localhost` only (elsewhere over TLS, which a proxy in front adds)."""
    login = f";token={token}" if token is not None else ""
    return f"sc://localhost:{port}/{login}"


@pytest.fixture(scope="package")
def walled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walled]:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    quiet_query_errors()
    tmp = tmp_path_factory.mktemp("sql-walls")
    store = tmp / "store"
    port, connect_port, jdbc_port = free_port(), free_port(), free_port()
    conf = f"""
jetstream {{ store_dir: "{store}" }}
lake {{ seal_interval: "200ms", compact_interval: 0,
  sql {{ listen: "127.0.0.1:{connect_port}", jdbc: "127.0.0.1:{jdbc_port}",
         nats: "nats://127.0.0.1:{port}", user: sys, password: sys, max_rows: {MAX_ROWS} }} }}
{ACCOUNTS}"""
    server = start_with_service("-p", str(port), config=conf, tmp_path=tmp)
    try:
        found = _wait_for_service(server, store, url=f"nats://sys:sys@127.0.0.1:{port}")
        assert found.jdbc is not None
        spark = ConnectSession.builder.remote(connect_url(connect_port, "sys:sys")).create()
        yield Walled(server, store, connect_port, found.jdbc, spark)
        spark.stop()
    finally:
        server.stop()


async def publish_stream(url: str, stream: str, n: int) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
        for i in range(n):
            await js.publish(f"{stream.lower()}.x", b"m-%d" % i)
    finally:
        await nc.close()


async def query_as(url: str, sql: str, **headers: str) -> _Answer:
    """The whole answer to one query, asked as a user of `url`'s account."""
    nc = await nats.connect(url)
    try:
        answer = await _ask(nc, sql, headers=headers or None)
        await _until(answer.done, f"the answer to {sql!r}")
        return answer
    finally:
        await nc.close()


def error_of(answer: _Answer) -> tuple[str, str]:
    assert answer.end is not None and answer.end.headers is not None
    headers = answer.end.headers
    assert "Nats-Service-Error-Code" in headers, headers
    return headers["Nats-Service-Error-Code"], headers["Nats-Service-Error"]


def count_of(answer: _Answer) -> int:
    assert answer.end is not None and answer.end.headers == {"Jl-Sql-Rows": "1"}, (
        answer.end and answer.end.headers
    )
    return int(answer.table().column(0)[0].as_py())


ENDLESS = "SELECT count(*) FROM range(0, 1000000000000, 1, 2)"


async def wait_logged(server: ServerProcess, pattern: str, after: int, timeout: float = 90) -> None:
    """Until the log has more than `after` lines matching `pattern` (each test's own)."""
    await poll_async(
        lambda: count_logged(server, pattern) > after, f"{pattern!r} in the log", timeout
    )


def count_logged(server: ServerProcess, pattern: str) -> int:
    return len(re.findall(pattern, server.log_path.read_text(errors="replace")))
