"""Where a stream's lake ends and its live tail begins: the cut every union read makes.

A stream's whole history is its Delta table up to L (the last seq one table
version records) plus the live segments after L. Spark's views
(`sql.views`) and `jetlake inspect`'s DuckDB views take the same cut from
here, so the two engines answer one question over the same rows.

Why this is exact (no gap, no duplicate, zero lag): the live segments are read
first, into memory, and L from the Delta log after. Rows with seq <= L come
from Delta only (the table version L was read from, see `sql.lake_snapshot`),
rows with seq > L from that read only. Anything the server reclaimed before
the read has seq <= its pin <= L, so Delta has it; a compaction committed in
between only raises L, and the read still holds those rows. The tail keeps
rows retired by limits (the lake will keep them too) and leaves out what
clients erased (deletes, purges) unless the stream keeps it, so the union is
what the lake will hold once compaction catches up. Erasures logged but not
yet carried into Delta (past the offset of a pin read before the table
version: the compactor moves the pin after its DELETE commits) are returned
apart, for the engine to filter out of the lake part.

Without a lake (`lake_dir` None, or the stream's `jetlake.lake: off`) the
tail is simply the stream's live messages, deleted ones left out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from log.compactor.layout import StreamRef, read_pin
from log.compactor.location import Lake
from log.compactor.rows import drop_erased, to_lake
from log.segments import read_table
from log.segments.filestore import EXPLICIT
from log.segments.tombstones import Erasure, replay_explicit
from sql.lake_snapshot import LakeSnapshot, lake_snapshot

# Reads a stream folder's live rows (segment schema), as `log.segments.read_table` does;
# `jetlake inspect` passes one that names corrupt segments on stderr.
LiveReader = Callable[..., pa.Table]


def read_live(folder: Path, *, include_deleted: bool, after_seq: int) -> pa.Table:
    return read_table(
        folder, include_deleted=include_deleted, skip_corrupt=True, after_seq=after_seq
    )


@dataclass(frozen=True, slots=True)
class UnionParts:
    """One stream's history cut at L: `lake` (None: nothing there yet) minus `hidden`,
    then `tail`, lake-schema rows with seq > L."""

    lake: LakeSnapshot | None
    hidden: list[Erasure]
    tail: pa.Table

    @property
    def done(self) -> int:
        return self.lake.done if self.lake is not None else 0


def union_parts(
    stream: StreamRef, lake_dir: Lake | None, read: LiveReader = read_live
) -> UnionParts:
    """The cut of one stream (see the module doc for why it is exact)."""
    table = stream.table_path(lake_dir) if stream.lake_on and lake_dir is not None else None
    lake_on = table is not None
    keep_deletes = not stream.deletes_reach_lake
    # The pin never runs ahead of the Delta log, so segments it covers are in the
    # lake whatever L turns out to be: they need not be read at all.
    pin = read_pin(stream) if lake_on else None
    live = read(stream.dir, include_deleted=lake_on, after_seq=pin.seq if pin else 0)
    # Again, and before L: the deletes carried up to this pin's offset are in the version
    # read next (the pin follows the Delta commit); those logged after it are hidden.
    pin = read_pin(stream) if lake_on else None
    lake = lake_snapshot(table, stream.app_id) if table is not None else None
    done = lake.done if lake else 0
    live = live.filter(pc.greater(live.column("seq"), done))
    if lake_on and not keep_deletes:
        live = drop_erased(live, replay_explicit(stream.dir / EXPLICIT)[0])
    tail = tail_rows(stream, live)
    if lake is None or not done:
        return UnionParts(None, [], tail)
    pending = (
        []
        if keep_deletes
        else replay_explicit(stream.dir / EXPLICIT, pin.deletes_offset if pin else 0)[0]
    )
    return UnionParts(lake, [e for e in pending if e.first <= done], tail)


def tail_rows(stream: StreamRef, live: pa.Table) -> pa.Table:
    """Live segment rows as the lake holds them.

    The seam for typed lake tables: a stream whose metadata declares a payload
    format gets its tail typed here, by the compactor's own typing of a batch,
    so both engines see the lake's typed columns on the tail too.
    """
    return to_lake(stream.name, live)
