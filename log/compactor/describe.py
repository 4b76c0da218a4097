"""What a stream's lake tables say about themselves: stream, subject filter and format.

One text per table, written in two places that readers look in: the Delta
log's table description (`metaData.description`, which every Delta reader
shows as the table's comment: Spark's `DESCRIBE TABLE EXTENDED` through
Delta's catalog, `DESCRIBE DETAIL`, delta-rs, Trino), and the Hive
metastore's entry (`sql.catalog`), for engines that read only that.

The description is the compactor's to write, as the rest of the log is: a
metadata-only commit (delta-rs `set_table_description`) after an append, when
the text differs from what the table says, so it follows the stream's subjects
and format from its next append on. It records no transaction version and
claims no row, so it cannot disturb the conditional appends around it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from log.compactor.layout import META_FILE, REPLICA_FILE, LakeError, StreamRef
from log.compactor.location import Lake, LakePath
from log.compactor.typed.spec import SpecError, lake_spec
from log.state_file import StateFileError, read_state

log = logging.getLogger("jetlake.lake")


@dataclass(frozen=True, slots=True)
class TableText:
    """One of a stream's tables (its own or a fan-out table) and what it says of itself."""

    table: str  # the table's name: the stream's own is named as the stream
    subjects: str  # the subject filter whose messages it holds, comma-separated
    format: str
    comment: str


def table_texts(stream: StreamRef) -> list[TableText]:
    """The stream's own table and each fan-out table (rejects tables have none of their
    own to say); [] when its metadata is one the lake cannot follow."""
    try:
        spec = lake_spec(stream.name, stream.metadata)
    except SpecError as exc:
        log.warning("%s", exc)
        return []
    subjects = ",".join(subject_filter(stream))
    out = []
    for table, where in [(spec.main, subjects), *((t, p) for p, t in spec.routes)]:
        what = "stream" if table.name == stream.name else f"table {table.name} of stream"
        text = f"jetlake {what} {stream.qualified}: subjects {where}, format {table.format}"
        out.append(TableText(table.name, where, table.format, text))
    return out


def subject_filter(stream: StreamRef) -> list[str]:
    """The stream's subjects (its name alone when it has none, as the server takes it)."""
    for file in (META_FILE, REPLICA_FILE):
        try:
            return list(read_state(stream.dir / file)["config"].get("subjects") or [stream.name])
        except (OSError, StateFileError, KeyError, TypeError):
            continue
    return [stream.name]


def describe(table: LakePath, text: str) -> bool:
    """Make the table's Delta description `text`; True when a commit was needed."""
    from deltalake.exceptions import DeltaError

    from log.compactor.tables import open_table

    try:
        opened = open_table(table)
        if opened.metadata().description == text:
            return False
        opened.alter.set_table_description(text)
    except (DeltaError, OSError) as exc:
        raise LakeError(f"table {table}: description not written: {exc}") from exc
    return True


def describe_stream(stream: StreamRef, lake: Lake, known: dict[str, str]) -> None:
    """Describe each of the stream's tables that exists, unless `known` (table -> text the
    caller last wrote or saw there) already holds its text; a failure is logged, not
    raised: the rows are in, only the comment waits for the next append."""
    for text in table_texts(stream):
        path = stream.typed_table_path(lake, text.table)
        if known.get(str(path)) == text.comment or not path.is_delta_table():
            continue
        try:
            describe(path, text.comment)
        except LakeError as exc:
            log.warning("stream %s: %s", stream.qualified, exc)
            continue
        known[str(path)] = text.comment
