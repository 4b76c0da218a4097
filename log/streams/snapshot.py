"""A replicated stream's Raft snapshot, and bringing a replica's store up to one.

The Raft log of a stream would otherwise grow with every message ever
published, and a replica that restarts would replay all of it. Every so many
entries the node snapshots the state machine and drops the log before the
previous snapshot (`consensus.driver`). The state machine is the store, and
a store's messages are far too many for a Raft message, so the snapshot holds
only the store's shape (bounds and interior deletes) and its consumers'
state; a replica that receives one copies the messages it lacks from a peer,
outside Raft (`Rows`, fetched by the cluster's catch-up), then deletes what
the snapshot says is gone. Every message up to the snapshot committed, so
any peer's copy of a seq is the same message.

Rows the limits retired but the lake has not taken yet are copied too: this
replica may lead, and compact, next; so is the log of what clients erased,
byte for byte (replicas write the same bytes, and the lake keeps its progress
in that log as an offset). Below the lake's mark nothing is copied
that is not live. A seq the serving peer no longer keeps (reclaimed: the lake
has it) is filled with a placeholder and deleted at once, so the seqs stay
those of the log.
"""

from __future__ import annotations

import json
import logging
import struct
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from log.consumers.replicated import ConsumerFiles
from log.consumers.store import Saved
from log.segments.api import MsgStore, NewMsg, StoredMsg
from log.segments.schema import SCHEMA, TS_TYPE, rows_between, seq_view

if TYPE_CHECKING:
    from log.streams.stream import Stream

log = logging.getLogger("jetlake.stream")

GAP_SUBJECT = "_jetlake.gap"  # a placeholder's subject: deleted as soon as it is written
_HEAD = struct.Struct(">I")


class SnapshotError(ValueError):
    """Bytes that are not a stream snapshot or a rows reply; names the stream."""


@dataclass(frozen=True, slots=True)
class StreamSnapshot:
    first_seq: int
    last_seq: int
    keep_from: int  # rows from here on are copied, retired ones too (the lake may want them)
    deleted: list[int]  # interior deletes between first_seq and last_seq
    consumers: list[Saved]
    explicit_size: int  # bytes of the store's log of erasures


@dataclass(frozen=True, slots=True)
class Ask:
    """Rows first..last and the erasure log's bytes log_from..log_to, as far as a peer can."""

    first: int
    last: int
    log_from: int
    log_to: int


@dataclass(frozen=True, slots=True)
class Rows:
    """A peer's answer: the rows it keeps from `first` to `through`, and erasure-log bytes."""

    msgs: list[StoredMsg]
    through: int
    explicit: bytes

    def helps(self, ask: Ask) -> bool:
        return self.through >= ask.first or bool(self.explicit)


Fetch = Callable[[Ask], Awaitable[Rows]]


def take(store: MsgStore, consumers: Sequence[Saved]) -> bytes:
    state = store.state(with_deleted=True)
    mark = store.lake_mark
    keep_from = state.first_seq if mark is None else min(state.first_seq, mark + 1)
    doc = {
        "first_seq": state.first_seq,
        "last_seq": state.last_seq,
        "keep_from": keep_from,
        "deleted": state.deleted,
        "consumers": [[c.name, c.config, c.created, c.state] for c in consumers],
        "explicit_size": store.explicit_size(),
    }
    return zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 1)


def decode(data: bytes, stream: str) -> StreamSnapshot:
    try:
        doc = json.loads(zlib.decompress(data))
        return StreamSnapshot(
            int(doc["first_seq"]),
            int(doc["last_seq"]),
            int(doc["keep_from"]),
            [int(s) for s in doc["deleted"]],
            [Saved(str(n), dict(cfg), str(c), st) for n, cfg, c, st in doc["consumers"]],
            int(doc["explicit_size"]),
        )
    except (zlib.error, ValueError, KeyError, TypeError) as exc:
        raise SnapshotError(f"stream {stream}: not a stream snapshot: {exc}") from None


