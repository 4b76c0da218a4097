"""What a stream's committed entries do to its store: the replicated state machine.

Every member of a stream's group runs one `Applier` over its own store and
hands it the same entries in the same order, so it must read nothing but the
entries, its store and the stream's config (no clock, nothing only the
proposer knows), and applying an entry again over a store that already
reflects it (a restarted member replays its log) must change nothing: a
publish the store holds is skipped, deleting an absent message is a no-op,
and a purge or max_age expiry only considers the seqs its proposer saw.
A gap (a publish beyond the store's next seq) is a bug and raises, except in a
mirror, whose copies keep their origin's seqs.

Besides the store it keeps the state a member needs to become leader: the
dedup window, the last msg id, and the TTLs pending.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from log import publish, schedules
from log.config import StreamConfig
from log.dedup import DedupWindow
from log.errors import ApiError
from log.segments.api import MsgStore, StoredMsg, StoreError
from log.streams.entries import (
    Batch,
    ConsumerOp,
    Delete,
    Entry,
    Expire,
    Publish,
    Purge,
    RawRun,
    Remove,
    Restored,
    unpack_runs,
)
from log.timefmt import now_ns

HeaderReader = Callable[[bytes], Mapping[str, list[str]]]
ConsumerOps = Callable[[str, bytes], None]  # consumer name, its op
Applied = Callable[[list[Publish]], None]
AppliedRows = Callable[[RawRun, int], None]  # a plain run appended whole, its last seq
_NS = 1_000_000_000


class Applier:
    """`outcomes` holds the requests this member proposed and waits on (request -> what
    apply found: was the message there, how many purged, which subjects an expiry
    emptied); entries from elsewhere find no slot there and leave nothing behind."""

    def __init__(
        self,
        config: StreamConfig,
        store: MsgStore,
        *,
        read_headers: HeaderReader,
        applied: Applied,
        applied_rows: AppliedRows,
        on_sooner_expiry: Callable[[], None] | None,
    ) -> None:
        """`applied` hears of every run of publishes applied (the proposer settles its
        in-flight state), `applied_rows` of a plain RawRun appended whole;
        `on_sooner_expiry` of a TTL moving the next expiry earlier."""
        self.store = store
        self._read_headers = read_headers
        self._applied = applied
        self._applied_rows = applied_rows
        self.restore_began = False  # a restore's first entry applied (`STREAM.RESTORE`)
        self._on_sooner_expiry = on_sooner_expiry
        self.consumer_ops: ConsumerOps | None = None
        self.outcomes: dict[int, Any] = {}
        self.set_config(config)
        self._entries = 0  # entries applied, counted as the group counts `committed`
        self._marks: deque[tuple[int, int]] = deque()  # (entries applied, applied seq)
        self.reload()

    def reload(self) -> None:
        """Take everything but the entry count from the store: at open, and after a
        snapshot moved the store to another point of the log."""
        last = self.store.state().last_seq
        self.stored_last = last  # the store's last seq: only appends move it
        self.last_msg_id = ""
        self._applied_seq = self._committed_seq = last
        self._marks.clear()
        self.dedup = DedupWindow(self.config.duplicate_window)
        self.ttls: list[tuple[int, int]] = []  # heap of (expires_ns, seq)
        self._never: list[int] = []  # seqs with `Nats-TTL: never`, ascending: max_age spares them
        self._recover_window(last)
        if self.config.allow_msg_ttl:
            self._recover_ttls()
        self.schedules = schedules.Book(self._read_headers)
        if self.config.allow_msg_schedules:
            self._recover_schedules()

    def set_config(self, config: StreamConfig) -> None:
        self.config = config
        # Per-subject trimming can shrink the bytes newer than a message, so with both
        # limits the outcome of a run would depend on where batches split: go one by one.
        self._limit_each = config.max_bytes > 0 and config.max_msgs_per_subject > 0
        # Whether an append may pass a limit (`enforce_limits` has work): most streams not.
        self._limited = config.max_msgs_per_subject > 0 or (
            config.discard == "old" and (config.max_msgs > 0 or config.max_bytes > 0)
        )
        # A RawRun goes to the store whole unless apply must see each message: a mirror's
        # gaps, schedules, limits enforced one by one.
        self._whole = config.mirror is None and not config.allow_msg_schedules
        self._takes_rows = self._whole and not self._limit_each

    # -- recovery ------------------------------------------------------------

    def _recover_window(self, last_seq: int) -> None:
        """Reload the dedup window (and last msg id) from the newest messages only."""
        horizon = now_ns() - self.dedup.window_ns
        for msg in self.store.with_header(publish.MSG_ID, since_ts=horizon):
            msg_id = self.header(msg, publish.MSG_ID)
            if msg_id:
                self.dedup.add(msg_id, msg.seq, msg.ts)
            if msg.seq == last_seq:
                self.last_msg_id = msg_id

    def _recover_ttls(self) -> None:
        for msg in self.store.with_header(publish.TTL):
            text = self.header(msg, publish.TTL)
            if text:
                try:
                    ttl = publish.parse_ttl(text)
                except ApiError:
                    continue
                if ttl == publish.NEVER:
                    self._never.append(msg.seq)
                elif ttl > 0:
                    heapq.heappush(self.ttls, (msg.ts + ttl * _NS, msg.seq))

    def _recover_schedules(self) -> None:
        """Schedules still standing (the newest message of their subject), and where
        their firings moved them; a repeat missed while down fires once, soon."""
        now = now_ns()
        for msg in self.store.with_header(schedules.SCHEDULE):
            headers = self._read_headers(msg.hdr) if msg.hdr else {}
            if schedules.SCHEDULE in headers:
                last = self.store.load_last(msg.subject)
                if last is None or last.seq != msg.seq:
                    continue
            self.schedules.applied(msg.subject, msg.seq, msg.ts, headers, now)

    def is_marker(self, msg: StoredMsg) -> bool:
        return bool(msg.hdr) and publish.is_marker(self._read_headers(msg.hdr))

    def header(self, msg: StoredMsg, name: str) -> str:
        if not msg.hdr:
            return ""
        values = self._read_headers(msg.hdr).get(name)
        return values[0] if values else ""

    # -- commit tracking ------------------------------------------------------

    def committed_seq(self, committed: int) -> int:
        """The highest seq applied by the group's `committed`-th entry (publishes only)."""
        marks = self._marks
        while marks and marks[0][0] <= committed:
            self._committed_seq = marks.popleft()[1]
        return self._committed_seq

    # -- apply ----------------------------------------------------------------

    def apply(self, entries: list[Entry], committed: int, *, runs: bool) -> None:
        """Apply committed entries: consecutive publishes are appended as one batch, and
        consecutive removes (interest retention proposes one per ack) are one store call.

        Limits are enforced at the end of each run of publishes; a run ends before any
        other entry and before a rollup, so the result is the same however the group
        splits the log into batches (with max_bytes and per-subject limits together,
        message by message). `committed` is the group's count before these entries; with
        `runs` (a replicated stream's log) they may hold Runs, applied as the publishes
        they hold, and a lone RawRun (a replica's usual entry: one client read's
        publishes, or a KV put) goes to the store whole where it can: also, under limits
        enforced one by one, a run of one message, whose whole is that one message.
        """
        self.committed_seq(committed)  # settle what committed since: marks stay few
        run = entries[0] if runs and len(entries) == 1 else None
        if type(run) is RawRun and (self._takes_rows or (self._whole and run.count == 1)):
            self._apply_raw(run)
        else:
            self._apply_all(unpack_runs(entries, keep_raw=self._takes_rows) if runs else entries)
        self._entries += len(entries)  # as the group counts them: a Run is one
        self._marks.append((self._entries, self._applied_seq))

    def _apply_all(self, entries: list[Entry]) -> None:
        start = 0
        removes: list[int] = []  # consecutive Removes (one per ack): one store call
        for i, entry in enumerate(entries):
            if type(entry) is Publish:
                if removes:
                    self.store.remove_many(removes)
                    removes = []
                if i > start and (entry.rollup or self._limit_each):
                    self._apply_publishes(entries[start:i])  # type: ignore[arg-type]
                    start = i
                continue
            if i > start:
                self._apply_publishes(entries[start:i])  # type: ignore[arg-type]
            start = i + 1
            if isinstance(entry, Remove):
                removes.extend(entry.seqs)
                continue
            if removes:
                self.store.remove_many(removes)
                removes = []
            self._apply_other(entry)
        if removes:
            self.store.remove_many(removes)
        if start < len(entries):
            self._apply_publishes(entries[start:] if start else entries)  # type: ignore[arg-type]

    def _apply_raw(self, run: RawRun) -> None:
        """A follower's run from its log bytes: appended whole when its publishes are plain
        and follow the store's last (not a replay), else as the publishes it holds. A plain
        publish has no msg id, rollup or TTL, so the dedup window and TTLs stay as they are."""
        rows = run.rows(self.store.overhead)
        if rows is None or rows.first != self.stored_last + 1:
            self._apply_all(list(run.msgs))
            return
        self.store.append_rows(rows)
        last = rows.first + len(rows.subjects) - 1
        self.stored_last = last
        self.last_msg_id = ""
        if last > self._applied_seq:
            self._applied_seq = last
        self._applied_rows(run, last)
        if self._limited:
            self.enforce_limits(set(rows.subjects))

    def _apply_publishes(self, run: list[Publish], *, gaps: bool = False) -> None:
        """Append what the store does not hold yet (a replay skips what it does); with
        `gaps` (a mirror's copies, a restore's rows) the seqs may skip some."""
        stored = self.stored_last
        fresh = run if run[0].seq > stored else [e for e in run if e.seq > stored]
        if fresh:
            gaps = gaps or self.config.mirror is not None
            if gaps and fresh[-1].seq - stored != len(fresh):
                self._append_with_gaps(fresh)
            else:
                self._append(fresh)
            self.stored_last = fresh[-1].seq
        dedup = self.dedup
        for entry in run:
            if entry.msg_id:
                dedup.add(entry.msg_id, entry.seq, entry.msg.ts)
            if (entry.rollup or entry.ttl) and entry.seq > stored:
                self._apply_rules(entry)
            if self.config.allow_msg_schedules and entry.seq > stored:
                self._apply_schedule(entry)
        last = run[-1]
        self.last_msg_id = last.msg_id
        if last.seq > self._applied_seq:
            self._applied_seq = last.seq
        self._applied(run)
        if fresh and self._limited:
            self.enforce_limits({e.msg.subject for e in fresh})

    def _append(self, run: list[Publish]) -> None:
        first = self.store.append([e.msg for e in run])
        if first != run[0].seq:
            raise StoreError(
                f"stream {self.config.name}: store assigned seq {first}, log expected {run[0].seq}"
            )

    def _append_with_gaps(self, run: list[Publish]) -> None:
        """A mirror's copies keep their origin's seqs: what the origin deleted (or the
        mirror's filter passed over) is skipped, and counts as deleted here too."""
        start = 0
        for i in range(1, len(run) + 1):
            if i == len(run) or run[i].seq != run[i - 1].seq + 1:
                self.store.skip(run[start].seq)
                self._append(run[start:i])
                start = i

    def _apply_rules(self, entry: Publish) -> None:
        """A message's rollup and TTL, once it is stored."""
        if entry.rollup == "sub":
            self.store.purge(entry.msg.subject, upto_seq=entry.seq)
        elif entry.rollup == "all":
            self.store.purge(">", upto_seq=entry.seq)
        if entry.ttl == publish.NEVER and self.config.allow_msg_ttl:
            self._never.append(entry.seq)
        elif entry.ttl > 0 and self.config.allow_msg_ttl:
            deadline = entry.msg.ts + entry.ttl * _NS
            sooner = not self.ttls or deadline < self.ttls[0][0]
            heapq.heappush(self.ttls, (deadline, entry.seq))
            if sooner and self._on_sooner_expiry is not None:
                self._on_sooner_expiry()

    def _apply_schedule(self, entry: Publish) -> None:
        """Keep the schedule book; a one-off's firing retires its schedule (the purge is
        bounded by the firing's seq, so a replay leaves a newer schedule alone). The clock
        read here only dates the book's next firing, which no store state depends on:
        members may disagree on it, and only the leader fires."""
        msg = entry.msg
        headers = self._read_headers(msg.hdr) if msg.hdr else {}
        moved = self.schedules.applied(msg.subject, entry.seq, msg.ts, headers, now_ns())
        if moved and self._on_sooner_expiry is not None:
            self._on_sooner_expiry()
        retired = self.schedules.purged_by(headers)
        if retired:
            self.store.purge(retired, upto_seq=entry.seq)

    def _apply_other(self, entry: Entry) -> None:
        if type(entry) is RawRun:
            self._apply_raw(entry)
        elif isinstance(entry, Batch):
            if entry.msgs:  # one append: on disk, the whole batch or none of it
                self._apply_publishes(list(entry.msgs))
        elif isinstance(entry, Delete):
            self._found(entry.req, self.store.remove(entry.seq, explicit=True))
        elif isinstance(entry, Purge):
            self._found(entry.req, self._apply_purge(entry))
        elif isinstance(entry, Expire):
            self._apply_expire(entry)
        elif isinstance(entry, ConsumerOp) and self.consumer_ops is not None:
            self.consumer_ops(entry.consumer, entry.op)
        elif isinstance(entry, Restored):
            self._apply_restored(entry)

    def _apply_restored(self, entry: Restored) -> None:
        """A backup's rows keep their seqs; deletes at its end still number the next."""
        self.restore_began = True
        if entry.msgs:
            self._apply_publishes(list(entry.msgs), gaps=True)
        if entry.through > self.stored_last:
            self.store.skip(entry.through + 1)
            self.stored_last = entry.through
            self._applied_seq = max(self._applied_seq, entry.through)

    def _found(self, req: int, outcome: object) -> None:
        if req in self.outcomes:
            self.outcomes[req] = outcome

    def _apply_purge(self, entry: Purge) -> int:
        """Purge among seqs up to the entry's `last_seq`, also when the store holds more."""
        flt = entry.subject_filter or ">"
        bound = entry.last_seq + 1
        if entry.upto_seq:
            bound = min(bound, entry.upto_seq)
        if entry.keep and self.stored_last > entry.last_seq:  # a replay: keep counts below
            matching = list(
                itertools.takewhile(lambda s: s <= entry.last_seq, self.store.seqs_for(flt, 0))
            )
            if entry.keep >= len(matching):
                return 0
            bound = min(bound, matching[len(matching) - entry.keep])
            return self.store.purge(flt, upto_seq=bound, explicit=True)
        return self.store.purge(flt, upto_seq=bound, keep=entry.keep, explicit=True)

    def enforce_limits(self, subjects: set[str] | None) -> None:
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

    # -- expiry ---------------------------------------------------------------

    def _apply_expire(self, entry: Expire) -> None:
        """Retire the entry's messages; its proposer also learns which subjects emptied."""
        ours = entry.req in self.outcomes
        emptied: dict[str, None] | None = (
            {} if ours and self.config.subject_delete_marker_ttl else None
        )
        if entry.cutoff:
            self._expire_aged(entry.cutoff, entry.last_seq, emptied)
        if entry.seqs:
            gone = set(entry.seqs)
            while self.ttls and self.ttls[0][1] in gone:  # the same heap on every member
                heapq.heappop(self.ttls)
            for seq in entry.seqs:
                if emptied is not None:
                    msg = self.store.load(seq)
                    if msg is not None and not self.is_marker(msg):
                        emptied[msg.subject] = None
                self.store.remove(seq)
        if ours:
            self.outcomes[entry.req] = emptied

    def _expire_aged(self, cutoff: int, last_seq: int, emptied: dict[str, None] | None) -> None:
        """max_age retires the log's prefix older than cutoff, but passes over messages whose
        TTL is never, as the reference does; without those the store cuts the prefix at once
        (unless it holds messages past `last_seq`: a replay, which goes one by one)."""
        never = self._live_never()
        if not never and self.stored_last <= last_seq:
            if emptied is not None:
                emptied.update(
                    (m.subject, None) for m in self._older(cutoff) if not self.is_marker(m)
                )
            self.store.expire_before(cutoff)
            return
        for msg in list(self._older(cutoff)):
            if msg.seq > last_seq:
                break
            if msg.seq not in never:
                if emptied is not None and not self.is_marker(msg):
                    emptied[msg.subject] = None
                self.store.remove(msg.seq)

    def _older(self, cutoff: int) -> Iterator[StoredMsg]:
        """Live messages from the first on, while older than cutoff."""
        seq = 0
        while (msg := self.store.load_next(seq)) is not None and msg.ts < cutoff:
            yield msg
            seq = msg.seq + 1

    def first_aged(self, cutoff: int) -> StoredMsg | None:
        """The oldest message max_age retires by cutoff (messages whose TTL is never stay)."""
        never = self._live_never()
        return next((m for m in self._older(cutoff) if m.seq not in never), None)

    def _live_never(self) -> set[int]:
        """The never-expiring seqs still stored (deletes and purges drop them lazily)."""
        if self._never:
            self._never = [seq for seq in self._never if self.store.load(seq) is not None]
        return set(self._never)

    def due(self, now: int) -> tuple[int, ...]:
        """The seqs whose TTL ran out by `now`, ascending, without popping them: a heap's
        nodes are no earlier than their parents, so only due nodes' children are looked at."""
        heap, due = self.ttls, []
        stack = [0] if heap else []
        while stack:
            i = stack.pop()
            if i < len(heap) and heap[i][0] <= now:
                due.append(heap[i][1])
                stack += (2 * i + 1, 2 * i + 2)
        return tuple(sorted(due))
