"""The entries of a stream's replicated log, and their compact binary form.

Every change to a stream's store travels as one of these, so each member of
the stream's group applies the same changes in the same order. An entry
carries every decision the proposer made (sequence, timestamp, the purge's
bound, the exact messages an expiry retires) so that applying it needs no
clock and no proposer-only state, and applying it twice changes nothing.

The codec is a fixed struct header per kind followed by the variable fields,
each length-prefixed; decoding checks every length and raises
`EntryDecodeError` on anything that is not exactly one well-formed entry.
Strings travel as UTF-8 with surrogate escapes, as the parser reads them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from ingest.parser.fast import native
from log.segments.api import NewMsg, Overhead, Rows
from log.segments.ipc import run_rows

ROLLUPS = ("", "sub", "all")
_NO_HDR = 0xFFFF_FFFF  # a header-block length meaning "no header block" (distinct from empty)


class FastMark(NamedTuple):
    """Where a fast batch stands once its message applies (`log.batches.fast`): every member
    keeps it, so the next leader carries the batch on, as the reference's followers do."""

    batch_id: str
    seq: int  # the message's sequence within the batch
    gap_ok: bool
    flow: int  # the publisher's flow (the most messages one flow ack may cover)
    commit: bool  # the message commits the batch
    reply: str  # where the batch's flow acks go


class Publish(NamedTuple):
    """A message, its sequence and the rules apply must repeat (rollup, TTL, dedup id).

    A tuple, unlike the other kinds: one is built per published message, and a
    frozen dataclass costs three times as much to construct.
    """

    msg: NewMsg
    seq: int
    rollup: str = ""  # "", "sub" or "all"
    ttl: int = 0  # seconds; 0 none, publish.NEVER for "never"
    msg_id: str = ""
    fast: FastMark | None = None  # a replicated fast batch's message


@dataclass(frozen=True, slots=True)
class Delete:
    """STREAM.MSG.DELETE: explicit, so the lake deletes the row too. `req` matches the
    outcome (was it there?) to the proposer's request."""

    seq: int
    req: int


@dataclass(frozen=True, slots=True)
class Remove:
    """Messages a consumer no longer needs (interest and work-queue retention)."""

    seqs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Purge:
    """STREAM.PURGE. Only seqs up to `last_seq` (the proposer's last when it proposed)
    are considered, so a replay over a store holding later messages purges the same ones."""

    subject_filter: str
    upto_seq: int
    keep: int
    last_seq: int
    req: int


@dataclass(frozen=True, slots=True)
class Expire:
    """max_age retires messages older than `cutoff` (0: none) up to `last_seq`; `seqs` are
    the messages whose own TTL ran out, decided by the proposer's clock."""

    cutoff: int
    last_seq: int
    seqs: tuple[int, ...]
    req: int


@dataclass(frozen=True, slots=True)
class ConsumerOp:
    """A consumer's state change riding the stream's log; `op` is the consumer layer's."""

    consumer: str
    op: bytes


@dataclass(frozen=True, slots=True)
class Batch:
    """An atomic batch: its messages travel and apply as one entry, one append to the
    store, so the log, the store and the lake hold all of them or none."""

    msgs: tuple[Publish, ...]


@dataclass(frozen=True, slots=True)
class Run:
    """Publishes proposed together (a client's PUBs read at once): one log entry, so one
    frame in the Raft log and on the wire for all of them. Applied as the publishes it
    holds, each on its own (`unpack_runs`); unlike a Batch, none depends on another."""

    msgs: tuple[Publish, ...]


@dataclass(frozen=True, slots=True)
class RawRun:
    """A Run as its log bytes (`decode_deferring_runs`): a follower appends a run of plain
    publishes to its segment straight from them (`rows`), without a Python object per
    message, and reads them as `Publish`es (`msgs`) only when they are not plain."""

    data: bytes
    count: int
    known: tuple[Publish, ...] | None = None  # the publishes, where this member proposed them

    def rows(self, overhead: Overhead) -> Rows | None:
        return run_rows(self.data, _BATCH_HEAD.size, self.count, overhead)

    @property
    def msgs(self) -> tuple[Publish, ...]:
        if self.known is not None:
            return self.known
        return _decode_publishes(self.data, _BATCH_HEAD.size, self.count, "run")


@dataclass(frozen=True, slots=True)
class Restored:
    """Rows of a backup restored into a replicated stream (`STREAM.RESTORE` in a cluster),
    with their own seqs and timestamps: what the backup lacks between them is a gap, and
    `through` is the backup's last seq (deleted messages may end it)."""

    msgs: tuple[Publish, ...]
    through: int


