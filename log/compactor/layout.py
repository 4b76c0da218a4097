"""Where each stream's lake table is, who owns it, and how far the lake has got.

Stdlib only: the server reads this module (to gate reclaim and report lag)
without paying for Spark or Delta imports.

Decisions kept here:
- One Delta table per stream *incarnation*: `<lake_dir>/<stream>/<created>/`
  (`created` from stream.json, as `20261121T105417.123456789Z`); a named
  account's stream is `<lake_dir>/<account>.<stream>/<created>/`. No stream
  name holds a `.`, so a global account's (`$G`) table never meets a named
  account's, two accounts' streams of one name get two tables, and every
  table sits at the same depth (what the maintenance jobs walk). A stream
  deleted and re-created with the same name gets a fresh table, so neither its
  seqs nor its transaction ids meet the old history, which stays queryable by
  path and is removed only by an operator.
- The transaction app id is `jetlake:<stream>:<created>` (`<account>.<stream>`
  for a named account's); its version is the last seq appended. The Delta log
  is the truth for progress.
- `lake.json` in the stream folder is a *pin*: the compactor writes it after
  each Delta commit, so it can lag the truth but never lead it. The server
  trusts it for reclaim (lagging only delays reclaim) and for lag figures.
- A replicated stream (a cluster) has a replica folder on each of its servers
  but no `stream.json` (the meta log is its truth there): that server's lake
  supervisor describes it in `replica.json` instead, with whether this server
  leads it. Only the leader's compactor takes a replicated stream; every
  reader (views, reclaim) takes any replica.
- All servers of a cluster share one lake dir (object storage, or a folder
  they all see), so a stream has one table whichever server leads it. The
  pin in the stream folder is that replica's; `_jetlake_pin.json` in the
  table dir (hidden from Delta and its VACUUM by the leading underscore) is
  the lake's, written by whichever compactor committed and read by every
  replica's server to hold its reclaim. Either may lag the Delta log, neither
  leads it: the servers take the higher of the two.
- Stream metadata keys (set with any client in the stream config):
  `jetlake.lake: off` keeps a stream out of the lake; `jetlake.lake.table`
  sets the folder its tables go under instead of `<lake_dir>/<stream>`;
  `jetlake.lake.deletes: keep` keeps explicitly deleted and purged messages in
  the lake (by default message deletes and purges reach it). The typed-table
  keys (`jetlake.lake.format`, `.schema`, `.keep_raw`, `.tables`) are read by
  `log.compactor.typed.spec`; a typed stream's other tables sit beside its
  own (`typed_table_path`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from log.compactor.location import Lake, LakeAt, LakePath, LakeStoreError, as_lake
from log.state_file import StateFileError, decode_state, encode_state, read_state, write_state
from log.timefmt import parse_rfc3339

log = logging.getLogger("jetlake.lake")

GLOBAL = "$G"  # the global account: its streams' tables and views keep their bare names
ACCOUNTS = Path("jetstream")  # under a store: `<account>/streams/<stream>/`, as the server has it
STREAMS = ACCOUNTS / GLOBAL / "streams"
META_FILE = "stream.json"
REPLICA_FILE = "replica.json"
PIN_FILE = "lake.json"
TYPING_FILE = "lake_typing.json"  # typed tables: columns, conflicts, rejects (for /jsz)
ROUTING_FILE = "lake_routing.json"  # the metadata a typed group was routed by, until it lands
SHARED_PIN_FILE = "_jetlake_pin.json"
LAKE_OFF = "jetlake.lake"
LAKE_TABLE = "jetlake.lake.table"
LAKE_DELETES = "jetlake.lake.deletes"


class LakeError(Exception):
    """The lake could not do what was asked; the message names the stream, segment or table."""


def lake_enabled(storage: str, metadata: Mapping[str, str]) -> bool:
    """File streams go to the lake unless their metadata says `jetlake.lake: off`."""
    return storage == "file" and metadata.get(LAKE_OFF, "").lower() != "off"


def default_lake_dir(store_dir: str | os.PathLike[str]) -> Path:
    return Path(store_dir) / "lake"


def qualified(account: str, name: str) -> str:
    """A stream's (or view's) name across accounts: bare for the global account's,
    `<account>.<name>` for a named account's (stream names hold no `.`)."""
    return name if account == GLOBAL else f"{account}.{name}"


def streams_root(store_dir: str | os.PathLike[str], account: str = GLOBAL) -> Path:
    return Path(store_dir) / ACCOUNTS / account / "streams"


