"""The SQL service's walls at JDBC (beeline, as a BI tool connects): an account's own
streams, NATS logins, listings and `max_rows`. The server and its service: `tests.sql.walls`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.sql.walls import (
    MAX_ROWS,
    TIMEOUT,
    Walled,
    publish_stream,
    query_as,
)

pytestmark = TIMEOUT


async def _beeline(script: str) -> subprocess.CompletedProcess:
    """One beeline runs `script`, every statement whatever the ones before did: `!connect
    <url> <user> <password>` logs in anew. Its class is run on one JVM, not through pyspark's
    `bin/beeline`, whose launcher starts a JVM first to build the command of the second."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    java = Path(os.environ["JAVA_HOME"]) / "bin" / "java" if "JAVA_HOME" in os.environ else "java"
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as file:
        file.write(script)
        file.flush()
        argv = [str(java), "-cp", f"{jars}/*", "org.apache.hive.beeline.BeeLine"]
        argv += ["--silent=true", "--outputformat=csv2", "--force=true", "-f", file.name]
        return await asyncio.to_thread(
            subprocess.run, argv, capture_output=True, text=True, timeout=180
        )


async def test_jdbc_is_walled_bounded_and_answers_a_bi_tools_connect(walled: Walled) -> None:
    """The JDBC door in the default run, one beeline JVM: an account's own stream, another's
    refused with no word of its columns, a BI tool's calls on connect, a result of ~80 GB
    stopped at max_rows without being gathered, and the system account's login."""
    await publish_stream(walled.url("a"), "JOWN", 3)
    await publish_stream(walled.url("b"), "JOTHER", 2)
    url = walled.jdbc
    done = await _beeline(
        f"!connect {url} a a\n"
        "SELECT count(*) AS own FROM JOWN;\n"
        "SELECT nosuch FROM global_temp.`b.jother`;\n"  # a column of B's view, as a probe
        "SELECT nosuch FROM JOWN;\n"
        "SHOW CATALOGS;\n"
        "SHOW FUNCTIONS LIKE 'ab*';\n"
        "!tables\n"
        # 10^10 rows: gathered before a fetch, this would never answer (nor fit the heap).
        "SELECT id AS huge FROM range(0, 10000000000, 1, 10000);\n"
        "SELECT count(*) AS still FROM JOWN;\n"
        f"!connect {url} sys sys\n"
        "SELECT count(*) AS other FROM B.JOTHER;\n"
    )
    out, err = done.stdout, done.stderr
    assert "own\n3\n" in out and "still\n3\n" in out and "other\n2\n" in out, out + err
    assert "catalog\nspark_catalog\n" in out and "function\nabs\n" in out, out + err
    a_sees = out.split("other\n2\n")[0]
    assert ",global_temp,a.jown,VIEW" in a_sees and "jother" not in a_sees.lower(), out
    errors = err.split("Error: ")
    [probe] = [e for e in errors if "jother" in e.lower()]
    assert "`global_temp`.`b.jother` cannot be found" in probe, err
    assert "B.JOTHER" not in probe and "`seq`" not in probe, probe  # no plan, no columns
    [own] = [e for e in errors if "Did you mean" in e]  # A's own: Spark's suggestions stay
    assert "`seq`" in own, err
    assert f"more than {MAX_ROWS} rows" in err and "max_rows" in err, err
    assert f"\n{MAX_ROWS * 2}\n" not in out, "rows past max_rows reached the client"


@pytest.mark.soak  # beeline is a JVM of its own: 12-40 s
async def test_jdbc_logs_in_with_nats_credentials_and_is_walled(walled: Walled) -> None:
    await publish_stream(walled.url("a"), "JMINE", 3)
    await publish_stream(walled.url("b"), "JTHEIRS", 2)
    files = await query_as(
        walled.url("sys"), "SELECT DISTINCT input_file_name() AS f FROM B.JTHEIRS"
    )
    [theirs] = files.table().column("f").to_pylist()
    url = walled.jdbc
    done = await _beeline(
        f"!connect {url} a a\n"
        "SELECT count(*) AS mine FROM JMINE;\n"
        "SELECT * FROM JTHEIRS;\n"  # by name
        "SELECT * FROM global_temp.`B.JTHEIRS`;\n"  # by a view
        f"SELECT * FROM parquet.`{theirs}`;\n"  # by path
        "!tables\n"  # JDBC's getTables, as BI tools browse
        "!columns b.jtheirs\n"
        "SHOW TABLES IN global_temp;\n"
        f"SELECT id AS past_max_rows FROM range({MAX_ROWS * 4});\n"
        "SELECT count(*) AS still FROM JMINE;\n"  # the door goes on
        f"!connect {url} sys sys\n"  # the system account: every account's streams
        "SELECT count(*) AS theirs FROM B.JTHEIRS;\n"
        "!tables\n"
        "!closeall\n"  # so the last statement has only the refused login to run on
        f"!connect {url} a wrong\n"
        "SELECT 1 AS leaked;\n"
    )
    out, err = done.stdout, done.stderr
    assert "mine\n3\n" in out and "theirs\n2\n" in out and "still\n3\n" in out, out + err
    assert "NullPointerException" not in err and "ConcurrentModification" not in err, err
    assert "`JTHEIRS` cannot be found" in err, err
    assert "`b.jtheirs` cannot be found" in err.lower(), err
    a_sees, sys_sees = out.split("theirs\n2\n")
    assert ",global_temp,a.jmine,VIEW" in a_sees and "global_temp,a.jmine,true" in a_sees, out + err
    assert "b.jtheirs" not in a_sees, out  # in no listing: tables, columns, SHOW TABLES
    assert ",global_temp,b.jtheirs,VIEW" in sys_sees, out
    assert f"more than {MAX_ROWS} rows" in err and "max_rows" in err, err
    assert f"\n{MAX_ROWS * 2}\n" not in out, "rows past max_rows reached the client"
    assert "it is no stream of the account" in err, err
    assert "Error validating the login" in err and "leaked" not in out, out + err
