"""A small conditional append without Spark: the freshness path of the compactor.

A Spark append of a few rows spends most of its time outside the rows: a job
to write one small file, and before it Delta's replay of the table's log to
find the app id's transaction version (three jobs; seconds on a loaded
machine, which is why the compactor warms tables between passes). The few
seconds of traffic a seal hands the compactor are better written by delta-rs
(the `deltalake` package): it writes the Parquet file and commits in one call
in this process, and reads the app id's version from the log in milliseconds.

The guarantee is `log.compactor.txn`'s: commit only if the table records
exactly `after` for the app id. The table is opened at its current version V,
the condition checked there, and the commit is made against V, carrying the
new version in a `txn` action. Its commit writes version V+1 only if that
file does not exist yet (an atomic rename on a disk; on S3 a PUT with
`If-None-Match: *`, which the store refuses with 412 once the file is there,
the same condition Spark's commits meet through `ConditionalS3LogStore`); if
another writer got
there, delta-rs checks the commits in between and refuses to retry over one
that recorded a version for the same app id ("Concurrent transaction"), just
as Delta's Spark writer does. Either way the loser raises `LakeMoved` and the
next pass starts from what the table holds; no row lands twice or goes
missing, whichever engine each writer used.

Used for a raw stream's small appends, in a lake on a disk or in a bucket;
typed tables, schema changes and large catch-up appends keep Spark's.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from log.compactor.layout import LakeError
from log.compactor.txn import LakeMoved

DIRECT_ROWS = 50_000  # more than this: Spark's parallel writer is the faster way


def append_direct(
    uri: str,
    rows: pa.Table,
    *,
    app_id: str,
    after: int,
    version: int,
    storage_options: Mapping[str, str] | None = None,
) -> None:
    """Append `rows` to the table at `uri` recording `version` for app_id, if the table
    records `after` for it. Raises LakeMoved when another writer got there first,
    LakeError otherwise (the table missing included: Spark creates it)."""
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError, DeltaError

    options = dict(storage_options or {})
    try:
        table = DeltaTable(uri, storage_options=options)
        found = int(table.transaction_version(app_id) or 0)
        if found != after:
            raise LakeMoved(uri, app_id, after, found)
        write_deltalake(
            table,
            rows,
            mode="append",
            commit_properties=CommitProperties(app_transactions=[Transaction(app_id, version)]),
        )
    except LakeError:
        raise
    except CommitFailedError as exc:
        if "oncurrent" in str(exc):
            raise LakeMoved(uri, app_id, after, None) from exc
        raise LakeError(f"table {uri}: append of {app_id} up to {version} failed: {exc}") from exc
    except (DeltaError, OSError, pa.ArrowException) as exc:
        raise LakeError(f"table {uri}: append of {app_id} up to {version} failed: {exc}") from exc