def accounts(store_dir: str | os.PathLike[str]) -> list[str]:
    """The accounts with a streams folder in the store, the global account first."""
    root = Path(store_dir) / ACCOUNTS
    if not root.is_dir():
        return []
    found = sorted(p.name for p in root.iterdir() if (p / "streams").is_dir())
    return sorted(found, key=lambda a: a != GLOBAL)


def lake_at(where: LakeAt | None, store_dir: str | os.PathLike[str]) -> Lake:
    """The lake a command names (`--lake`, a folder or an `s3://` URI), else the store's."""
    return as_lake(where if where else default_lake_dir(store_dir))


@dataclass(frozen=True, slots=True)
class StreamRef:
    """A file stream as its folder describes it: enough to find and own its lake table."""

    name: str
    dir: Path
    created: str
    metadata: dict[str, str]
    storage: str
    leads: bool = True  # this server's compactor takes the stream (a replica's: if it leads)
    account: str = GLOBAL

    @property
    def qualified(self) -> str:
        """The stream's name across accounts: its table folder, app id and views go by it."""
        return qualified(self.account, self.name)

    @classmethod
    def load(cls, stream_dir: Path) -> StreamRef:
        replica = not (stream_dir / META_FILE).is_file()
        file = REPLICA_FILE if replica else META_FILE
        try:
            doc = read_state(stream_dir / file)
            config = doc["config"]
            return cls(
                name=config["name"],
                dir=stream_dir,
                created=doc["created"],
                metadata=dict(config.get("metadata") or {}),
                storage=config.get("storage", "file"),
                leads=bool(doc["leader"]) if replica else True,
                account=account_of(stream_dir),
            )
        except (OSError, StateFileError, KeyError, TypeError) as exc:
            raise LakeError(f"stream folder {stream_dir}: unreadable {file}: {exc}") from exc

    @property
    def lake_on(self) -> bool:
        return lake_enabled(self.storage, self.metadata)

    @property
    def deletes_reach_lake(self) -> bool:
        return self.metadata.get(LAKE_DELETES, "").lower() != "keep"

    @property
    def incarnation(self) -> str:
        ns = parse_rfc3339(self.created)
        secs, frac = divmod(ns, 1_000_000_000)
        return datetime.fromtimestamp(secs, UTC).strftime("%Y%m%dT%H%M%S") + f".{frac:09d}Z"

    @property
    def app_id(self) -> str:
        return f"jetlake:{self.qualified}:{self.created}"

    def table_path(self, lake: LakeAt) -> LakePath:
        """`<lake>/<qualified>/<incarnation>`, or under `jetlake.lake.table` for a global
        account's stream; a named account's may not choose: its table could be put where
        another account's is, and its views (and walls) would read that one."""
        lake = as_lake(lake)
        root = self.metadata.get(LAKE_TABLE) if self.account == GLOBAL else None
        base = lake.locate(root) if root else lake.path(self.qualified)
        return base / self.incarnation

    def typed_table_path(self, lake: LakeAt, table: str) -> LakePath:
        """A typed stream's table by name: the stream's own (named as the stream) is
        `table_path`; fan-out and rejects tables sit beside it, `<created>.<table>`, at the
        depth the maintenance jobs look for tables."""
        main = self.table_path(lake)
        return main if table == self.name else main.with_name(f"{main.name}.{table}")


def account_of(stream_dir: Path) -> str:
    """The account of a folder in the server's layout (`<account>/streams/<stream>`); a
    folder elsewhere (a copy, a test's) is read as the global account's."""
    parent = stream_dir.parent
    return parent.parent.name if parent.name == "streams" and parent.parent.name else GLOBAL


def stream_dirs(store_dir: str | os.PathLike[str], account: str | None = GLOBAL) -> list[Path]:
    """The stream folders of one account, or of every account (`account=None`)."""
    names = accounts(store_dir) if account is None else [account]
    out = []
    for name in names:
        root = streams_root(store_dir, name)
        if root.is_dir():
            out += sorted(
                p
                for p in root.iterdir()
                if (p / META_FILE).is_file() or (p / REPLICA_FILE).is_file()
            )
    return out


def streams(store_dir: str | os.PathLike[str], account: str | None = GLOBAL) -> Iterator[StreamRef]:
    """Every stream of a store dir's account (of every account: `account=None`) that has a
    readable config (others are skipped by callers)."""
    for folder in stream_dirs(store_dir, account):
        yield StreamRef.load(folder)


