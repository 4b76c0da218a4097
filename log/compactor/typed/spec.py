"""What a stream's metadata asks of its lake tables: payload format, schema, raw kept, fan-out.

Keys (any client's stream `metadata`, all optional):
- `jetlake.lake.format: json | avro | protobuf | raw` (raw, the default, is the
  untyped table of before: only the envelope and `data`);
- `jetlake.lake.schema: <name>`: the schema (a key of the `jetlake_schemas` KV
  bucket) typing the stream's own table; `json` without one infers;
- `jetlake.lake.keep_raw: true | false` (default true): whether typed rows
  keep their payload bytes in `data`. Kept by default because the payload is
  the record of truth and the typed columns a projection of it: a decode can
  lose what the schema does not name (unknown Protobuf fields, JSON number
  precision), and re-typing history after a schema fix needs the bytes.
  Rejects always keep them;
- `jetlake.lake.tables: <pattern>=<table>, ...`: fan-out, each subject pattern
  to a table of its own; the first matching pattern wins and a subject no
  pattern matches stays in the stream's table. Table `t` is typed with
  `jetlake.lake.schema.t` if set, else (json) inferred, else (avro, protobuf)
  the schema named `t`.

Pure: no IO. Bad metadata is a `SpecError` naming the stream and the key, so
the compactor reports it instead of guessing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ingest.parser.subjects import is_valid_subject, subject_matches

FORMAT = "jetlake.lake.format"
SCHEMA = "jetlake.lake.schema"
KEEP_RAW = "jetlake.lake.keep_raw"
TABLES = "jetlake.lake.tables"
FORMATS = ("raw", "json", "avro", "protobuf")
REJECTS_SUFFIX = "_rejects"
_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SpecError(ValueError):
    """Stream metadata the lake cannot follow; the message names the stream and key."""


@dataclass(frozen=True, slots=True)
class TableSpec:
    """One typed table of a stream: its name, format and declared schema (None: infer)."""

    name: str
    format: str
    schema: str | None
    keep_raw: bool

    @property
    def typed(self) -> bool:
        return self.format != "raw"

    @property
    def rejects(self) -> str:
        return self.name + REJECTS_SUFFIX


@dataclass(frozen=True, slots=True)
class LakeSpec:
    """The stream's own table (`main`, named as the stream) and its fan-out tables by pattern."""

    main: TableSpec
    routes: tuple[tuple[str, TableSpec], ...] = ()

    @property
    def typed(self) -> bool:
        return self.main.typed

    @property
    def tables(self) -> tuple[TableSpec, ...]:
        return (self.main, *(spec for _, spec in self.routes))

    def route(self, subject: str) -> TableSpec:
        for pattern, spec in self.routes:
            if subject_matches(pattern, subject):
                return spec
        return self.main


def _flag(stream: str, key: str, value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in ("true", "yes", "on", "1"):
        return True
    if lowered in ("false", "no", "off", "0"):
        return False
    raise SpecError(f"stream {stream}: metadata {key}: {value!r} is not true or false")


def lake_spec(stream: str, metadata: Mapping[str, str]) -> LakeSpec:
    """The stream's tables as its metadata declares them (raw when it declares nothing)."""
    fmt = (metadata.get(FORMAT) or "raw").strip().lower()
    if fmt not in FORMATS:
        raise SpecError(
            f"stream {stream}: metadata {FORMAT}: {metadata.get(FORMAT)!r} is not one of "
            + ", ".join(FORMATS)
        )
    keep_raw = _flag(stream, KEEP_RAW, metadata.get(KEEP_RAW), True)
    main = TableSpec(stream, fmt, metadata.get(SCHEMA) or None, keep_raw)
    routes: list[tuple[str, TableSpec]] = []
    declared = (metadata.get(TABLES) or "").strip()
    if declared and fmt == "raw":
        raise SpecError(f"stream {stream}: metadata {TABLES} needs {FORMAT} json, avro or protobuf")
    names = {stream.lower()}
    for item in filter(None, (part.strip() for part in declared.split(","))):
        pattern, eq, table = (s.strip() for s in item.partition("="))
        if not eq or not is_valid_subject(pattern) or not _TABLE_NAME.match(table):
            raise SpecError(
                f"stream {stream}: metadata {TABLES}: {item!r} is not <subject pattern>=<table>"
            )
        if table.lower() in names or table.lower().endswith(REJECTS_SUFFIX):
            raise SpecError(f"stream {stream}: metadata {TABLES}: table name {table!r} is taken")
        names.add(table.lower())
        schema = metadata.get(f"{SCHEMA}.{table}") or (None if fmt == "json" else table)
        routes.append((pattern, TableSpec(table, fmt, schema, keep_raw)))
    if fmt in ("avro", "protobuf") and main.schema is None and not routes:
        raise SpecError(f"stream {stream}: {FORMAT} {fmt} needs {SCHEMA}")
    return LakeSpec(main, tuple(routes))
