"""An atomic batch's way from its staged messages to one proposed entry.

At the commit every message runs the stream's publish rules against the
proposed state the earlier ones leave (so a batch's third message sees its
first two, as they will be stored), plus the rules the reference adds inside
a batch. One refusal puts the proposed state back as it was and refuses the
whole batch; otherwise the stream proposes the messages as one entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ingest.parser.headers import set_header
from log import errors, publish
from log.batches import atomic
from log.config import StreamConfig, above_api_level
from log.errors import ApiError
from log.proposed import Echo, Proposed
from log.streams.entries import Publish
from log.timefmt import now_ns

AckSink = Callable[[bytes], None]


class BatchTarget(Protocol):
    """What of a stream a batch needs (`log.streams.stream.Stream`)."""

    config: StreamConfig

    @property
    def name(self) -> str: ...

    @property
    def proposed(self) -> Proposed: ...

    def propose_batch(
        self, entries: list[Publish], echoes: list[Echo], batch_id: str, ack: AckSink | None
    ) -> None: ...


def stage(
    stream: BatchTarget, stager: atomic.Stager, msg: atomic.Staged, ack: AckSink | None
) -> None:
    """Take one message of a batch; the commit's message proposes the batch."""
    cfg = stream.config
    try:
        if cfg.sealed:
            raise errors.sealed()
        publish.check_size(cfg, msg.hdr, msg.data)
        commit = stager.stage(
            msg, allowed=cfg.allow_atomic, above_level=above_api_level(msg.hdr), now=now_ns()
        )
    except ApiError as err:
        if ack is not None:
            ack(publish.error_ack(stream.name, err))
        return
    if commit is None:
        if ack is not None:
            ack(b"")  # staged: the reference's empty reply
        return
    _commit(stream, commit, ack)


def _commit(stream: BatchTarget, commit: atomic.Commit, ack: AckSink | None) -> None:
    saved = stream.proposed.save()
    entries: list[Publish] = []
    echoes: list[Echo] = []
    written: set[str] = set()
    last = len(commit.msgs) - 1
    try:
        for i, msg in enumerate(commit.msgs):
            entry, echo = _admit(stream, msg, i, written, last=i == last)
            entries.append(entry)
            echoes.append(echo)
            written.add(msg.subject)
    except ApiError as err:
        stream.proposed.restore(saved)
        if ack is not None:
            ack(publish.error_ack(stream.name, err))
        return
    stream.propose_batch(entries, echoes, commit.batch_id, ack)


def _admit(
    stream: BatchTarget, msg: atomic.Staged, index: int, written: set[str], *, last: bool
) -> tuple[Publish, Echo]:
    """The reference's extra rules inside a batch: no last-msg-id expectation, no
    duplicate, an expected last sequence on the first message only, and no
    per-subject expectation on a subject the batch already wrote."""
    headers, hdr = msg.headers, msg.hdr
    if publish.EXPECTED_LAST_MSG_ID in headers:
        raise errors.atomic_unsupported_header(publish.EXPECTED_LAST_MSG_ID)
    if publish.EXPECTED_LAST_SUBJ_SEQ in headers:
        seq_subject = headers.get(publish.EXPECTED_LAST_SUBJ_SEQ_SUBJECT, [msg.subject])[0]
        if seq_subject in written:
            raise errors.wrong_last_sequence_constant()
    if last and atomic.BATCH_COMMIT not in headers:  # committed by an end-of-batch marker
        hdr = set_header(hdr, atomic.BATCH_COMMIT.encode(), b"1")
    admitted = stream.proposed.admit(msg.subject, hdr, msg.data, headers)
    if isinstance(admitted, publish.Duplicate):
        raise errors.atomic_duplicate_msg_id()
    if index and publish.EXPECTED_LAST_SEQ in headers:
        raise errors.wrong_last_sequence_constant()
    return admitted[0], admitted[1]
