"""`jetlake inspect`: look into a store dir with DuckDB, no server needed.

    jetlake inspect --store DIR                       list segments
    jetlake inspect --store DIR "SELECT subject, count(*) FROM orders GROUP BY 1"
    jetlake inspect --store DIR --stream ORDERS --format json "SELECT * FROM orders"
    jetlake inspect --store DIR --lake LAKE "SELECT count(*) FROM orders"

It only reads (through `log.segments.list_segments` / `read_table`, which take
no lock and repair nothing, and `deltalake`), so it is safe beside a running
server and its compactor; the active segment is seen up to its last whole,
verified batch.

Decisions:
- Streams are found by their segment files, anywhere below `--store`, not by
  the server's layout (today `<store>/jetstream/$G/streams/<name>/`): the
  layout may still move, and pointing at the `jetstream` dir or at one stream
  folder works too. A stream is named by the `config.name` of the
  `stream.json` beside its segments, else by its folder; a named account's
  stream in the server's layout as `<account>.<stream>` (Spark's name for it);
  two folders with one name are both named by their path relative to `--store`.
- One view per stream, named exactly as the stream, no aliases: DuckDB
  identifiers are case-insensitive, so `orders` already finds `ORDERS`, and a
  name that is not a plain identifier is quoted (`"ORDERS-1"`). For the same
  reason two streams differing only in case cannot both be views: a query
  naming one of them is refused with a hint to use `--stream`.
- A view is the stream's whole history, as `jetlake sql`'s is: its Delta
  table up to the last seq L of one table version, then the live segments
  after L, cut by `sql.union` (the code Spark's views use), so both commands
  answer a question over the same rows, with the same columns (the lake's:
  `stream, seq, ts, subject, headers, data, date`; a typed stream's views
  are typed as Spark's are, see `sql.duck_views`). The table is read as
  `deltalake`'s Arrow dataset, which DuckDB scans with projection and filter
  pushdown: no JVM and no DuckDB extension. The lake dir is `--lake`, else
  `<store>/lake` of the store the stream folder is in (`jetstream/<account>/
  streams/<name>`), if there is one; without a lake dir, or for a stream with
  `jetlake.lake: off` or no readable config, the view is the live segments
  alone, with deleted messages left out.
- Only the streams a query names are read (DuckDB tells which; a typed
  stream's fan-out and rejects views name it too); if it cannot tell, all are.
- DuckDB runs with file access and extension loading off: a query can neither
  write into the store nor fetch anything.
- A corrupt sealed segment is named on stderr and skipped; the rest is
  answered and the exit code is 1, so a script sees the answer is partial.
- Results print as `sql.output` prints them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from deltalake.exceptions import DeltaError

from log.compactor.layout import META_FILE, REPLICA_FILE, LakeError, account_of, qualified
from log.compactor.location import Lake
from log.segments import CorruptSegmentError, list_segments, read_table
from log.segments.segment import SUFFIX, discover, read_batches
from log.state_file import StateFileError, read_state
from sql.duck_views import View, register, stream_views, view_names
from sql.output import Result, add_output_args, to_result, write_result

DELTA_LOG = "_delta_log"
SEGMENT_COLUMNS = ["stream", "file", "first_seq", "last_seq", "rows", "bytes", "sealed"]
_DUCKDB_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}


class InspectError(Exception):
    """A problem the user must fix; the message names the store, stream, file or query."""


# -- finding streams -------------------------------------------------------------


def find_stream_dirs(store_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Every stream folder below `store_dir` (itself included), by stream name."""
    root = Path(store_dir)
    if not root.is_dir():
        raise InspectError(f"store dir {root} does not exist or is not a directory")
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        folder = Path(dirpath)
        if any(f.endswith(SUFFIX) for f in filenames) and discover(folder, clean=False):
            found.append((_stream_name(folder), folder))
            dirnames.clear()  # a stream folder holds no other stream
        elif DELTA_LOG in dirnames:
            dirnames.clear()  # a Delta table (the lake): thousands of files, no segment
    names = [name for name, _ in found]
    out: dict[str, Path] = {}
    for name, folder in found:
        if names.count(name) > 1:
            name = folder.relative_to(root).as_posix()
        out[name] = folder
    return out


def _stream_name(folder: Path) -> str:
    """The configured name: a folder name may be sanitised, the config is not. A
    replicated stream's config is in the lake's `replica.json` (it has no stream.json)."""
    for file in (META_FILE, REPLICA_FILE):
        try:
            name = read_state(folder / file)["config"]["name"]
        except (OSError, StateFileError, KeyError, TypeError):
            continue
        if isinstance(name, str) and name:
            return qualified(account_of(folder), name)
    return folder.name


def select_streams(streams: dict[str, Path], only: str | None, store: str) -> dict[str, Path]:
    if only is None:
        return streams
    if only not in streams:
        known = ", ".join(sorted(streams)) or "none"
        raise InspectError(f"stream {only!r} not found under {store} (streams: {known})")
    return {only: streams[only]}


# -- reading -----------------------------------------------------------------------