async def bring(store: MsgStore, snap: StreamSnapshot, fetch: Fetch, stream: str) -> int:
    """Make the store hold what the snapshot describes; returns how many rows were copied.

    Idempotent: a restart part-way (or a store already past the snapshot, its own)
    picks up from what the store holds.
    """
    have = store.state().last_seq
    if have + 1 < snap.keep_from:
        store.compact(snap.keep_from)  # below it the lake has everything, or nobody wants it
    copied = 0
    while True:
        have, logged = store.state().last_seq, store.explicit_size()
        if have >= snap.last_seq and logged >= snap.explicit_size:
            break
        ask = Ask(have + 1, snap.last_seq, logged, snap.explicit_size)
        rows = await fetch(ask)
        if not rows.helps(ask):
            raise SnapshotError(f"stream {stream}: a peer answered {ask} with nothing new")
        if rows.through > have:
            store.append(_filled(rows, have + 1))
            kept = {m.seq for m in rows.msgs}
            store.remove_many(s for s in range(have + 1, rows.through + 1) if s not in kept)
            copied += len(rows.msgs)
            log.info("stream %s: caught up to seq %d of %d", stream, rows.through, snap.last_seq)
        store.extend_explicit(rows.explicit)
    if store.state().first_seq < snap.first_seq:
        store.purge(">", upto_seq=snap.first_seq)
    store.remove_many(snap.deleted)
    return copied


def _filled(rows: Rows, first: int) -> list[NewMsg]:
    """first..through as the store appends them: each row, or a placeholder where none."""
    by_seq = {m.seq: m for m in rows.msgs}
    out: list[NewMsg] = []
    ts = rows.msgs[0].ts if rows.msgs else 0
    for seq in range(first, rows.through + 1):
        msg = by_seq.get(seq)
        if msg is None:
            out.append(NewMsg(GAP_SUBJECT, None, b"", ts))
        else:
            ts = msg.ts
            out.append(NewMsg(msg.subject, msg.hdr, msg.data, msg.ts))
    return out


# -- the rows reply on the wire --------------------------------------------------------


def encode_rows(rows: Rows) -> bytes:
    head = json.dumps({"through": rows.through, "explicit": len(rows.explicit)}).encode()
    msgs = rows.msgs
    batch = pa.record_batch(
        [
            pa.array([m.seq for m in msgs], pa.uint64()),
            pa.array([m.ts for m in msgs], TS_TYPE),
            pa.array([m.subject for m in msgs], pa.string()),
            pa.array([m.hdr for m in msgs], pa.binary()),
            pa.array([m.data for m in msgs], pa.binary()),
        ],
        schema=SCHEMA,
    )
    return _HEAD.pack(len(head)) + head + rows.explicit + batch.serialize().to_pybytes()


def decode_rows(data: bytes, stream: str) -> Rows:
    try:
        (size,) = _HEAD.unpack_from(data)
        head = json.loads(data[_HEAD.size : _HEAD.size + size])
        start = _HEAD.size + size
        explicit = data[start : start + int(head["explicit"])]
        body = pa.py_buffer(data[start + len(explicit) :])
        batch = pa.ipc.read_record_batch(body, SCHEMA)
        msgs = rows_between(batch, seq_view(batch), 0, batch.num_rows)
        return Rows(msgs, int(head["through"]), explicit)
    except (struct.error, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        raise SnapshotError(f"stream {stream}: not a rows reply: {exc}") from None


def rows_for(store: MsgStore, ask: Ask, max_bytes: int) -> Rows:
    """What this replica can give towards `ask`."""
    if ask.first > ask.last:  # only the erasure log is wanted
        msgs, through = [], ask.last
    else:
        msgs, through = store.retained(ask.first, ask.last, max_bytes)
    size = store.explicit_size()
    end = min(ask.log_to, size, ask.log_from + max_bytes)
    return Rows(msgs, through, store.explicit_log(ask.log_from, end))


class Snapshots:
    """A replicated stream's `snapshot` and `restore` for its Raft node. The node is built
    inside the stream, before it exists: `bind` it once it does; the node calls neither
    before its loop runs."""

    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self._stream: Stream | None = None

    def bind(self, stream: Stream) -> None:
        self._stream = stream

    def _files(self) -> tuple[Stream, ConsumerFiles]:
        stream, files = self._stream, self._stream and self._stream.consumer_ops
        if stream is None or not isinstance(files, ConsumerFiles):
            raise SnapshotError("a stream snapshot before its stream and consumer files exist")
        return stream, files

    def take(self) -> bytes:
        stream, files = self._files()
        return take(stream.store, files.saved())

    async def restore(self, data: bytes) -> None:
        stream, files = self._files()
        snap = decode(data, stream.name)
        copied = await bring(stream.store, snap, self._fetch, stream.name)
        files.restore(snap.consumers)
        stream.restored()
        log.info(
            "stream %s: restored a snapshot up to seq %d (%d rows copied from peers)",
            stream.name,
            snap.last_seq,
            copied,
        )
