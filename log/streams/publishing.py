"""A stream's publish path: the rules a message meets before it is proposed, the
proposal, and the answer once it commits (`Stream` inherits it, and shares its state,
declared below and set in `Stream.__init__`). Apply on commit is the store's side
(`log.streams.apply`), the same on every member; this side runs on the leader only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING

from consensus.commits import OnCommit
from consensus.types import RaftError
from ingest.parser.headers import header_value, remove_header
from log import errors, publish
from log.batches import atomic, commit
from log.batches import fast as fast_batch
from log.config import REQUIRED_LEVEL_HEADER, StreamConfig, above_api_level
from log.errors import ApiError
from log.proposed import Echo, Proposed
from log.replication import ReplicationGroup
from log.run_answers import RunAnswers, answer_plain
from log.streams.entries import Batch, Entry, Publish, pack_run
from log.timefmt import now_ns

AckSink = Callable[[bytes], None]
CoreSink = Callable[[str, bytes, bytes], None]  # subject, header block, payload
_NO_HEADERS: Mapping[str, list[str]] = MappingProxyType({})  # a message without any


class Publishing:
    config: StreamConfig
    proposed: Proposed
    restoring: bool
    _accepting: bool
    _replicated: bool
    _group: ReplicationGroup[Entry]
    _batches: atomic.Stager
    _fast: fast_batch.FastBatches
    _send_core: CoreSink | None

    if TYPE_CHECKING:

        @property
        def name(self) -> str: ...
        def _stored(self, entries: Sequence[Publish], error: BaseException | None) -> None: ...
        def _announce(self, entries: Sequence[Publish]) -> None: ...

    def publish(
        self,
        subject: str,
        hdr: bytes | None,
        data: bytes,
        headers: Mapping[str, list[str]],
        ack: AckSink | None,
        fast: fast_batch.FastRef | None = None,
    ) -> None:
        """Run the rules and propose; `ack` gets the PubAck (or error) once known, or,
        for a message of a fast batch (`fast`, from its reply subject), the batch's flow.

        A member that is not accepting stays silent, as the reference does: the
        publisher times out and retries, by then against the leader.
        """
        if not self._accepting or self.restoring:
            return
        if self.config.no_ack:
            ack = None
        if fast is not None:
            self._publish_fast(subject, hdr, data, headers, fast, ack or _ignore)
            return
        if headers and atomic.BATCH_ID in headers:
            commit.stage(self, self._batches, atomic.Staged(subject, hdr, data, headers), ack)
            return
        taken = self._admit(subject, hdr, data, headers, ack)
        if taken is not None:
            self._propose_admitted(*taken)

    def publish_run(
        self,
        subject: str,
        replies: Sequence[bytes],
        payloads: Sequence[bytes],
        send: Callable[[list[tuple[bytes, bytes]]], None],
    ) -> None:
        """Messages without headers to one subject, read together (see `PubRun` in
        native/src/runs.rs): each as `publish` takes it, and those admitted in one proposal.
        `send([(reply, body), ...])` answers those whose reply is not b"", together: the
        refusals once the rules ran, the PubAcks once the proposal committed."""
        if not self._accepting or self.restoring:
            return
        plain = self.proposed.admit_plain(subject, payloads)
        if plain is not None:
            self._propose_plain(plain, replies, send)
            return
        no_ack = self.config.no_ack
        admit = self._admit
        entries: list[Publish] = []
        answered: list[OnCommit] = []
        answers = RunAnswers(send)
        to = answers.to
        for reply, data in zip(replies, payloads, strict=True):
            taken = admit(
                subject, None, data, _NO_HEADERS, None if no_ack or not reply else to(reply)
            )
            if taken is not None:
                entries.append(taken[0])
                answered.append(taken[1])
        answers.send()  # the refusals
        if entries:  # replicated: one log entry, one frame per member for all of them
            proposal = pack_run(entries) if self._replicated else entries
            stored = partial(self._stored, entries)
            self._group.propose(proposal, stored, early=answers.after(answered))

    def _propose_plain(
        self,
        entries: list[Publish],
        replies: Sequence[bytes],
        send: Callable[[list[tuple[bytes, bytes]]], None],
    ) -> None:
        """A run admitted whole (`Proposed.admit_plain`): one proposal, and its answers
        framed together once it commits, as `_answered` frames each one's."""
        early = None
        if not self.config.no_ack:
            early = partial(answer_plain, self.name, entries[0].seq, replies, send)
        proposal = pack_run(entries) if self._replicated else entries
        self._group.propose(proposal, partial(self._stored, entries), early=early)

    def _admit(
        self,
        subject: str,
        hdr: bytes | None,
        data: bytes,
        headers: Mapping[str, list[str]],
        ack: AckSink | None,
    ) -> tuple[Publish, OnCommit] | None:
        """The publish rules: the entry to propose and its answer once it commits, or None
        for a refusal or duplicate, answered now."""
        try:
            admitted = self.proposed.admit(subject, hdr, data, headers)
        except ApiError as err:
            if ack is not None:
                ack(publish.error_ack(self.name, err))
            return None
        if isinstance(admitted, publish.Duplicate):
            if ack is not None:
                ack(publish.duplicate_ack(self.name, admitted.seq))
            return None
        return self._proposal(*admitted, ack)

    def _publish_fast(
        self,
        subject: str,
        hdr: bytes | None,
        data: bytes,
        headers: Mapping[str, list[str]],
        fast: fast_batch.FastRef,
        send: AckSink,
    ) -> None:
        """One message of a fast batch: the reference's refusals in its order, then the
        batch's flow (`log.batches.fast`) around the usual rules and proposal."""
        cfg = self.config
        try:
            if cfg.sealed:
                raise errors.sealed()
            publish.check_size(cfg, hdr, data)
            if not cfg.allow_batched:
                raise fast_batch.disabled()
            if not fast.valid:
                raise fast_batch.invalid_pattern()
            if len(fast.batch_id) > fast_batch.MAX_ID_LEN:
                raise fast_batch.invalid_id()
        except ApiError as err:
            send(publish.error_ack(self.name, err))
            return
        above = above_api_level(hdr)
        taken = self._fast.begin(fast, now_ns(), send, above_level=above)
        if taken is None:
            return
        if hdr and header_value(hdr, REQUIRED_LEVEL_HEADER) is not None:
            hdr = remove_header(hdr, REQUIRED_LEVEL_HEADER)  # checked: not stored
        try:
            admitted = self.proposed.admit(subject, hdr, data, headers)
        except ApiError as err:
            self._fast.refused(taken, fast, err, 0, send)
            return
        if isinstance(admitted, publish.Duplicate):
            self._fast.refused(taken, fast, None, admitted.seq, send)
            return
        entry, echo, _ = admitted
        if self._replicated:  # where the batch stands, for the next leader
            entry = entry._replace(fast=self._fast.mark(fast))
        self._fast.proposed(taken)

        def done(error: BaseException | None) -> None:
            self._answered(entry.seq, None, echo, "", error)
            self._stored((entry,), error)
            if error is None:
                self._fast.stored(fast, entry.seq, send)

        self._group.propose((entry,), done)

    def _propose(self, entry: Publish, echo: Echo, value: str, ack: AckSink | None) -> None:
        self._propose_admitted(*self._proposal(entry, echo, value, ack))

    def _propose_admitted(self, entry: Publish, answer: OnCommit) -> None:
        """The answer goes once the message committed; readers wake once it is stored."""
        proposal = pack_run([entry]) if self._replicated else (entry,)
        self._group.propose(proposal, partial(self._stored, (entry,)), early=answer)

    def _proposal(
        self, entry: Publish, echo: Echo, value: str, ack: AckSink | None
    ) -> tuple[Publish, OnCommit]:
        """An admitted message as proposed: itself, and its answer once it commits."""
        return entry, partial(self._answered, entry.seq, ack, echo, value)

    # -- atomic batches (`log.batches.commit` checks them) -----------------------

    def propose_batch(
        self, entries: list[Publish], echoes: list[Echo], batch_id: str, ack: AckSink | None
    ) -> None:
        """Propose an admitted batch as one entry; its PubAck once it commits."""
        done = partial(self._batch_committed, entries, echoes, batch_id, ack)
        self._group.propose((Batch(tuple(entries)),), done)

    def _batch_committed(
        self,
        entries: list[Publish],
        echoes: list[Echo],
        batch_id: str,
        ack: AckSink | None,
        error: BaseException | None,
    ) -> None:
        if error is not None:
            if ack is not None and not isinstance(error, RaftError):
                ack(publish.error_ack(self.name, errors.store_failed(str(error) or "cancelled")))
            return
        for echo in echoes:
            if echo is not None and self._send_core is not None:
                self._send_core(*echo)
        if ack is not None:
            ack(publish.batch_ack(self.name, entries[-1].seq, batch_id, len(entries)))
        self._announce(entries)

    def copy_mirrored(
        self, seq: int, subject: str, hdr: bytes | None, data: bytes, ts: int
    ) -> None:
        """Store an origin's message as a mirror does (`Proposed.mirrored`)."""
        copy = self.proposed.mirrored(seq, subject, hdr, data, ts) if self._accepting else None
        if copy is not None:
            self._propose(*copy, "", None)

    def _answered(
        self, seq: int, ack: AckSink | None, echo: Echo, value: str, error: BaseException | None
    ) -> None:
        """The message committed (or failed): republish and answer. A replicated stream's
        leader may not have stored it yet, but it does before it reads anything else.

        A leadership lost on the way (a RaftError) gets no answer, as in the reference."""
        if error is not None:
            if ack is not None and not isinstance(error, RaftError):
                ack(publish.error_ack(self.name, errors.store_failed(str(error) or "cancelled")))
            return
        if echo is not None and self._send_core is not None:
            self._send_core(*echo)
        if ack is not None:
            body = publish.counter_ack(self.name, seq, value) if value else None
            ack(body or publish.pub_ack(self.name, seq))


def _ignore(_: bytes) -> None:
    """Where a fast batch's replies go when the stream sends none (`no_ack`)."""
