"""Consumer state on a replicated stream: proposed by the leader, written by every member.

The stream leader runs the consumer. Its writes do not touch files: each
becomes an op (`log.consumers.ops`) proposed to the stream's group
(`ReplicatedStore`). What commits is applied by `ConsumerFiles` on every
member, the leader included, into the same files a single server keeps
(`log.consumers.store`, one code path for the format). So the files always
hold committed state only: a leader's memory runs ahead of them (a turn is
delivered before its records commit), and a new leader built from its files
resumes from what a quorum agreed on.

The stream's log is re-applied from its beginning after a restart, over files
that already hold the end result. Applying stays correct because records set
values (the last record about a message wins either way), a create is
recognised as the one already on disk by its creation timestamp, and records
for a consumer that is not (or no longer) on disk are dropped.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from consensus.commits import OnCommit
from log.config import is_valid_name
from log.consumers.ops import (
    ConsumerOpError,
    Create,
    Delete,
    Meta,
    Records,
    decode,
    encode_create,
    encode_delete,
    encode_meta,
    encode_records,
)
from log.consumers.store import (
    ConsumerStore,
    Saved,
    consumers_dir,
    load_all,
    load_state,
    read_meta,
)
from log.state_file import StateFileError

log = logging.getLogger("jetlake.consumers")


class Proposer(Protocol):
    """The stream's side (`Stream.propose_consumer_op`): one entry in its log."""

    def propose_consumer_op(self, consumer: str, op: bytes, on_commit: OnCommit | None) -> None:
        """`on_commit` hears None once the entry commits, or why it cannot (not the leader)."""


class ReplicatedStore:
    """A `StateStore` whose every write is an op proposed to the stream's group."""

    def __init__(self, name: str, proposer: Proposer) -> None:
        self.name = name
        self._propose = proposer.propose_consumer_op
        self._proposed = 0
        self._settled = 0  # every proposal up to this one committed or failed
        self._error: BaseException | None = None  # why proposal `_settled` failed, if it did
        self._waiters: deque[tuple[int, OnCommit]] = deque()

    def __str__(self) -> str:
        return f"replicated consumer state {self.name}"

    def create(self, config: dict[str, Any], created: str, state: dict[str, Any]) -> None:
        self._send(encode_create(config, created, state))

    def save_meta(self, config: dict[str, Any], created: str) -> None:
        self._send(encode_meta(config, created))

    def save_state(self, state: dict[str, Any]) -> None:
        """Nothing to do: the files compact as they are applied. A snapshot of the
        leader's memory would write turns that have not committed."""

    def record(self, records: Sequence[int], snapshot: Callable[[], dict[str, Any]]) -> None:
        self._send(encode_records(records))

    def confirm(self, done: OnCommit) -> None:
        """`done` once everything proposed so far committed (or failed: with the error)."""
        if self._settled >= self._proposed:
            done(self._error)
        else:
            self._waiters.append((self._proposed, done))

    def close(self) -> None:
        """Nothing is open here: `ConsumerFiles` owns the files."""

    def delete(self) -> None:
        self._send(encode_delete())

    def _send(self, op: bytes) -> None:
        self._proposed += 1
        self._propose(self.name, op, partial(self._on_settled, self._proposed))

    def _on_settled(self, index: int, error: BaseException | None) -> None:
        """Proposals settle in log order; a waiter hears the outcome of the newest one
        settled, so after a failure it hears the error even if its own turn committed
        (the client retries an ack, which is idempotent)."""
        if index < self._settled:
            return
        self._settled, self._error = index, error
        waiters = self._waiters
        while waiters and waiters[0][0] <= index:
            waiters.popleft()[1](error)