def segments(streams: dict[str, Path], store: str) -> Result:
    """The segment listing, from index entries only: cheap even on a big store."""
    rows = []
    for name, folder in sorted(streams.items()):
        for seg in list_segments(folder):
            file = seg.path.relative_to(store) if seg.path.is_relative_to(store) else seg.path
            rows.append(
                [name, str(file), seg.first_seq, seg.last_seq, seg.rows, seg.bytes, seg.sealed]
            )
    return Result(list(SEGMENT_COLUMNS), rows)


def load_stream(
    name: str,
    folder: Path,
    warn: Callable[[str], None],
    *,
    include_deleted: bool = False,
    after_seq: int = 0,
) -> pa.Table:
    """The live messages of one stream; corrupt sealed segments are reported, then skipped.

    The fast path reads once; only when a segment is corrupt is every sealed
    one (that the read takes) verified again, so that each bad file is named,
    not just the first.
    """
    kw = {"include_deleted": include_deleted, "after_seq": after_seq}
    try:
        try:
            return read_table(folder, **kw)
        except CorruptSegmentError:
            pass
        for seg in list_segments(folder):
            if seg.sealed and seg.last_seq > after_seq:
                _entries, _batches, good, problem = read_batches(
                    seg.path, seg.path.with_suffix(".idx")
                )
                if problem:
                    where = f"{seg.path}: {problem} at byte {good}"
                    warn(f"stream {name}: corrupt segment {where}; skipped")
        return read_table(folder, skip_corrupt=True, **kw)
    except OSError as err:  # e.g. no permission, or the stream deleted while we read
        raise InspectError(f"stream {name}: cannot read {folder}: {err}") from err


def _views(
    name: str, folder: Path, lake: Lake | None, warn: Callable[[str], None]
) -> dict[str, View]:
    def read(path: Path, **kw: Any) -> pa.Table:
        return load_stream(name, path, warn, **kw)

    try:
        return stream_views(name, folder, lake, read)
    except (OSError, LakeError, DeltaError) as err:
        raise InspectError(f"stream {name}: cannot read its lake tables: {err}") from err


def query(
    sql: str, streams: dict[str, Path], warn: Callable[[str], None], lake: Lake | None = None
) -> pa.Table | None:
    """Run `sql` over one view per stream; None for a statement that returns nothing."""
    by_fold: dict[str, list[str]] = {}
    for name in streams:
        by_fold.setdefault(name.casefold(), []).append(name)
    con = duckdb.connect(config=_DUCKDB_CONFIG)
    index = 0
    try:
        try:  # on `con`: the module-level parser binds on a connection with file access
            wanted: set[str] | None = {t.casefold() for t in con.get_table_names(sql)}
        except duckdb.Error:
            wanted = None  # several statements or a syntax error: DuckDB will say which
        for _fold, names in sorted(by_fold.items()):
            if wanted is not None and not any(
                v.casefold() in wanted for n in names for v in view_names(n, streams[n])
            ):
                continue
            if len(names) > 1:
                raise InspectError(
                    f"streams {', '.join(sorted(names))} differ only in case, which DuckDB "
                    "does not tell apart; choose one with --stream"
                )
            for view_name, view in _views(names[0], streams[names[0]], lake, warn).items():
                register(con, index, view_name, view)
                index += 1
        try:
            rel = con.sql(sql)
            return None if rel is None else rel.to_arrow_table()
        except duckdb.Error as err:
            known = ", ".join(sorted(streams)) or "none"
            raise InspectError(f"{err}\nquery: {sql}\nstreams: {known}") from err
    finally:
        con.close()


# -- command -----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jetlake inspect",
        description="List segments or query streams of a store dir with DuckDB (read-only).",
    )
    p.add_argument("sql", nargs="?", help="SQL over one view per stream; none lists segments")
    p.add_argument("--store", required=True, help="store dir (the server's -sd), or any dir below")
    p.add_argument("--stream", help="only this stream")
    p.add_argument(
        "--lake",
        type=Lake.at,
        help="lake dir or s3://bucket/prefix (default: <store>/lake if there is one; "
        "none: live segments only)",
    )
    add_output_args(p)
    return p


def main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # --help or a usage error, already printed
        return int(exit_.code or 0)
    problems: list[str] = []

    def warn(message: str) -> None:
        problems.append(message)
        print(f"jetlake inspect: {message}", file=sys.stderr)

    try:
        streams = select_streams(find_stream_dirs(args.store), args.stream, args.store)
        if args.sql is None:
            result: Result | None = segments(streams, args.store)
        else:
            lake = args.lake
            if lake is not None and not lake.remote and not lake.path().is_dir():
                raise InspectError(f"lake dir {lake.root} does not exist or is not a directory")
            table = query(args.sql, streams, warn, args.lake)
            result = None if table is None else to_result(table)
    except InspectError as err:
        print(f"jetlake inspect: {err}", file=sys.stderr)
        return 1
    if result is not None:
        write_result(result, sys.stdout, fmt=args.format, limit=args.limit)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
