"""Atomic batch publish (`allow_atomic`): the staging rules, before anything is proposed.

A publisher sends messages with `Nats-Batch-Id` and `Nats-Batch-Sequence`
1, 2, 3 …; the last also carries `Nats-Batch-Commit: 1` (or `eob`: commit
what came before, this message is only the end marker). Until the commit the
messages wait here, in memory on the stream's leader, and each is answered
with an empty reply. At the commit the stream checks them all and proposes
them as one entry of its log, so they are stored together or not at all,
also across a crash (see `log.streams.entries.Batch`). A batch that a gap, a
bad header or 10 s of silence breaks is dropped whole; a crash before the
commit drops it too, as nothing of it was stored.

Staging is pure: time comes in as an argument, and the refusals are the
reference's, in its order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ingest.parser.headers import remove_header
from log import errors
from log.batches.limits import SERVER, ServerBatches
from log.errors import ApiError

BATCH_ID = "Nats-Batch-Id"
BATCH_SEQ = "Nats-Batch-Sequence"
BATCH_COMMIT = "Nats-Batch-Commit"
REQUIRED_LEVEL = "Nats-Required-Api-Level"
MAX_ID_LEN = 64
MAX_SIZE = 1000  # messages in one batch, the reference's default
MAX_INFLIGHT = 50  # batches being staged per stream, the reference's default
TIMEOUT_NS = 10_000_000_000  # a batch silent this long is abandoned


@dataclass(frozen=True, slots=True)
class Staged:
    """One message of a batch as the publisher sent it."""

    subject: str
    hdr: bytes | None
    data: bytes
    headers: Mapping[str, list[str]]


@dataclass(slots=True)
class _Batch:
    deadline: int
    msgs: list[Staged] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Commit:
    """A complete batch: its messages to check and propose, in order."""

    batch_id: str
    msgs: list[Staged]


class Stager:
    """The batches a stream's leader is collecting, by id."""

    def __init__(self, server: ServerBatches = SERVER) -> None:
        self._batches: dict[str, _Batch] = {}
        self._server = server
        server.track_atomic(self)

    def __len__(self) -> int:
        return len(self._batches)

    def clear(self) -> None:
        """Leadership went: the batches being staged here cannot commit anywhere."""
        self._batches.clear()

    def stage(
        self,
        msg: Staged,
        *,
        allowed: bool,
        above_level: bool,
        now: int,
    ) -> Commit | None:
        """Take one batch message: None when it is staged (the publisher gets an empty
        reply), the whole batch at its commit; an ApiError drops the batch."""
        headers = msg.headers
        if not allowed:
            raise errors.atomic_disabled()
        batch_id = _first(headers, BATCH_ID)
        if len(batch_id) > MAX_ID_LEN:
            raise errors.atomic_invalid_id()
        seq_text = _first(headers, BATCH_SEQ)
        if not seq_text:
            raise errors.atomic_missing_seq()
        seq = int(seq_text) if seq_text.isdigit() else 0
        commit_text = headers.get(BATCH_COMMIT)
        eob = commit_text is not None and commit_text[0].strip() == "eob"
        invalid_commit = commit_text is not None and not eob and commit_text[0].strip() != "1"
        size = seq - 1 if eob else seq
        batch = self._batches.get(batch_id)
        if batch is not None and batch.deadline < now:
            del self._batches[batch_id]  # timed out: as if it never began
            batch = None
        if batch is None:
            if seq != 1:
                if size > MAX_SIZE:
                    raise errors.atomic_too_large(MAX_SIZE)
                raise errors.atomic_incomplete()
            self._sweep(now)
            if len(self._batches) >= MAX_INFLIGHT or self._server.atomic_full():
                raise errors.atomic_too_many_inflight()
            batch = self._batches[batch_id] = _Batch(now + TIMEOUT_NS)
        try:
            if invalid_commit:
                raise errors.atomic_invalid_commit()
            if REQUIRED_LEVEL in headers:
                if above_level:
                    raise errors.required_api_level()
                assert msg.hdr is not None
                hdr = remove_header(msg.hdr, REQUIRED_LEVEL.encode())
                msg = Staged(msg.subject, hdr, msg.data, _without(headers, REQUIRED_LEVEL))
            if seq != len(batch.msgs) + 1 or (seq == 1 and eob):
                raise errors.atomic_incomplete()
            if size > MAX_SIZE:
                raise errors.atomic_too_large(MAX_SIZE)
        except ApiError:
            del self._batches[batch_id]
            raise
        batch.deadline = now + TIMEOUT_NS
        if commit_text is None:
            batch.msgs.append(msg)
            return None
        del self._batches[batch_id]
        if not eob:
            batch.msgs.append(msg)
        return Commit(batch_id, batch.msgs)

    def _sweep(self, now: int) -> None:
        """Drop batches past their deadline, so abandoned ones do not hold inflight slots."""
        for batch_id in [b for b, batch in self._batches.items() if batch.deadline < now]:
            del self._batches[batch_id]


def _first(headers: Mapping[str, list[str]], name: str) -> str:
    values = headers.get(name)
    return values[0].strip() if values else ""


def _without(headers: Mapping[str, list[str]], name: str) -> dict[str, list[str]]:
    return {k: v for k, v in headers.items() if k != name}
