"""The message-store contract shared by the file (Arrow segment) and memory stores.

The stream layer (`log/`) owns the JetStream rules (limits, dedup, expected
headers, rollups); a store only keeps numbered messages and answers lookups.
Keeping the two apart is what lets replication slot in between them: the
stream proposes, the replication group commits, and the store applies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol


class StoreError(Exception):
    """A store could not do what was asked; the message names the stream and file."""


class CorruptSegmentError(StoreError):
    """A sealed segment failed its checksum: it is reported, never served."""


class StoredMsg(NamedTuple):
    """A message as read back. A tuple: consumers build hundreds of thousands a second,
    and a frozen dataclass costs them 2.5x as much to construct."""

    seq: int
    ts: int  # nanoseconds since the Unix epoch, UTC
    subject: str
    hdr: bytes | None  # the raw NATS/1.0 header block, None when the message had none
    data: bytes


class NewMsg(NamedTuple):
    """A message proposed for the log; the store assigns its sequence.

    A tuple, for the same reason as StoredMsg, and because a batch of them is
    one Arrow conversion (`ipc.arrow_batch`) with the fields in this order.
    """

    subject: str
    hdr: bytes | None
    data: bytes
    ts: int


@dataclass(frozen=True, slots=True)
class SubjectState:
    msgs: int
    first_seq: int
    last_seq: int


@dataclass(slots=True)
class StoreState:
    """Mirrors JetStream's StreamState; `first_seq` is last_seq + 1 when empty."""

    msgs: int = 0
    bytes: int = 0
    first_seq: int = 0
    first_ts: int = 0
    last_seq: int = 0
    last_ts: int = 0
    num_subjects: int = 0
    num_deleted: int = 0
    deleted: list[int] = field(default_factory=list)


class Overhead(NamedTuple):
    """Bytes the reference counts per message beyond subject, headers and payload.

    Stream info `bytes`, max_bytes and account usage must agree with nats-server,
    so the framing of its own stores is counted, not that of our Arrow files.
    """

    base: int
    with_headers: int  # added when the message has a header block


FILE_OVERHEAD = Overhead(30, 4)  # record length, seq, ts, subject length, hash (+ hdr length)
MEMORY_OVERHEAD = Overhead(16, 0)


def msg_size(
    subject: str, hdr: bytes | None, data: bytes, overhead: Overhead = FILE_OVERHEAD
) -> int:
    """Bytes a message counts for against max_bytes, as the reference's store counts them."""
    size = overhead.base + len(subject.encode()) + len(data)
    if hdr:
        size += overhead.with_headers + len(hdr)
    return size


class Rows(NamedTuple):
    """New messages already laid out as one segment batch (`ipc.run_rows`): a follower
    appends a replicated run without building a `NewMsg` per message."""

    payload: bytes  # the batch's IPC message, numbered from `first`
    first: int
    subjects: list[str]  # each message's
    sizes: bytes  # what each counts for (`msg_size`), native-endian uint64s
    total: int  # their sum
    min_ts: int
    max_ts: int
    last_ts: int