class ConsumerFiles:
    """What a replicated stream's apply calls with each committed consumer op
    (`Stream.consumer_ops`), on every member, in log order."""

    def __init__(self, stream: str, stream_folder: Path, *, sync_interval_ns: int | None) -> None:
        self._stream = stream
        self._root = consumers_dir(stream_folder)
        self._sync_interval_ns = sync_interval_ns
        self._stores: dict[str, ConsumerStore] = {}  # open acks.log per consumer
        self._listed: int | None = None  # `listed()`, until a create or delete changes it

    def __call__(self, name: str, data: bytes) -> None:
        where = f"stream {self._stream} consumer {name!r}"
        if not is_valid_name(name):  # it becomes a folder name
            raise ConsumerOpError(where, "not a consumer name")
        op = decode(data, where=where)
        if isinstance(op, Records):
            store = self._open(name)
            if store is not None:
                store.record_payload(op.payload, None)
        elif isinstance(op, Create):
            self._create(name, op)
            self._listed = None
        elif isinstance(op, Meta):
            store = self._open(name)
            if store is not None:
                store.save_meta(op.config, op.created)
        elif isinstance(op, Delete):
            self._delete(name)
            self._listed = None

    def listed(self) -> int:
        """How many consumers the files hold that a listing shows (a sourcing stream's
        readers are not listed): what a member that runs none reports as the stream's
        `consumer_count`, as each of the reference's replicas does. Counted from the
        files once, again only after a create or delete."""
        if self._listed is None:
            folders = sorted(self._root.iterdir()) if self._root.is_dir() else []
            metas = [_whole(folder, "") for folder in folders if folder.is_dir()]
            self._listed = sum(
                1 for m in metas if m is not None and not m["config"].get("direct", False)
            )
        return self._listed

    def saved(self) -> list[Saved]:
        """Every consumer as its files hold it now: for a snapshot of the stream."""
        return load_all(self._root.parent)

    def restore(self, saved: Sequence[Saved]) -> None:
        """Make the files a snapshot's: the consumers it lacks deleted, the rest rewritten
        whole (ops after the snapshot's index are applied again over them)."""
        keep = {s.name for s in saved}
        self._listed = None
        if self._root.is_dir():
            for folder in self._root.iterdir():
                if folder.name not in keep:
                    self._delete(folder.name)
        for s in saved:
            store = self._stores.get(s.name)
            if store is None:
                store = self._stores[s.name] = self._store(self._root / s.name)
            if s.state is not None:
                store.save_state(s.state)
            store.save_meta(s.config, s.created)

    def close(self) -> None:
        """Close the logs (they are fsynced first); later ops reopen them."""
        stores, self._stores = self._stores, {}
        for store in stores.values():
            store.close()

    def _open(self, name: str) -> ConsumerStore | None:
        """The consumer's store; None when it has no meta: records that trail its delete
        (or a damaged meta whose create was not replayed: dropping beats dying here)."""
        store = self._stores.get(name)
        if store is None:
            folder = self._root / name
            if _whole(folder, "") is None:
                return None
            store = self._stores[name] = self._store(folder)
        return store

    def _create(self, name: str, op: Create) -> None:
        folder = self._root / name
        meta = _whole(folder, op.created)
        if meta is not None and meta.get("created") == op.created:
            return  # re-applied: the files already hold this consumer, and more
        # Another incarnation's files (a replay of an older one), or damaged ones: the
        # log's create and the records after it rebuild them.
        self._delete(name)
        store = self._stores[name] = self._store(folder)
        store.save_state(op.state)
        store.save_meta(op.config, op.created)  # last: a folder without meta is a torn create

    def _delete(self, name: str) -> None:
        store = self._stores.pop(name, None)
        (store or self._store(self._root / name)).delete()

    def _store(self, folder: Path) -> ConsumerStore:
        return ConsumerStore(folder, sync_interval_ns=self._sync_interval_ns)


def _whole(folder: Path, created: str) -> dict[str, Any] | None:
    """The consumer's meta when its files are whole; None when missing or damaged (the
    damage reported). With `created`, the state is checked too when it is that
    incarnation's (the create is skipped then, so nothing else would repair it)."""
    try:
        meta = read_meta(folder)
        if meta is not None and created and meta.get("created") == created:
            load_state(folder)
    except StateFileError as err:
        log.error("%s; rebuilding the consumer from the stream's log", err)
        return None
    return meta
