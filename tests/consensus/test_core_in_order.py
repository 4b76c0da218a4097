"""A follower's plain APPEND and a leader's plain answer to one taken whole
(`RaftCore.in_order`): the Ready that `step` and `ready` would make, and anything less plain
left to `step` untouched."""

from __future__ import annotations

import pytest

from consensus.core import Config, RaftCore
from consensus.types import ConfChange, ConfOp, Entry, EntryKind, Message, MessageType, Ready

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


def leader(*, answered: tuple[str, ...] = ("f", "x"), **config: object) -> RaftCore:
    """l leading f and x in term 1, its no-op committed by the `answered` followers' answers,
    entry 2 proposed and sent to those; everything handed out."""
    settings: dict[str, object] = {"lazy_commit": True, "pre_vote": False, **config}
    core = RaftCore(Config("l", **settings), ("l", "f", "x"))  # type: ignore[arg-type]
    core.campaign()
    core.advance(core.ready())
    core.step(Message(T.VOTE_RESP, "f", "l", core.term))
    core.advance(core.ready())
    for peer in answered:
        core.step(Message(T.APPEND_RESP, peer, "l", core.term, index=1))
        core.advance(core.ready())
    core.propose([b"m2"])
    core.advance(core.ready())
    assert core.commit == 1 and not core.has_ready()
    return core


def answer(peer: str, index: int, term: int = 1, **fields: object) -> Message:
    return Message(T.APPEND_RESP, peer, "l", term, index=index, **fields)  # type: ignore[arg-type]


def test_a_plain_answer_makes_the_ready_step_would_already_advanced() -> None:
    fast, slow = leader(), leader()
    ready = fast.answer_in_order(answer("f", 2))
    assert ready is not None
    assert ready == stepped(slow, answer("f", 2))
    assert [e.index for e in ready.committed] == [2] and ready.hard_state is not None
    assert fast.commit == 2 and not fast.has_ready()
    assert fast.status() == slow.status()
    # the second follower's answer moves nothing: an empty Ready, as step's
    second = fast.answer_in_order(answer("x", 2))
    assert second is not None and not second
    assert second == stepped(slow, answer("x", 2))
    assert fast.status() == slow.status()


def test_an_answer_that_leaves_more_to_send_is_left_to_step() -> None:
    core, twin = leader(max_inflight=1), leader(max_inflight=1)
    for node in (core, twin):
        node.propose([b"m3"])  # the window is full: entry 3 waits for entry 2's answer
        node.advance(node.ready())
    assert core.answer_in_order(answer("f", 2)) is None
    assert core.status() == twin.status()
    ready = stepped(core, answer("f", 2))
    assert ready == stepped(twin, answer("f", 2))
    assert [m.index for m in ready.messages] == [2]  # entry 3 went out: step sent it


@pytest.mark.parametrize(
    "msg",
    [
        answer("f", 2, reject=True, reject_hint=2),  # a refusal
        answer("f", 1),  # at or below what it held: stale
        answer("f", 3),  # past the log's end
        answer("f", 2, term=2),  # a later term: step it
        answer("l", 2),  # from itself
        Message(T.APPEND_RESP, "f", "y", 1, index=2),  # for another node
    ],
    ids=["refusal", "stale", "past-the-log", "new-term", "own", "other-node"],
)
def test_any_answer_less_plain_is_left_to_step_untouched(msg: Message) -> None:
    core, twin = leader(), leader()
    assert core.answer_in_order(msg) is None
    assert core.status() == twin.status() and not core.has_ready()
    assert stepped(core, msg) == stepped(twin, msg)


def test_a_probed_follower_a_change_or_an_eager_commit_is_left_to_step() -> None:
    probed = leader(answered=("f",))  # x never answered: still probed
    assert probed.answer_in_order(answer("x", 1)) is None
    eager = leader(lazy_commit=False)  # followers hear each commit at once: step sends it
    assert eager.answer_in_order(answer("f", 2)) is None
    changing = leader()
    changing.propose_conf_change(ConfChange(ConfOp.ADD_LEARNER, "y"))
    changing.advance(changing.ready())
    assert changing.answer_in_order(answer("f", 2)) is None
    busy = leader()
    busy.propose([b"m3"])  # its Ready not taken: entries unwritten
    assert busy.answer_in_order(answer("f", 2)) is None


def test_in_order_takes_appends_and_answers_only() -> None:
    assert follower().in_order(append(3, 2)) is not None
    assert leader().in_order(answer("f", 2)) is not None
    assert leader().in_order(Message(T.HEARTBEAT_RESP, "f", "l", 1, index=2)) is None
