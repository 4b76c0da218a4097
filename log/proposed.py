"""A stream leader's proposed state, and the rules that admit a message into it.

The proposed state is what will be true once everything accepted commits: the
applied store plus the messages in flight (their counts per subject, sizes,
msg ids and counter values). The publish rules (`log.publish.check`) read it
rather than the store, so two publishes of one group commit see each other.
A published message and a mirrored copy enter it the same way; the applied
ones leave it as they apply (`settle`).

It is meaningful while the stream is accepting; a follower's only tracks the
last sequence it applied, so a member taking the leadership starts from its
applied state (`reset`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ingest.parser.headers import set_header
from ingest.parser.mapping import Transform, compile_transform
from log import counter, errors, publish, schedules
from log.config import StreamConfig
from log.errors import ApiError
from log.republish import Republisher
from log.segments.api import MsgStore, NewMsg, msg_size
from log.sources import SOURCE_HEADER
from log.streams.apply import Applier, HeaderReader
from log.streams.entries import Publish
from log.timefmt import now_ns

Echo = tuple[str, bytes, bytes] | None  # what republish sends once the message commits
Admitted = tuple[Publish, Echo, str]  # entry, republish, counter value ("" if none)


class Proposed:
    """Implements `log.publish.ProposedState` over a store and its applier."""

    def __init__(
        self,
        config: StreamConfig,
        store: MsgStore,
        applier: Applier,
        *,
        read_headers: HeaderReader,
        republishes: bool,
    ) -> None:
        """`republishes`: whether the stream can send on core NATS at all (else no
        republish message is ever built)."""
        self.store = store
        self._applier = applier
        self._read_headers = read_headers
        self._republishes = republishes
        self._overhead = store.overhead
        self.set_config(config)
        self._pending: dict[str, list[int]] = {}  # subject -> [uncommitted count, last seq]
        self._pending_msgs = 0
        self._pending_bytes = 0
        self._ids: dict[str, int] = {}  # msg id -> seq, of publishes not applied yet
        self._counters = counter.InFlight()
        self.last_seq = store.state().last_seq
        self.last_msg_id = applier.last_msg_id

    def set_config(self, config: StreamConfig) -> None:
        """Adopt a (validated) config: its subject transform and republish rule compiled once."""
        self.config = config
        rule = config.subject_transform
        self._transform: Transform | None = (
            compile_transform(rule.src, rule.dest) if rule is not None else None
        )
        self._republisher = Republisher.of(config.republish) if self._republishes else None
        # Whether the rules of a message without headers come down to its size: no
        # counter, seal, discard-new limit or republish can act on it.
        self._plain_runs = not (
            config.allow_msg_counter
            or config.sealed
            or config.discard == "new"
            or self._republisher is not None
        )

    # -- what the publish rules read -------------------------------------------

    @property
    def msgs(self) -> int:
        return self.store.totals()[0] + self._pending_msgs

    @property
    def bytes(self) -> int:
        return self.store.totals()[1] + self._pending_bytes

    def dedup_seq(self, msg_id: str) -> int | None:
        seq = self._ids.get(msg_id)
        return seq if seq is not None else self._applier.dedup.lookup(msg_id, now_ns())

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

    # -- entering it -------------------------------------------------------------

    def admit(
        self,
        subject: str,
        hdr: bytes | None,
        data: bytes,
        headers: Mapping[str, list[str]],
        *,
        trusted: bool = False,
    ) -> Admitted | publish.Duplicate:
        """Run the rules; an accepted message joins the proposed state. A `trusted`
        message (a schedule firing) skips the schedule rules a publisher is held to."""
        if self._transform is not None:
            subject = self._transform.match(subject) or subject
        try:
            size = msg_size(subject, hdr, data, self._overhead)
        except UnicodeEncodeError:  # bytes that are not UTF-8 reach us surrogate-escaped
            raise errors.subject_not_utf8() from None
        cfg = self.config
        incr = None
        if (cfg.allow_msg_counter or counter.INCR in headers) and not cfg.sealed:
            sourced = SOURCE_HEADER in headers
            incr = counter.increment(cfg.allow_msg_counter, headers, data, sourced=sourced)
        decision = publish.check(cfg, self, subject, hdr, headers, data, size)
        if isinstance(decision, publish.Duplicate):
            return decision
        rollup = decision.rollup
        if (
            headers
            and not trusted
            and schedules.touches(headers)
            and schedules.check(cfg, subject, headers, now_ns(), self.store, self._read_headers)
            and not rollup
        ):  # a schedule is a rollup of its subject: one schedule per subject
            hdr, rollup = set_header(hdr, publish.ROLLUP.encode(), b"sub"), "sub"
            size = msg_size(subject, hdr, data, self._overhead)
        total = None
        if incr is not None and cfg.allow_msg_counter:
            current = self._counters.get(subject) or counter.stored(
                self.store.load_last(subject), self._read_headers
            )
            total, hdr, data = counter.add(current, incr, subject, hdr, data, headers)
            size = msg_size(subject, hdr, data, self._overhead)
        ttl = decision.ttl
        if ttl > 0 and cfg.subject_delete_marker_ttl:
            ttl, hdr = publish.floor_ttl(cfg, ttl, hdr)
            size = msg_size(subject, hdr, data, self._overhead)
        seq = self.last_seq + 1
        entry = Publish(NewMsg(subject, hdr, data, now_ns()), seq, rollup, ttl, decision.msg_id)
        echo = self._enter(entry, size)
        if total is None:
            return entry, echo, ""
        self._counters.propose(subject, seq, total)
        return entry, echo, str(total.total)

    def admit_plain(self, subject: str, payloads: Sequence[bytes]) -> list[Publish] | None:
        """`admit` of messages without headers to one subject (a client read's run), all
        accepted at once where the rules come down to their sizes; None where another
        rule could act or one is too big: each is then admitted on its own. Per message
        this is a tuple and a clock read, where `admit` runs every rule: a quarter of an
        R3 leader's loop thread under `js pub async`."""
        cfg = self.config
        if not self._plain_runs or not payloads:
            return None
        if cfg.max_msg_size >= 0 and max(map(len, payloads)) > cfg.max_msg_size:
            return None
        if self._transform is not None:
            subject = self._transform.match(subject) or subject
        try:
            base = msg_size(subject, None, b"", self._overhead)  # each adds its payload
        except UnicodeEncodeError:  # refused one by one, as `admit` does
            return None
        first = self.last_seq + 1
        entries = [
            Publish(NewMsg(subject, None, data, now_ns()), seq)
            for seq, data in enumerate(payloads, first)
        ]
        self.last_msg_id = ""
        self._count_pending(
            subject, entries[-1].seq, len(entries), base * len(entries) + sum(map(len, payloads))
        )
        return entries

    def mirrored(
        self, seq: int, subject: str, hdr: bytes | None, data: bytes, ts: int
    ) -> tuple[Publish, Echo] | None:
        """An origin's message as a mirror stores it: at the origin's seq and timestamp,
        headers verbatim and unchecked (the origin checked them); None if already copied.
        Its TTL, and its rollup if this stream allows rollups, act here too: a KV purge
        then purges the mirror."""
        if seq <= self.last_seq:
            return None
        headers = self._read_headers(hdr) if hdr else {}
        cfg = self.config
        rollup = (headers.get(publish.ROLLUP) or [""])[0].strip()
        if not cfg.allow_rollup_hdrs or cfg.deny_purge or rollup not in ("sub", "all"):
            rollup = ""  # stored, but acts only where rollups are allowed (as the reference)
        ttl_text = (headers.get(publish.TTL) or [""])[0].strip()
        try:
            ttl = publish.parse_ttl(ttl_text) if ttl_text else 0
        except ApiError:
            ttl = 0
        entry = Publish(NewMsg(subject, hdr, data, ts), seq, rollup, ttl, "")
        return entry, self._enter(entry, msg_size(subject, hdr, data, self._overhead))

    def _enter(self, entry: Publish, size: int) -> Echo:
        """Count an accepted message as in flight; its republish, numbered as stored."""
        msg = entry.msg
        echo = None
        if self._republisher is not None:
            echo = self._republisher.message(
                stream=self.config.name,
                subject=msg.subject,
                seq=entry.seq,
                ts=msg.ts,
                last_seq=self.last_seq_for(msg.subject),
                hdr=msg.hdr,
                data=msg.data,
            )
        self.last_msg_id = entry.msg_id
        if entry.msg_id:
            self._ids[entry.msg_id] = entry.seq
        self._count_pending(msg.subject, entry.seq, 1, size)
        return echo

    def _count_pending(self, subject: str, last_seq: int, count: int, size: int) -> None:
        """`count` messages to `subject`, up to `last_seq`, of `size` bytes in all, in flight."""
        self.last_seq = last_seq
        pending = self._pending.setdefault(subject, [0, 0])
        pending[0] += count
        pending[1] = last_seq
        self._pending_msgs += count
        self._pending_bytes += size

    # -- leaving it --------------------------------------------------------------

    def settle(self, run: Sequence[Publish], *, following: bool) -> None:
        """Publishes applied: those proposed here are no longer in flight; a follower's
        proposed state follows what it applies."""
        pending_all, ids = self._pending, self._ids
        if pending_all:
            for entry in run:
                msg = entry.msg
                pending = pending_all.get(msg.subject)
                if pending is None:
                    continue
                pending[0] -= 1
                if pending[0] == 0:
                    del pending_all[msg.subject]
                self._pending_msgs -= 1
                self._pending_bytes -= msg_size(msg.subject, msg.hdr, msg.data, self._overhead)
        if self._counters:
            self._counters.settle((entry.msg.subject, entry.seq) for entry in run)
        if ids:
            for entry in run:
                if entry.msg_id and ids.get(entry.msg_id) == entry.seq:
                    del ids[entry.msg_id]
        if following and run:
            self.last_seq = max(self.last_seq, run[-1].seq)
            self.last_msg_id = run[-1].msg_id

    def follow(self, last_seq: int) -> bool:
        """A follower applied plain publishes through `last_seq` (no msg ids): as `settle`
        when nothing is in flight here; False (nothing done) when something is."""
        if self._pending or self._ids or self._counters:
            return False
        self.last_seq = max(self.last_seq, last_seq)
        self.last_msg_id = ""
        return True

    def reset(self) -> None:
        """Start over from the applied state: nothing is in flight any more (what was
        fails or commits without this member's bookkeeping)."""
        self.last_seq = self._applier.stored_last
        self.last_msg_id = self._applier.last_msg_id
        self._pending.clear()
        self._pending_msgs = self._pending_bytes = 0
        self._ids.clear()
        self._counters.clear()

    def save(self) -> tuple[Any, ...]:
        """The state as it is, for a batch refused halfway to put back (`restore`)."""
        scalars = (self.last_seq, self.last_msg_id, self._pending_msgs, self._pending_bytes)
        pending = {subject: list(counts) for subject, counts in self._pending.items()}
        return scalars, pending, dict(self._ids), self._counters.snapshot()

    def restore(self, saved: tuple[Any, ...]) -> None:
        scalars, self._pending, self._ids, counters = saved
        self.last_seq, self.last_msg_id, self._pending_msgs, self._pending_bytes = scalars
        self._counters.restore(counters)
