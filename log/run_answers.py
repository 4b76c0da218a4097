"""The answers of a stream run (`Stream.publish_run`), sent together.

A run's messages each get their own answer, as one at a time: a refusal once the rules
ran, a PubAck (or a store error) once the run's proposal committed. Sent one by one,
each would be routed on its own; gathered here, the server frames them in one call
(`Server.replies`), in the order they were made. A run admitted whole
(`Proposed.admit_plain`) has no refusals and its PubAcks are framed in one go
(`answer_plain`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from consensus.commits import OnCommit, notify
from consensus.types import RaftError
from log import errors, publish

Send = Callable[[list[tuple[bytes, bytes]]], None]


class RunAnswers:
    __slots__ = ("_answers", "_send")

    def __init__(self, send: Send) -> None:
        self._send = send
        self._answers: list[tuple[bytes, bytes]] = []

    def to(self, reply: bytes) -> Callable[[bytes], None]:
        """The ack sink of the message whose reply subject is `reply`."""
        return partial(self._add, reply)

    def _add(self, reply: bytes, body: bytes) -> None:
        self._answers.append((reply, body))

    def send(self) -> None:
        """Send what was answered so far."""
        if self._answers:
            answers, self._answers = self._answers, []
            self._send(answers)

    def after(self, waiters: list[OnCommit]) -> OnCommit:
        """What runs once the run's proposal commits: each message's own callback, which
        answers it here, then the answers sent."""
        return partial(self._committed, waiters)

    def _committed(self, waiters: list[OnCommit], error: BaseException | None) -> None:
        notify(waiters, error)
        self.send()


def answer_plain(
    stream: str, first: int, replies: Sequence[bytes], send: Send, error: BaseException | None
) -> None:
    """Answer a run admitted whole, stored from sequence `first` on, as `Stream._answered`
    answers each message: its PubAck, a store error, or nothing for a lost leadership."""
    if error is None:
        answers = publish.pub_acks(stream, replies, first)
    elif isinstance(error, RaftError):
        return  # no answer, as in the reference: the publisher retries with the leader
    else:
        body = publish.error_ack(stream, errors.store_failed(str(error) or "cancelled"))
        answers = [(reply, body) for reply in replies if reply]
    if answers:
        send(answers)