@dataclass(frozen=True, slots=True)
class Barrier:
    """Changes nothing: a new leader proposes one and waits for it to apply, which tells it
    every entry of earlier terms has been applied here."""


Entry = (
    Publish
    | Delete
    | Remove
    | Purge
    | Expire
    | ConsumerOp
    | Barrier
    | Batch
    | Restored
    | Run
    | RawRun
)


class EntryDecodeError(ValueError):
    """Bytes that are not one well-formed stream entry (a corrupt or foreign log entry)."""


_PUBLISH, _DELETE, _REMOVE, _PURGE, _EXPIRE, _CONSUMER_OP, _BARRIER, _BATCH, _FAST, _RESTORED = (
    range(1, 11)
)
_RUN = 11

# kind, seq, ts, ttl, rollup, then the lengths of subject, header block, data, msg id
_PUB = struct.Struct(">BQqqBIIII")
_DEL = struct.Struct(">BQQ")  # kind, seq, req
_SEQS = struct.Struct(">BI")  # kind, count (Remove)
_PURGE_HEAD = struct.Struct(">BQQQQI")  # kind, upto_seq, keep, last_seq, req, filter length
_EXPIRE_HEAD = struct.Struct(">BqQQI")  # kind, cutoff, last_seq, req, count
_OP = struct.Struct(">BII")  # kind, consumer length, op length
_BATCH_HEAD = struct.Struct(">BI")  # kind, count; then each publish's length and bytes (a run too)
# kind, publish length, batch seq, flags (1 gap ok, 2 commit), flow, id and reply lengths;
# then the publish's own bytes, the id and the reply
_FAST_HEAD = struct.Struct(">BIQBHII")
_RESTORED_HEAD = struct.Struct(">BQI")  # kind, through, count; then as a batch
_LEN = struct.Struct(">I")
_BARRIER_BYTES = bytes((_BARRIER,))
_RUN_KIND = bytes((_RUN,))


def _text(value: str) -> bytes:
    return value.encode("utf-8", "surrogateescape")


def _seqs(seqs: tuple[int, ...]) -> bytes:
    return struct.pack(f">{len(seqs)}Q", *seqs)


def encode(entry: Entry) -> bytes:
    """The entry's bytes for the Raft log (and the wire between members)."""
    if type(entry) is Publish:
        if entry.fast is not None:
            return _encode_fast(entry, entry.fast)
        msg = entry.msg
        subject = _text(msg.subject)
        msg_id = _text(entry.msg_id)
        hdr = msg.hdr
        head = _PUB.pack(
            _PUBLISH,
            entry.seq,
            msg.ts,
            entry.ttl,
            ROLLUPS.index(entry.rollup),
            len(subject),
            _NO_HDR if hdr is None else len(hdr),
            len(msg.data),
            len(msg_id),
        )
        return b"".join((head, subject, hdr or b"", msg.data, msg_id))
    if isinstance(entry, Delete):
        return _DEL.pack(_DELETE, entry.seq, entry.req)
    if isinstance(entry, Remove):
        return _SEQS.pack(_REMOVE, len(entry.seqs)) + _seqs(entry.seqs)
    if isinstance(entry, Purge):
        flt = _text(entry.subject_filter)
        head = _PURGE_HEAD.pack(
            _PURGE, entry.upto_seq, entry.keep, entry.last_seq, entry.req, len(flt)
        )
        return head + flt
    if isinstance(entry, Expire):
        head = _EXPIRE_HEAD.pack(_EXPIRE, entry.cutoff, entry.last_seq, entry.req, len(entry.seqs))
        return head + _seqs(entry.seqs)
    if isinstance(entry, Run):
        return _encode_publishes(_BATCH_HEAD.pack(_RUN, len(entry.msgs)), entry.msgs)
    if isinstance(entry, Batch):
        return _encode_publishes(_BATCH_HEAD.pack(_BATCH, len(entry.msgs)), entry.msgs)
    if isinstance(entry, Restored):
        head = _RESTORED_HEAD.pack(_RESTORED, entry.through, len(entry.msgs))
        return _encode_publishes(head, entry.msgs)
    if isinstance(entry, ConsumerOp):
        name = _text(entry.consumer)
        return _OP.pack(_CONSUMER_OP, len(name), len(entry.op)) + name + entry.op
    return _BARRIER_BYTES