class MsgStore(Protocol):
    overhead: Overhead  # the reference store's byte counting this store follows
    lake_mark: int | None  # rows above it are kept for the lake; None: no lake holds them

    def append(self, msgs: Sequence[NewMsg]) -> int:
        """Write msgs as one batch with consecutive sequences; return the first one.

        The write is buffered: it is durable only once `sync()` returns.
        """

    def append_rows(self, rows: Rows) -> None:
        """As `append`, for messages already laid out; StoreError (nothing written) unless
        `rows.first` is the next seq."""

    def sync(self) -> None:
        """Make every append so far durable. Safe to call from a worker thread."""

    def load(self, seq: int) -> StoredMsg | None:
        """The message at seq, or None if it never existed or was deleted."""

    def load_run(self, start_seq: int, upto: int, limit: int) -> list[StoredMsg]:
        """Some live messages from start_seq on, in order: at most limit, none above upto.

        Possibly fewer than are available (a run may stop where storage does), but
        never none while one exists in range.
        """

    def load_many(self, seqs: Sequence[int]) -> list[StoredMsg]:
        """The live messages among ascending seqs, in order (deleted ones left out)."""

    def retained(self, start_seq: int, upto: int, max_bytes: int) -> tuple[list[StoredMsg], int]:
        """Rows still kept in start_seq..upto, retired ones too, and the seq they cover to."""

    def explicit_size(self) -> int:
        """Bytes of the log of what clients erased (see `remove`'s `explicit`)."""

    def explicit_log(self, start: int, end: int) -> bytes:
        """That log's bytes start..end (the same on every replica)."""

    def extend_explicit(self, data: bytes) -> None:
        """Append another replica's log bytes beyond this one's."""

    def load_next(self, start_seq: int, subject_filter: str = ">") -> StoredMsg | None:
        """The first live message with seq >= start_seq whose subject matches the filter."""

    def with_header(self, name: str, *, since_ts: int = 0) -> list[StoredMsg]:
        """Live messages not older than since_ts whose header block mentions `name`
        (any case; callers parse the headers to be sure), in seq order."""

    def load_last(self, subject_filter: str = ">") -> StoredMsg | None:
        """The live message with the highest seq whose subject matches the filter."""

    def remove(self, seq: int, *, explicit: bool = False) -> bool:
        """Delete one message; False if it was not there.

        Deletes ride the appends' group commit: written at once, durable once
        the next `sync()` returns (an fsync per delete would stall the loop).
        `explicit` says a client asked for it (STREAM.MSG.DELETE): such deletes
        reach the lake; the rest (limits, max_age, TTL, rollups) only retire
        the message from the live log, and the lake keeps it.
        """

    def remove_many(self, seqs: Iterable[int]) -> int:
        """Delete the live messages among seqs, with one write to the delete log (how a
        consumer's acks on an interest or work-queue stream arrive: in runs); returns
        how many were there. Never explicit: these retire, the lake keeps them."""

    def purge(
        self,
        subject_filter: str = ">",
        *,
        upto_seq: int = 0,
        keep: int = 0,
        explicit: bool = False,
    ) -> int:
        """Delete matching messages; return how many.

        A victim matches the filter, is below upto_seq when that is set, and is
        not among the newest `keep` matching messages (keep counts across all
        matching subjects, as the reference does). `explicit` as for `remove`
        (STREAM.PURGE is explicit; per-subject limits and rollups are not).
        """

    def trim_subjects(self, subjects: Iterable[str], keep: int) -> int:
        """Keep only the newest `keep` (>= 1) messages of each subject; return how many went.

        max_msgs_per_subject after a committed batch: the same victims as a
        `purge(subject, keep=keep)` per subject, as one delete.
        """

    def expire_before(self, ts: int) -> int:
        """Delete every message older than ts (max_age); return how many went."""

    def set_compression(self, codec: str | None) -> None:
        """Arrow IPC codec ("zstd", "lz4") for segments sealed from now on; None: none.
        A memory store keeps no segments and ignores it."""

    def compact(self, first_seq: int) -> int:
        """Start the log at first_seq: delete what is below it and, past the end, number the
        next message first_seq (a stream's `first_seq`); return how many went."""

    def skip(self, next_seq: int) -> None:
        """Number the next message next_seq; the seqs passed over count as deleted (a
        mirror keeps its origin's numbering, gaps included)."""

    def state(self, *, with_deleted: bool = False) -> StoreState:
        """Counts and bounds of the live messages; `deleted` is listed only when asked."""

    def totals(self) -> tuple[int, int]:
        """`state()`'s msgs and bytes alone: the limit rules read them for every publish
        to a stream with `max_msgs` or `max_bytes` (a KV bucket), and a whole state
        (the first message's time among it) costs more than the rule."""

    def subject_state(self, subject: str) -> SubjectState | None:
        """O(1) state of one literal subject (the per-subject index)."""

    def subjects(self, subject_filter: str = ">") -> dict[str, int]:
        """Live message count per subject matching the filter."""

    def seqs_for(self, subject_filter: str, start_seq: int) -> Iterable[int]:
        """Live sequences matching the filter from start_seq on, ascending."""

    def close(self) -> None:
        """Flush, sync and release files."""

    def delete(self) -> None:
        """Remove the stream's data from disk (stream deleted)."""
