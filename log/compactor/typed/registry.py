"""Schemas from the `jetlake_schemas` KV bucket: one key per schema name, every revision a version.

A schema revision is the KV revision of its put (what `nats kv put` prints and
`nats kv get --revision` takes). A message picks its schema:
- `Nats-Schema: orders@7` pins revision 7 of key `orders`;
- `Nats-Schema: orders` is the latest revision of `orders` at the message's time;
- no header: the table's schema (`jetlake.lake.schema`), latest at its time.
"Latest" means latest when the message was stored (the revision's stream
timestamp <= the message's), not when the compactor runs: which revision
types a message must not depend on when a pass happens, or a compactor
restarted after a crash between the typed and the rejects commits could
route a record differently than the commit that already landed.

The registry is read from the bucket's stream files (its live segments, and
its Delta table for revisions the bucket's history limit retired), so the
compactor needs no connection to the server. A deleted or purged key has no
schema from then on.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from log.compactor.location import Lake, LakePath

BUCKET = "jetlake_schemas"
STREAM = f"KV_{BUCKET}"
PREFIX = f"$KV.{BUCKET}."
PIN_HEADER = "Nats-Schema"
_REMOVED = ("DEL", "PURGE")
COLUMNS = ["seq", "ts", "subject", "headers", "data"]


class SchemaMissing(LookupError):
    """No revision of the schema applies to a message; the message says which was asked for."""


@dataclass(frozen=True, slots=True)
class Revision:
    name: str
    rev: int  # the KV revision (the bucket stream's seq)
    ts_ns: int
    text: str | None  # None: the key was deleted

    @property
    def label(self) -> str:
        return f"{self.name}@{self.rev}"


@dataclass(slots=True)
class Registry:
    """Every revision of every schema name, in revision order."""

    revisions: dict[str, list[Revision]] = field(default_factory=dict)

    def add(self, rev: Revision) -> None:
        self.revisions.setdefault(rev.name, []).append(rev)

    def history(self, name: str) -> list[Revision]:
        return self.revisions.get(name, [])

    def resolve(self, name: str, ts_ns: int, pinned: int | None = None) -> Revision:
        """The revision typing a message stored at ts_ns (SchemaMissing when there is none)."""
        revs = self.revisions.get(name, [])
        if pinned is not None:
            for rev in revs:
                if rev.rev == pinned and rev.text is not None:
                    return rev
            raise SchemaMissing(f"schema {name}@{pinned} is not in bucket {BUCKET}")
        at = bisect.bisect_right([r.ts_ns for r in revs], ts_ns)
        if not at or revs[at - 1].text is None:
            raise SchemaMissing(f"no schema {name} in bucket {BUCKET} when the message was stored")
        return revs[at - 1]


def parse_pin(value: str) -> tuple[str, int | None]:
    """`orders@7` -> ("orders", 7); `orders` -> ("orders", None); ValueError when malformed."""
    name, at, rev = value.strip().partition("@")
    if not name or (at and not rev.isdigit()):
        raise ValueError(f"{PIN_HEADER}: {value!r} is not <name> or <name>@<revision>")
    return name, int(rev) if at else None


def registry_from_rows(rows: pa.Table) -> Registry:
    """The registry from the bucket stream's rows (`COLUMNS` of the lake schema: ts in µs),
    in any order, a row twice (live and in the lake) counted once."""
    out = Registry()
    seen: set[int] = set()
    wanted = rows.filter(pc.starts_with(rows.column("subject"), PREFIX))
    ordered = wanted.sort_by("seq")
    for seq, ts, subject, headers, data in zip(
        ordered.column("seq").to_pylist(),
        pc.cast(ordered.column("ts"), pa.int64()).to_pylist(),
        ordered.column("subject").to_pylist(),
        ordered.column("headers").to_pylist(),
        ordered.column("data").to_pylist(),
        strict=True,
    ):
        if seq in seen:
            continue
        seen.add(seq)
        op = dict(headers or []).get("KV-Operation", [""])[0]
        text = None if op in _REMOVED else (data or b"").decode("utf-8", "replace")
        out.add(Revision(subject[len(PREFIX) :], seq, ts * 1000, text))
    return out


def load_registry(streams_dir: Path, lake_dir: Lake) -> Registry:
    """The bucket's revisions from its stream folder (in `streams_dir`, beside the other
    streams' folders) and its Delta table; an empty registry when there is no bucket."""
    from log.compactor.layout import LakeError, StreamRef
    from log.compactor.rows import LAKE_SCHEMA, to_lake
    from log.segments import read_table

    try:
        ref = StreamRef.load(streams_dir / STREAM)
    except LakeError:
        return Registry()
    live = read_table(ref.dir, include_deleted=True, skip_corrupt=True)
    parts = [to_lake(STREAM, live).select(COLUMNS)]
    if ref.lake_on:
        parts.extend(_lake_rows(ref.table_path(lake_dir)))
    schema = pa.schema([LAKE_SCHEMA.field(c).with_nullable(True) for c in COLUMNS])
    return registry_from_rows(pa.concat_tables([p.cast(schema) for p in parts]))


def _lake_rows(table: LakePath) -> list[pa.Table]:
    from deltalake.exceptions import TableNotFoundError

    from log.compactor.tables import open_table

    try:
        opened = open_table(table)
    except TableNotFoundError:
        return []
    return [opened.to_pyarrow_table(columns=COLUMNS)]
