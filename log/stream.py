"""One JetStream stream: its rules in front of a replication group in front of a store.

Publishes are checked against the *proposed* state (what will be true once
everything accepted commits) and proposed to the group; the group applies
committed batches here, which appends them to the store and enforces the
limits that delete old messages (rollups, per-subject, max_msgs, max_bytes).
Only apply mutates the log on the publish path, so a replicated group applying
the same entries on every node yields the same store everywhere.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from ingest.parser.mapping import Transform, compile_transform
from log import errors, publish
from log.config import StreamConfig, segment_codec
from log.dedup import DedupWindow
from log.errors import ApiError
from log.replication import ReplicationGroup, SingleNodeGroup
from log.republish import Republisher
from log.segments.api import (
    MsgStore,
    NewMsg,
    StoredMsg,
    StoreError,
    msg_size,
)
from log.timefmt import now_ns, rfc3339

HeaderReader = Callable[[bytes], Mapping[str, list[str]]]
AckSink = Callable[[bytes], None]
CommitListener = Callable[[int, str], None]
CoreSink = Callable[[str, bytes, bytes], None]  # subject, header block, payload
GroupFactory = Callable[
    [Callable[[list["Entry"]], None], Callable[[], None]], ReplicationGroup["Entry"]
]
_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Entry:
    """A replicated log entry: the message plus the decisions apply must repeat."""

    msg: NewMsg
    seq: int
    rollup: str
    ttl: int


class Stream:
    def __init__(
        self,
        config: StreamConfig,
        store: MsgStore,
        *,
        created_ns: int,
        read_headers: HeaderReader,
        sync_interval_ns: int | None = None,
        group: GroupFactory | None = None,
        on_sooner_expiry: Callable[[], None] | None = None,
        republish: CoreSink | None = None,
    ) -> None:
        """`on_sooner_expiry` runs when a committed TTL moves the next expiry earlier,
        so whoever arms the expiry timer can re-arm it; `republish` sends on core NATS."""
        self.config = config
        self._send_core = republish
        self._compile_rules(config)
        self._on_sooner_expiry = on_sooner_expiry
        self.store = store
        self.created_ns = created_ns
        self._overhead = store.overhead
        self._read_headers = read_headers
        if group is None:
            self._group: ReplicationGroup[Entry] = SingleNodeGroup(
                self._apply,
                store.sync,
                sync_interval_ns=sync_interval_ns,
                name=f"stream {config.name}",
            )
        else:
            self._group = group(self._apply, store.sync)
        if config.first_seq > store.state().first_seq:  # as the reference, at every open
            store.compact(config.first_seq)
        state = store.state()
        self._last_seq = state.last_seq
        self._base_seq = state.last_seq  # the group's commit index 0
        self._last_msg_id = ""
        self._dedup = DedupWindow(config.duplicate_window)
        self._pending: dict[str, list[int]] = {}  # subject -> [uncommitted count, last seq]
        self._pending_msgs = 0
        self._pending_bytes = 0
        self._ttls: list[tuple[int, int]] = []  # heap of (expires_ns, seq)
        self._never: list[int] = []  # seqs with `Nats-TTL: never`, ascending: max_age spares them
        self._commit_listeners: list[CommitListener] = []
        self._recover_window(state.last_seq)
        if config.allow_msg_ttl:
            self._recover_ttls()

    @property
    def name(self) -> str:
        return self.config.name

    def _compile_rules(self, config: StreamConfig) -> None:
        """The subject transform and republish rule, compiled once per config (validated)."""
        rule = config.subject_transform
        self._transform: Transform | None = (
            compile_transform(rule.src, rule.dest) if rule is not None else None
        )
        self._republisher = Republisher.of(config.republish) if self._send_core else None

    # -- recovery ------------------------------------------------------------

    def _recover_window(self, last_seq: int) -> None:
        """Reload the dedup window (and last msg id) from the newest messages only."""
        horizon = now_ns() - self._dedup.window_ns
        for msg in self.store.with_header(publish.MSG_ID, since_ts=horizon):
            msg_id = self._header(msg, publish.MSG_ID)
            if msg_id:
                self._dedup.add(msg_id, msg.seq, msg.ts)
            if msg.seq == last_seq:
                self._last_msg_id = msg_id

    def _recover_ttls(self) -> None:
        for msg in self.store.with_header(publish.TTL):
            text = self._header(msg, publish.TTL)
            if text:
                try:
                    ttl = publish.parse_ttl(text)
                except ApiError:
                    continue
                if ttl == publish.NEVER:
                    self._never.append(msg.seq)
                elif ttl > 0:
                    heapq.heappush(self._ttls, (msg.ts + ttl * _NS, msg.seq))

    def _is_marker(self, msg: StoredMsg) -> bool:
        return bool(msg.hdr) and publish.is_marker(self._read_headers(msg.hdr))

    def _header(self, msg: StoredMsg, name: str) -> str:
        if not msg.hdr:
            return ""
        values = self._read_headers(msg.hdr).get(name)
        return values[0] if values else ""

    # -- the proposed state the publish rules read ---------------------------

    @property
    def last_seq(self) -> int:
        return self._last_seq

    @property
    def last_msg_id(self) -> str:
        return self._last_msg_id

    @property
    def msgs(self) -> int:
        return self.store.state().msgs + self._pending_msgs

    @property
    def bytes(self) -> int:
        return self.store.state().bytes + self._pending_bytes

    def dedup_seq(self, msg_id: str) -> int | None:
        return self._dedup.lookup(msg_id, now_ns())

    def last_seq_for(self, subject: str) -> int:
        pending = self._pending.get(subject)
        if pending:
            return pending[1]
        state = self.store.subject_state(subject)
        return state.last_seq if state else 0

    def subject_msgs(self, subject: str) -> int:
        pending = self._pending.get(subject)
        state = self.store.subject_state(subject)
        return (state.msgs if state else 0) + (pending[0] if pending else 0)

    # -- publish: check, propose; apply on commit -----------------------------

    def publish(
        self,
        subject: str,
        hdr: bytes | None,
        data: bytes,
        headers: Mapping[str, list[str]],
        ack: AckSink | None,
    ) -> None:
        """Run the rules and propose; `ack` gets the PubAck (or error) once known."""
        if self.config.no_ack:
            ack = None
        if self._transform is not None:
            subject = self._transform.match(subject) or subject
        try:
            size = msg_size(subject, hdr, data, self._overhead)
        except UnicodeEncodeError:  # bytes that are not UTF-8 reach us surrogate-escaped
            if ack is not None:
                ack(publish.error_ack(self.name, errors.subject_not_utf8()))
            return
        try:
            decision = publish.check(self.config, self, subject, hdr, headers, data, size)
        except ApiError as err:
            if ack is not None:
                ack(publish.error_ack(self.name, err))
            return
        if isinstance(decision, publish.Duplicate):
            if ack is not None:
                ack(publish.duplicate_ack(self.name, decision.seq))
            return
        ttl = decision.ttl
        if ttl > 0 and self.config.subject_delete_marker_ttl:
            ttl, hdr = publish.floor_ttl(self.config, ttl, hdr)
            size = msg_size(subject, hdr, data, self._overhead)
        ts = now_ns()
        echo = None
        if self._republisher is not None:
            echo = self._republisher.message(
                stream=self.name,
                subject=subject,
                seq=self._last_seq + 1,
                ts=ts,
                last_seq=self.last_seq_for(subject),
                hdr=hdr,
                data=data,
            )
        seq = self._last_seq + 1
        self._last_seq = seq
        self._last_msg_id = decision.msg_id
        if decision.msg_id:
            self._dedup.add(decision.msg_id, seq, ts)
        pending = self._pending.setdefault(subject, [0, 0])
        pending[0] += 1
        pending[1] = seq
        self._pending_msgs += 1
        self._pending_bytes += size
        entry = Entry(NewMsg(subject, hdr, data, ts), seq, decision.rollup, ttl)
        self._group.propose((entry,), partial(self._committed, seq, subject, ack, echo))

    def add_commit_listener(self, listener: CommitListener) -> None:
        """Call listener(seq, subject) as each message commits (consumers wake on it)."""
        self._commit_listeners.append(listener)

    def remove_commit_listener(self, listener: CommitListener) -> None:
        self._commit_listeners.remove(listener)

    def _committed(
        self,
        seq: int,
        subject: str,
        ack: AckSink | None,
        echo: tuple[str, bytes, bytes] | None,
        error: BaseException | None,
    ) -> None:
        """The message's batch is durable (or failed): republish, answer, wake readers."""
        if error is not None:
            if ack is not None:
                ack(publish.error_ack(self.name, errors.store_failed(str(error) or "cancelled")))
            return
        if echo is not None and self._send_core is not None:
            self._send_core(*echo)
        if ack is not None:
            ack(publish.pub_ack(self.name, seq))
        for listener in self._commit_listeners:
            listener(seq, subject)

    @property
    def committed_seq(self) -> int:
        """The highest sequence a reader may see: committed (and acknowledged) messages only."""
        return self._base_seq + self._group.committed

    def _apply(self, entries: list[Entry]) -> None:
        first = self.store.append([e.msg for e in entries])
        if first != entries[0].seq:
            raise StoreError(
                f"stream {self.name}: store assigned seq {first}, log expected {entries[0].seq}"
            )
        for entry in entries:
            subject = entry.msg.subject
            pending = self._pending[subject]
            pending[0] -= 1
            if pending[0] == 0:
                del self._pending[subject]
            self._pending_msgs -= 1
            self._pending_bytes -= msg_size(subject, entry.msg.hdr, entry.msg.data, self._overhead)
            if entry.rollup == "sub":
                self.store.purge(subject, upto_seq=entry.seq)
            elif entry.rollup == "all":
                self.store.purge(">", upto_seq=entry.seq)
            if entry.ttl == publish.NEVER and self.config.allow_msg_ttl:
                self._never.append(entry.seq)
            elif entry.ttl > 0 and self.config.allow_msg_ttl:
                deadline = entry.msg.ts + entry.ttl * _NS
                sooner = not self._ttls or deadline < self._ttls[0][0]
                heapq.heappush(self._ttls, (deadline, entry.seq))
                if sooner and self._on_sooner_expiry is not None:
                    self._on_sooner_expiry()
        self._enforce_limits({e.msg.subject for e in entries})

    def _enforce_limits(self, subjects: set[str] | None) -> None:
        """Discard old: delete the oldest messages past each limit (subjects None = all)."""
        cfg = self.config
        per = cfg.max_msgs_per_subject
        if per > 0:
            self.store.trim_subjects(self.store.subjects() if subjects is None else subjects, per)
        if cfg.discard != "old" or (cfg.max_msgs <= 0 and cfg.max_bytes <= 0):
            return
        state = self.store.state()
        excess = state.msgs - cfg.max_msgs if cfg.max_msgs > 0 else 0
        if excess > 0:
            cut = next(
                itertools.islice(self.store.seqs_for(">", state.first_seq), excess - 1, None)
            )
            self.store.purge(">", upto_seq=cut + 1)
            state = self.store.state()
        while cfg.max_bytes > 0 and state.bytes > cfg.max_bytes and state.msgs:
            oldest = self.store.load_next(state.first_seq)
            if oldest is None:
                break
            self.store.remove(oldest.seq)
            state = self.store.state()

    def commit_barrier(self, seq: int) -> asyncio.Future[int] | None:
        """What to await before revealing message `seq` to a reader (None: already committed).

        Each proposal is one entry, so the group's commit index maps to a sequence;
        batches commit in order, so the newest proposal committing implies `seq` has.
        """
        if seq <= self._base_seq + self._group.committed:
            return None
        return self._group.barrier()

    # -- expiry ---------------------------------------------------------------

    def expire(self, now: int) -> int:
        """Delete what max_age and per-message TTLs retire by `now`; return markers placed.

        With subject delete markers on, each subject this empties gets a marker,
        proposed like a publish, so KV watchers learn that the key expired.
        Markers expiring in turn leave none, or they would never stop.
        """
        emptied: dict[str, None] | None = {} if self.config.subject_delete_marker_ttl else None
        if self.config.max_age > 0:
            self._expire_aged(now - self.config.max_age, emptied)
        while self._ttls and self._ttls[0][0] <= now:
            _, seq = heapq.heappop(self._ttls)
            if emptied is not None:
                msg = self.store.load(seq)
                if msg is not None and not self._is_marker(msg):
                    emptied[msg.subject] = None
            self.store.remove(seq)
        if not emptied:
            return 0
        hdr = publish.marker_header(self.config)
        headers = self._read_headers(hdr)
        placed = [subject for subject in emptied if self.subject_msgs(subject) == 0]
        for subject in placed:
            self.publish(subject, hdr, b"", headers, None)
        return len(placed)

    def _expire_aged(self, cutoff: int, emptied: dict[str, None] | None) -> None:
        """max_age retires the log's prefix older than cutoff, but passes over messages whose
        TTL is never, as the reference does; without those the store cuts the prefix at once."""
        never = self._live_never()
        if not never:
            if emptied is not None:
                emptied.update(
                    (m.subject, None) for m in self._older(cutoff) if not self._is_marker(m)
                )
            self.store.expire_before(cutoff)
            return
        for msg in list(self._older(cutoff)):
            if msg.seq not in never:
                if emptied is not None and not self._is_marker(msg):
                    emptied[msg.subject] = None
                self.store.remove(msg.seq)

    def _older(self, cutoff: int) -> Iterator[StoredMsg]:
        """Live messages from the first on, while older than cutoff."""
        seq = 0
        while (msg := self.store.load_next(seq)) is not None and msg.ts < cutoff:
            yield msg
            seq = msg.seq + 1

    def _live_never(self) -> set[int]:
        """The never-expiring seqs still stored (deletes and purges drop them lazily)."""
        if self._never:
            self._never = [seq for seq in self._never if self.store.load(seq) is not None]
        return set(self._never)

    def next_expiry(self) -> int | None:
        """When `expire` next has work, in nanoseconds since the epoch."""
        deadlines = [self._ttls[0][0]] if self._ttls else []
        if self.config.max_age > 0:
            never = self._live_never()
            oldest = next((m for m in self._older(now_ns() + 1) if m.seq not in never), None)
            if oldest is not None:
                deadlines.append(oldest.ts + self.config.max_age)
        return min(deadlines) if deadlines else None

    # -- administrative operations (API) --------------------------------------

    def update(self, config: StreamConfig) -> None:
        """Adopt an already-checked config; tighter limits take effect at once."""
        self.config = config
        self._compile_rules(config)
        self.store.set_compression(segment_codec(config.compression))
        self._dedup.window_ns = config.duplicate_window
        self._enforce_limits(None)

    def delete_msg(self, seq: int) -> None:
        if self.config.sealed:
            raise errors.sealed()
        if self.config.deny_delete:
            raise errors.msg_delete_failed("message delete not permitted")
        if not self.store.remove(seq, explicit=True):  # explicit: the lake deletes it too
            raise errors.msg_delete_failed("no message found")

    def purge(self, subject_filter: str = "", *, upto_seq: int = 0, keep: int = 0) -> int:
        if self.config.sealed:
            raise errors.sealed()
        if self.config.deny_purge:
            raise errors.purge_failed("stream purge not permitted")
        return self.store.purge(subject_filter or ">", upto_seq=upto_seq, keep=keep, explicit=True)

    async def flush(self) -> None:
        """Wait until every accepted publish is committed (and acknowledged)."""
        await self._group.flush()

    async def close(self) -> None:
        await self._group.close()
        self.store.close()

    async def delete(self) -> None:
        await self._group.close()
        self.store.delete()

    # -- the state JSON of stream info ----------------------------------------

    def state_json(
        self, *, consumers: int = 0, deleted_details: bool = False, subjects_filter: str = ""
    ) -> dict[str, Any]:
        state = self.store.state()
        out: dict[str, Any] = {
            "messages": state.msgs,
            "bytes": state.bytes,
            "first_seq": state.first_seq if state.last_seq else 0,  # never written: 0
            "first_ts": rfc3339(state.first_ts if state.msgs else 0),
            "last_seq": state.last_seq,
            "last_ts": rfc3339(state.last_ts),
        }
        if state.num_subjects:
            out["num_subjects"] = state.num_subjects
        if subjects_filter:
            counts = self.store.subjects(subjects_filter)
            if counts:
                out["subjects"] = dict(sorted(counts.items()))
        if state.num_deleted:
            if deleted_details:
                out["deleted"] = list(state.deleted) or self._interior_gaps(state.first_seq)
            out["num_deleted"] = state.num_deleted
        out["consumer_count"] = consumers
        return out

    def _interior_gaps(self, first_seq: int) -> list[int]:
        """Deleted sequences between first and last, for stores that only count them."""
        gaps: list[int] = []
        expected = first_seq
        for seq in self.store.seqs_for(">", first_seq):
            gaps.extend(range(expected, seq))
            expected = seq + 1
        return gaps

    def snapshot_config(self) -> bytes:
        """What the engine persists next to the store to recreate this stream at start."""
        body = {"config": self.config.to_json(), "created": rfc3339(self.created_ns)}
        return json.dumps(body, indent=1).encode()
