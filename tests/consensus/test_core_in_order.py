"""A follower's plain APPEND taken whole (`RaftCore.append_in_order`): the Ready that
`step` and `ready` would make, and anything less plain left to `step` untouched."""

from __future__ import annotations

import pytest

from consensus.core import Config, RaftCore
from consensus.types import Entry, EntryKind, Message, MessageType, Ready

T = MessageType


def append(index: int, commit: int, log_term: int = 1, term: int = 1) -> Message:
    """l's APPEND of entry `index` (term `term`) after `index - 1` (of `log_term`)."""
    entry = Entry(term, index, EntryKind.NORMAL, b"m%d" % index)
    prev_term = log_term if index > 1 else 0
    return Message(T.APPEND, "l", "f", term, prev_term, index - 1, (entry,), commit)


def follower(entries: int = 2) -> RaftCore:
    """f following l in term 1, holding `entries` entries, everything handed out."""
    core = RaftCore(Config("f", lazy_commit=True), ("f", "l", "x"))
    for index in range(1, entries + 1):
        core.step(append(index, index - 1))
        core.advance(core.ready())
    assert not core.has_ready()
    return core


def stepped(core: RaftCore, msg: Message) -> Ready:
    core.step(msg)
    ready = core.ready()
    core.advance(ready)
    return ready


def test_a_plain_append_makes_the_ready_step_would_already_advanced() -> None:
    fast, slow = follower(), follower()
    msg = append(3, 2)
    ready = fast.append_in_order(msg)
    assert ready is not None
    assert ready == stepped(slow, msg)
    assert [m.index for m in ready.messages] == [3] and [e.index for e in ready.committed] == [2]
    assert not fast.has_ready()
    assert fast.status() == slow.status()
    # and the next one too, from the state it left
    assert fast.append_in_order(append(4, 3)) == stepped(slow, append(4, 3))


@pytest.mark.parametrize(
    "msg",
    [
        append(3, 2, log_term=2, term=2),  # a leader of a later term: step it
        append(3, 2, log_term=0),  # names another term for entry 2: a conflict
        append(4, 2),  # a gap: entry 3 missing
        append(2, 1),  # overlaps what it holds (a retransmission)
        Message(T.APPEND, "l", "f", 1, 1, 2, (), 2),  # no entries: the commit alone
        Message(T.APPEND, "x", "f", 1, 1, 2, append(3, 2).entries, 2),  # not its leader
    ],
    ids=["new-term", "conflict", "gap", "overlap", "empty", "other-sender"],
)
def test_anything_less_plain_is_left_to_step_untouched(msg: Message) -> None:
    core, twin = follower(), follower()
    assert core.append_in_order(msg) is None
    assert core.status() == twin.status() and not core.has_ready()
    assert stepped(core, msg) == stepped(twin, msg)


def test_nothing_is_taken_while_a_ready_is_out_or_work_is_queued() -> None:
    core = follower()
    core.step(append(3, 2))  # its Ready not taken yet
    assert core.append_in_order(append(4, 3)) is None
    ready = core.ready()
    assert core.append_in_order(append(4, 3)) is None  # handed out, not advanced
    core.advance(ready)
    assert core.append_in_order(append(4, 3)) is not None