def _encode_publishes(head: bytes, msgs: tuple[Publish, ...]) -> bytes:
    """The leader writes every message it proposes here: in the compiled extension when it
    is there (native/src/entries.rs), which leaves anything but plain fields to this code."""
    if native is not None and type(msgs) is tuple:
        encoded: bytes | None = native.encode_publishes(head, msgs)
        if encoded is not None:
            return encoded
    parts = [head]
    for msg in msgs:
        body = encode(msg)
        parts += (_LEN.pack(len(body)), body)
    return b"".join(parts)


def _encode_fast(entry: Publish, mark: FastMark) -> bytes:
    body = encode(entry._replace(fast=None))
    batch_id, reply = _text(mark.batch_id), _text(mark.reply)
    flags = (1 if mark.gap_ok else 0) | (2 if mark.commit else 0)
    head = _FAST_HEAD.pack(_FAST, len(body), mark.seq, flags, mark.flow, len(batch_id), len(reply))
    return b"".join((head, body, batch_id, reply))


def decode(data: bytes) -> Entry:
    """The entry `encode` made of these bytes; EntryDecodeError for anything else."""
    if not data:
        raise EntryDecodeError("empty stream entry")
    try:
        return _DECODERS[data[0]](data)
    except KeyError:
        raise EntryDecodeError(f"unknown stream entry kind {data[0]}") from None
    except (struct.error, UnicodeDecodeError) as exc:
        raise EntryDecodeError(f"malformed stream entry (kind {data[0]}): {exc}") from None


def decode_deferring_runs(data: bytes) -> Entry:
    """As `decode`, except that a Run stays its bytes (`RawRun`) until apply reads it,
    when the compiled extension can lay its publishes out as a segment batch."""
    deferred = native is not None and type(data) is bytes and data[:1] == _RUN_KIND
    if deferred and len(data) >= _BATCH_HEAD.size:
        return RawRun(data, _BATCH_HEAD.unpack_from(data)[1])
    return decode(data)


def own_entry(data: bytes, entry: Entry) -> Entry:
    """What the leader applies of an entry it proposed: a Run as a RawRun over the bytes
    it proposed, keeping its publishes (so the store takes the run whole, as a follower's
    does, and the proposer settles each publish without reading them back)."""
    if type(entry) is Run and native is not None:
        return RawRun(data, len(entry.msgs), entry.msgs)
    return entry


def _expect(data: bytes, size: int, kind: str) -> None:
    if len(data) != size:
        raise EntryDecodeError(f"{kind} entry of {len(data)} bytes, its fields say {size}")


def _decode_publish(data: bytes) -> Publish:
    _, seq, ts, ttl, rollup, n_subject, n_hdr, n_data, n_id = _PUB.unpack_from(data)
    has_hdr = n_hdr != _NO_HDR
    if not has_hdr:
        n_hdr = 0
    _expect(data, _PUB.size + n_subject + n_hdr + n_data + n_id, "publish")
    if rollup >= len(ROLLUPS):
        raise EntryDecodeError(f"publish entry with unknown rollup code {rollup}")
    at = _PUB.size
    subject = data[at : at + n_subject].decode("utf-8", "surrogateescape")
    at += n_subject
    hdr = data[at : at + n_hdr] if has_hdr else None
    at += n_hdr
    body = data[at : at + n_data]
    msg_id = data[at + n_data :].decode("utf-8", "surrogateescape")
    return Publish(NewMsg(subject, hdr, body, ts), seq, ROLLUPS[rollup], ttl, msg_id)


def _decode_fast(data: bytes) -> Publish:
    _, n_body, seq, flags, flow, n_id, n_reply = _FAST_HEAD.unpack_from(data)
    _expect(data, _FAST_HEAD.size + n_body + n_id + n_reply, "fast batch publish")
    at = _FAST_HEAD.size
    if n_body == 0 or data[at] != _PUBLISH:
        raise EntryDecodeError("fast batch publish entry without its message")
    if flags > 3:
        raise EntryDecodeError(f"fast batch publish entry with unknown flags {flags}")
    entry = _decode_publish(data[at : at + n_body])
    at += n_body
    batch_id = data[at : at + n_id].decode("utf-8", "surrogateescape")
    reply = data[at + n_id :].decode("utf-8", "surrogateescape")
    return entry._replace(
        fast=FastMark(batch_id, seq, bool(flags & 1), flow, bool(flags & 2), reply)
    )


def _decode_delete(data: bytes) -> Delete:
    _expect(data, _DEL.size, "delete")
    _, seq, req = _DEL.unpack(data)
    return Delete(seq, req)


def _unpack_seqs(data: bytes, at: int, count: int, kind: str) -> tuple[int, ...]:
    _expect(data, at + 8 * count, kind)
    return struct.unpack_from(f">{count}Q", data, at)


