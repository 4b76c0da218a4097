"""One JetStream stream: its rules in front of a replication group in front of a store.

Publishes are checked against the *proposed* state (what will be true once
everything accepted commits) and proposed to the group (`log.streams.publishing`);
the group applies committed entries here. Every change to the store is such an entry (publish,
delete, purge, expiry, a consumer's removals, see `log.streams.entries`),
applied in log order on every member of the group, so every member's store
ends up the same. Apply therefore reads nothing that only the proposer has,
and applying an entry twice (a restarted member replays its log over its
store) changes nothing the first application did not.

Only a leader that has applied everything of earlier terms proposes (it is
`accepting`): its proposed state starts from its applied state.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from consensus.commits import OnCommit
from consensus.types import RaftError
from log import errors, publish, schedules
from log.batches import atomic
from log.batches import fast as fast_batch
from log.config import StreamConfig, segment_codec
from log.errors import ApiError
from log.proposed import Proposed
from log.replication import ReplicationGroup, SingleNodeGroup
from log.segments.api import MsgStore
from log.streams.apply import Applier, ConsumerOps, HeaderReader
from log.streams.entries import (
    Barrier,
    ConsumerOp,
    Delete,
    Entry,
    Expire,
    Publish,
    Purge,
    RawRun,
    Remove,
    Restored,
)
from log.streams.publishing import CoreSink, Publishing
from log.streams.state import state_json
from log.timefmt import now_ns, rfc3339

CommitListener = Callable[[int, str], None]
GroupFactory = Callable[
    [Callable[[list[Entry]], None], Callable[[], None]], ReplicationGroup[Entry]
]
T = TypeVar("T")


class StreamNotLeaderError(RuntimeError):
    """An administrative call reached a member not taking this stream's proposals: a
    follower, a leader still applying its predecessors' entries, or one that lost the
    leadership before the call committed."""

    def __init__(self, stream: str) -> None:
        super().__init__(f"stream {stream}: this server is not its leader (or not caught up)")
        self.stream = stream


class Stream(Publishing):
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
        """`on_sooner_expiry` runs when the next expiry may have moved earlier (a TTL
        committed, an expiry committed, the leadership arrived), so whoever arms the
        expiry timer can re-arm it; `republish` sends on core NATS.

        Without `group` the stream is a group of one, leader from the start; with one
        it proposes nothing until `set_leader(True)` and its barrier commit.
        """
        self.config = config
        self._send_core = republish
        self._on_sooner_expiry = on_sooner_expiry
        self.store = store
        self.created_ns = created_ns
        self._read_headers = read_headers
        if config.first_seq > store.state().first_seq:  # as the reference, at every open
            store.compact(config.first_seq)
        self._batches = atomic.Stager()
        self._fast = fast_batch.FastBatches(config.name)
        self._replicated = group is not None
        self.restoring = False  # a backup is being restored into it: publishes wait
        self._accepting = group is None
        self._epoch = 0  # counts leadership changes: a stale barrier must not open the gate
        self._expiring = False  # an expiry entry is in flight: do not propose another
        self._requests = itertools.count(random.getrandbits(62))  # unlike another leader's
        self._commit_listeners: list[CommitListener] = []
        self._stored_listeners: list[Callable[[], None]] = []
        self._applier = Applier(
            config,
            store,
            read_headers=read_headers,
            applied=self._settle_published,
            applied_rows=self._settle_rows,
            on_sooner_expiry=on_sooner_expiry,
        )
        # what publishes are checked against (meaningful while accepting)
        self.proposed = Proposed(
            config, store, self._applier, read_headers=read_headers, republishes=bool(republish)
        )
        if group is None:
            self._group: ReplicationGroup[Entry] = SingleNodeGroup(
                self._apply,
                store.sync,
                sync_interval_ns=sync_interval_ns,
                name=f"stream {config.name}",
            )
        else:
            self._group = group(self._apply, store.sync)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def consumer_ops(self) -> ConsumerOps | None:
        """Where apply hands each ConsumerOp entry, on every member (None: dropped)."""
        return self._applier.consumer_ops

    @consumer_ops.setter
    def consumer_ops(self, ops: ConsumerOps | None) -> None:
        self._applier.consumer_ops = ops

    @property
    def last_seq(self) -> int:
        """The last sequence proposed (while accepting) or applied."""
        return self.proposed.last_seq

    # -- leadership ------------------------------------------------------------

    @property
    def accepting(self) -> bool:
        """Whether this member proposes: the leader, once it applied every earlier entry."""
        return self._accepting

    def set_leader(self, leader: bool) -> None:
        """Follow the group's leadership (call it from its leader-change listener).

        A new leader proposes a barrier and starts accepting once it has applied it:
        only then does its applied state hold every entry of earlier terms, and the
        sequences it assigns continue the log with no gap or duplicate.
        """
        self._epoch += 1
        self._accepting = self.restoring = False  # a restore under way fails with the lead
        self._batches.clear()  # fast batches stay: their entries say where they stand
        self._applier.schedules.clear_inflight()
        if not leader:
            self._reset_proposed()  # what is in flight fails or commits without us
            return
        self._group.propose((Barrier(),), partial(self._caught_up, self._epoch))

    def _caught_up(self, epoch: int, error: BaseException | None) -> None:
        if error is not None or epoch != self._epoch:
            return  # the leadership went (or came again, with a barrier of its own)
        self._reset_proposed()
        self._accepting = True
        self._fast.lead(now_ns(), self._send_core)
        if self._on_sooner_expiry is not None:
            self._on_sooner_expiry()  # expiry is the leader's to propose: arm its timer

    def _reset_proposed(self) -> None:
        self.proposed.reset()
        self._expiring = False

    def restored(self) -> None:
        """A snapshot replaced the store's content (a follower caught up from a peer)."""
        self._applier.reload()
        self._reset_proposed()

    def _require_accepting(self) -> None:
        if not self._accepting:
            raise StreamNotLeaderError(self.name)

    def add_commit_listener(
        self, listener: CommitListener, stored: Callable[[], None] | None = None
    ) -> None:
        """Call listener(seq, subject) as each message this member proposed commits, and
        `stored()` once after each run of them: a reader the run woke serves it there,
        in the turn that stored it, so its deliveries leave with the run's PubAcks
        rather than a turn of the event loop later."""
        self._commit_listeners.append(listener)
        if stored is not None:
            self._stored_listeners.append(stored)

    def remove_commit_listener(
        self, listener: CommitListener, stored: Callable[[], None] | None = None
    ) -> None:
        self._commit_listeners.remove(listener)
        if stored is not None:
            self._stored_listeners.remove(stored)

    def _stored(self, entries: Sequence[Publish], error: BaseException | None) -> None:
        """Committed messages stored here: wake their readers (consumers)."""
        if error is None:
            self._announce(entries)

    def _announce(self, entries: Sequence[Publish]) -> None:
        for listener in self._commit_listeners:
            for entry in entries:
                listener(entry.seq, entry.msg.subject)
        for stored in self._stored_listeners:
            stored()

    def _apply(self, entries: list[Entry]) -> None:
        self._applier.apply(entries, self._group.committed, runs=self._replicated)

    def _settle_published(self, run: list[Publish]) -> None:
        following = not self._accepting
        self.proposed.settle(run, following=following)
        if following and self.config.allow_batched:
            self._fast.follow(run, now_ns())

    def _settle_rows(self, run: RawRun, last_seq: int) -> None:
        """A plain run a follower appended whole: its proposed state follows. Otherwise
        (leading, publishes in flight here, fast batches) each publish is settled."""
        if self._accepting or self.config.allow_batched or not self.proposed.follow(last_seq):
            self._settle_published(list(run.msgs))

    @property
    def committed_seq(self) -> int:
        """The highest sequence a reader may see: committed (and acknowledged) messages only."""
        return self._applier.committed_seq(self._group.committed)

    def commit_barrier(self, seq: int) -> asyncio.Future[int] | None:
        """What to await before revealing message `seq` to a reader (None: already committed).

        Entries commit in order, so the newest proposal committing implies `seq` has.
        """
        if seq <= self.committed_seq:
            return None
        return self._group.barrier()

    def read_point(self) -> asyncio.Future[None] | None:
        """What to await before answering a read from this member's store, leader or
        follower, so the answer holds every write acknowledged before the read (None:
        the store is current as it is)."""
        return self._group.read_point()

    # -- expiry: decided by the leader's clock, applied as an entry --------------

    def expire(self, now: int) -> asyncio.Future[int]:
        """Propose retiring what max_age and per-message TTLs retire by `now`.

        The future gives the number of subject delete markers placed: with markers
        on, each subject the expiry emptied gets one once it commits, proposed like
        a publish, so KV watchers learn that the key expired (markers expiring in
        turn leave none, or they would never stop). Only an accepting member
        expires, one expiry at a time; its commit calls `on_sooner_expiry`.
        """
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if self._accepting and self._applier.schedules:
            schedules.fire_due(self._applier.schedules, self.store, now, self.publish_scheduled)
        if not self._accepting or self._expiring:
            done.set_result(0)
            return done
        cutoff = now - self.config.max_age if self.config.max_age > 0 else 0
        due = self._applier.due(now)
        if not due and not (cutoff and self._applier.first_aged(cutoff) is not None):
            done.set_result(0)
            return done
        req = next(self._requests)
        self._applier.outcomes[req] = None
        self._expiring = True
        entry = Expire(cutoff, self.proposed.last_seq, due, req)
        self._group.propose((entry,), partial(self._expired, req, done))
        return done

    def _expired(self, req: int, done: asyncio.Future[int], error: BaseException | None) -> None:
        self._expiring = False
        emptied: dict[str, None] | None = self._applier.outcomes.pop(req, None)
        placed: list[str] = []
        if error is None and emptied:
            hdr = publish.marker_header(self.config)
            headers = self._read_headers(hdr)
            placed = [subject for subject in emptied if self.proposed.subject_msgs(subject) == 0]
            for subject in placed:
                self.publish(subject, hdr, b"", headers, None)
        if not done.done():
            done.set_result(len(placed))
        if self._on_sooner_expiry is not None:
            self._on_sooner_expiry()

    def publish_scheduled(self, subject: str, hdr: bytes, data: bytes) -> None:
        """A schedule's firing: the publish rules but not the schedule rules (the schedule
        passed them); an ApiError says why it cannot be stored."""
        headers = self._read_headers(hdr)
        admitted = self.proposed.admit(subject, hdr, data, headers, trusted=True)
        if not isinstance(admitted, publish.Duplicate):
            self._propose(*admitted, None)

    def next_expiry(self) -> int | None:
        """When `expire` next has work, in nanoseconds since the epoch (None: nothing to
        wake for here, also while not accepting or while an expiry is in flight)."""
        if not self._accepting or self._expiring:
            return None
        ttls = self._applier.ttls
        deadlines = [ttls[0][0]] if ttls else []
        scheduled = self._applier.schedules.next_deadline()
        if scheduled is not None:
            deadlines.append(scheduled)
        if self.config.max_age > 0:
            oldest = self._applier.first_aged(now_ns() + 1)
            if oldest is not None:
                deadlines.append(oldest.ts + self.config.max_age)
        return min(deadlines) if deadlines else None

    # -- administrative operations (API): complete on commit ---------------------

    def update(self, config: StreamConfig) -> None:
        """Adopt an already-checked config; tighter limits take effect at once."""
        self.config = config
        self.proposed.set_config(config)
        if not config.allow_atomic:
            self._batches.clear()  # what was being staged can no longer commit
        if not config.allow_batched:
            self._fast.clear()
        self.store.set_compression(segment_codec(config.compression))
        self._applier.set_config(config)
        self._applier.dedup.window_ns = config.duplicate_window
        self._applier.enforce_limits(None)

    def delete_msg(self, seq: int) -> asyncio.Future[None]:
        """Delete one message; the future fails with the API error if it was not there."""
        if self.config.sealed:
            raise errors.sealed()
        if self.config.deny_delete:
            raise errors.msg_delete_failed("message delete not permitted")
        self._require_accepting()
        return self._request(lambda req: Delete(seq, req), _deleted, errors.msg_delete_failed)

    def purge(
        self, subject_filter: str = "", *, upto_seq: int = 0, keep: int = 0
    ) -> asyncio.Future[int]:
        """Purge what is stored now (not what is published after); the future: how many."""
        if self.config.sealed:
            raise errors.sealed()
        if self.config.deny_purge:
            raise errors.purge_failed("stream purge not permitted")
        self._require_accepting()
        last = self.proposed.last_seq
        return self._request(
            lambda req: Purge(subject_filter, upto_seq, keep, last, req), int, errors.purge_failed
        )

    def _request(
        self,
        make: Callable[[int], Entry],
        finish: Callable[[Any], T],
        failed: Callable[[str], ApiError],
    ) -> asyncio.Future[T]:
        """Propose an entry whose apply finds an outcome; the future gets `finish(outcome)`.

        A leadership lost on the way fails it with StreamNotLeaderError; another
        failure of the group with the endpoint's API error (`failed`).
        """
        req = next(self._requests)
        self._applier.outcomes[req] = None
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def done(error: BaseException | None) -> None:
            outcome = self._applier.outcomes.pop(req, None)
            if future.done():
                return
            if isinstance(error, RaftError):
                future.set_exception(StreamNotLeaderError(self.name))
            elif error is not None:
                future.set_exception(failed(str(error) or "cancelled"))
            else:
                try:
                    future.set_result(finish(outcome))
                except ApiError as err:
                    future.set_exception(err)

        self._group.propose((make(req),), done)
        return future

    def remove(self, seqs: Sequence[int], on_commit: OnCommit | None = None) -> None:
        """Retire messages no consumer needs (interest and work-queue retention), as an
        entry; absent ones are skipped. Not accepting: `on_commit` gets the error."""
        if not self._accepting:
            if on_commit is not None:
                on_commit(StreamNotLeaderError(self.name))
            return
        if not seqs:
            if on_commit is not None:
                on_commit(None)
            return
        self._group.propose((Remove(tuple(seqs)),), on_commit)

    def propose_consumer_op(
        self, consumer: str, op: bytes, on_commit: OnCommit | None = None
    ) -> None:
        """Put a consumer's state change in the stream's log; every member's apply hands it
        to `consumer_ops`, in log order. The group refuses it off the leader."""
        self._group.propose((ConsumerOp(consumer, op),), on_commit)

    def propose_restored(self, entry: Restored, on_commit: OnCommit) -> None:
        """A backup's rows, from the leader of a stream being restored (`log.backup_archive`)."""
        self._group.propose((entry,), on_commit)

    @property
    def restore_began(self) -> bool:
        """A restore's first entry reached this member: its leader took the backup."""
        return self._applier.restore_began

    async def flush(self) -> None:
        """Wait until every accepted publish is committed (and acknowledged)."""
        await self._group.flush()

    async def close(self) -> None:
        await self._group.close()
        self.store.close()

    async def delete(self) -> None:
        await self._group.close()
        self.store.delete()

    def state_json(
        self, *, consumers: int = 0, deleted_details: bool = False, subjects_filter: str = ""
    ) -> dict[str, Any]:
        """The `state` of stream info (see `log.streams.state`)."""
        return state_json(
            self.store,
            consumers=consumers,
            deleted_details=deleted_details,
            subjects_filter=subjects_filter,
        )

    def snapshot_config(self) -> dict[str, Any]:
        """What the engine persists next to the store to recreate this stream at start."""
        return {"config": self.config.to_json(), "created": rfc3339(self.created_ns)}


def _deleted(found: object) -> None:
    if not found:
        raise errors.msg_delete_failed("no message found")