@dataclass(frozen=True, slots=True)
class Pin:
    """What the lake held at the compactor's last commit (a cache of the Delta log)."""

    app_id: str
    table: str
    seq: int  # last seq in the lake (the transaction version)
    deletes_offset: int = 0  # bytes of explicit.log already carried into the table


def read_pin(stream: StreamRef) -> Pin | None:
    """The pin of this incarnation, or None (never written, unreadable, or another's)."""
    return _read_pin(stream.dir / PIN_FILE, stream)


def write_pin(stream: StreamRef, pin: Pin) -> None:
    """Atomically replace the pin; the stream folder may be gone (stream deleted): no error."""
    _replace(stream.dir / PIN_FILE, asdict(pin))


def read_shared_pin(stream: StreamRef, lake: LakeAt) -> Pin | None:
    """The lake's pin in the table dir (None: no commit yet, unreadable, or another's,
    or the lake's store cannot be reached: reclaim then waits on this replica's own pin)."""
    return _read_pin(stream.table_path(lake) / SHARED_PIN_FILE, stream)


def _read_pin(path: Path | LakePath, stream: StreamRef) -> Pin | None:
    """A damaged pin is reported and read as none: the pin only lags the Delta log, so
    without one reclaim waits and the compactor reads its progress from the log. The
    checksum matters here: a flipped digit that still parsed could make it lead."""
    try:
        pin = Pin(**decode_state(path.read_bytes(), Path(str(path))))
    except OSError:
        return None
    except (StateFileError, TypeError) as exc:
        log.error("lake pin %s unreadable, ignored: %s", path, exc)
        return None
    return pin if pin.app_id == stream.app_id else None


def write_shared_pin(stream: StreamRef, lake: LakeAt, seq: int) -> None:
    """Raise the lake's pin to `seq` after a commit (a late writer does not lower it).

    Read, compare and replace is not atomic: two writers at once may leave the
    lower seq, which only makes the servers hold reclaim a little longer."""
    known = read_shared_pin(stream, lake)
    if known is not None and known.seq >= seq:
        return
    table = stream.table_path(lake)
    pin = Pin(stream.app_id, str(table), seq)
    try:
        (table / SHARED_PIN_FILE).write_bytes(encode_state(asdict(pin)))
    except FileNotFoundError:  # the table dir is gone (a folder lake): nothing to pin
        return
    except LakeStoreError as exc:  # only delays other replicas' reclaim
        log.warning("lake pin of stream %s not written: %s", stream.name, exc)


def lake_seq(stream: StreamRef, lake: LakeAt | None) -> int:
    """The last seq the lake surely holds, as far as the pins tell (what reclaim waits for):
    this replica's own pin, or the lake's (None: not read here) if higher."""
    pins = (read_pin(stream), read_shared_pin(stream, lake) if lake is not None else None)
    return max((pin.seq for pin in pins if pin is not None), default=0)


def describe_replica(stream_dir: Path, snapshot: Mapping[str, Any], *, leader: bool) -> None:
    """Write a replicated stream's `replica.json`: its config and created time as the engine
    has them, and whether this server leads it (the folder may be gone: no error)."""
    _replace(stream_dir / REPLICA_FILE, {**snapshot, "leader": leader})


def read_typing(stream: StreamRef) -> dict[str, Any]:
    """What the compactor last wrote about a typed stream's tables ({} when nothing)."""
    try:
        doc = read_state(stream.dir / TYPING_FILE)
    except (OSError, StateFileError):
        return {}
    return doc if isinstance(doc, dict) and doc.get("app_id") == stream.app_id else {}


def write_typing(stream: StreamRef, doc: Mapping[str, Any]) -> None:
    _replace(stream.dir / TYPING_FILE, {**doc, "app_id": stream.app_id})


def read_routing(stream: StreamRef) -> tuple[int, dict[str, str]] | None:
    """The last seq and metadata of the latest typed group begun, if any."""
    try:
        doc = read_state(stream.dir / ROUTING_FILE)
        if doc["app_id"] == stream.app_id:
            return int(doc["seq"]), {str(k): str(v) for k, v in doc["metadata"].items()}
    except (OSError, StateFileError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def write_routing(stream: StreamRef, seq: int, metadata: Mapping[str, str]) -> None:
    body = {"app_id": stream.app_id, "seq": seq, "metadata": dict(metadata)}
    _replace(stream.dir / ROUTING_FILE, body)


def _replace(path: Path, doc: Mapping[str, Any]) -> None:
    """Several processes (servers' compactors, a server and its compactor) may write one."""
    try:
        write_state(path, doc, shared=True)
    except FileNotFoundError:
        return