def _decode_remove(data: bytes) -> Remove:
    _, count = _SEQS.unpack_from(data)
    return Remove(_unpack_seqs(data, _SEQS.size, count, "remove"))


def _decode_purge(data: bytes) -> Purge:
    _, upto_seq, keep, last_seq, req, n_filter = _PURGE_HEAD.unpack_from(data)
    _expect(data, _PURGE_HEAD.size + n_filter, "purge")
    flt = data[_PURGE_HEAD.size :].decode("utf-8", "surrogateescape")
    return Purge(flt, upto_seq, keep, last_seq, req)


def _decode_expire(data: bytes) -> Expire:
    _, cutoff, last_seq, req, count = _EXPIRE_HEAD.unpack_from(data)
    return Expire(cutoff, last_seq, _unpack_seqs(data, _EXPIRE_HEAD.size, count, "expire"), req)


def _decode_consumer_op(data: bytes) -> ConsumerOp:
    _, n_name, n_op = _OP.unpack_from(data)
    _expect(data, _OP.size + n_name + n_op, "consumer op")
    name = data[_OP.size : _OP.size + n_name].decode("utf-8", "surrogateescape")
    return ConsumerOp(name, data[_OP.size + n_name :])


def _decode_batch(data: bytes) -> Batch:
    _, count = _BATCH_HEAD.unpack_from(data)
    return Batch(_decode_publishes(data, _BATCH_HEAD.size, count, "batch"))


def _decode_run(data: bytes) -> Run:
    _, count = _BATCH_HEAD.unpack_from(data)
    return Run(_decode_publishes(data, _BATCH_HEAD.size, count, "run"))


def _decode_restored(data: bytes) -> Restored:
    _, through, count = _RESTORED_HEAD.unpack_from(data)
    return Restored(_decode_publishes(data, _RESTORED_HEAD.size, count, "restored"), through)


def _decode_publishes(data: bytes, at: int, count: int, kind: str) -> tuple[Publish, ...]:
    """Each follower reads every replicated message here: in the compiled extension when
    it is there (native/src/entries.rs), which leaves what it cannot read exactly as
    below (a malformed entry, a string that is not UTF-8) to this code."""
    if native is not None and type(data) is bytes:
        decoded: tuple[Publish, ...] | None = native.decode_publishes(
            data, at, count, NewMsg, Publish, ROLLUPS
        )
        if decoded is not None:
            return decoded
    return _read_publishes(data, at, count, kind)


def _read_publishes(data: bytes, at: int, count: int, kind: str) -> tuple[Publish, ...]:
    msgs = []
    for _ in range(count):
        (size,) = _LEN.unpack_from(data, at)
        at += _LEN.size
        if at + size > len(data) or size < _PUB.size or data[at] != _PUBLISH:
            raise EntryDecodeError(f"{kind} entry with a malformed message at byte {at}")
        msgs.append(_decode_publish(data[at : at + size]))
        at += size
    _expect(data, at, kind)
    return tuple(msgs)


def _decode_barrier(data: bytes) -> Barrier:
    _expect(data, 1, "barrier")
    return Barrier()


_DECODERS = {
    _PUBLISH: _decode_publish,
    _DELETE: _decode_delete,
    _REMOVE: _decode_remove,
    _PURGE: _decode_purge,
    _EXPIRE: _decode_expire,
    _CONSUMER_OP: _decode_consumer_op,
    _BARRIER: _decode_barrier,
    _BATCH: _decode_batch,
    _FAST: _decode_fast,
    _RESTORED: _decode_restored,
    _RUN: _decode_run,
}


def pack_run(publishes: list[Publish]) -> list[Entry]:
    """Publishes to propose as one Run entry, where they can be (none a fast batch's,
    whose marks a Run does not carry). One publish too: a follower reads a Run's in the
    compiled extension and appends a plain one from its bytes, where a lone Publish is
    decoded in Python and appended as a message object."""
    if not publishes or any(p.fast is not None for p in publishes):
        return list(publishes)
    return [Run(tuple(publishes))]


def unpack_runs(entries: list[Entry], *, keep_raw: bool = False) -> list[Entry]:
    """`entries` with each Run replaced by the publishes it holds, in order; a RawRun
    too, unless `keep_raw` (its applier takes it whole)."""
    runs = (Run,) if keep_raw else (Run, RawRun)
    if not any(type(e) in runs for e in entries):
        return entries
    out: list[Entry] = []
    for entry in entries:
        if type(entry) in runs:
            out += entry.msgs  # type: ignore[union-attr]
        else:
            out.append(entry)
    return out
