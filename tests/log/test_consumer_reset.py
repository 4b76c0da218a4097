"""`Consumer.reset` (CONSUMER.RESET) with a fake clock, and its record in the state log:
what a reset does to delivered, the ack floor, pending and redeliveries, which seqs each
deliver policy allows, and that a replayed log holds the reset."""

from __future__ import annotations

from pathlib import Path

import pytest

from log.consumers.store import POSITION, ConsumerStore, load_state
from log.errors import ApiError
from tests.log.test_consumer import S, ack, ack_tokens, deliveries, make, pull, store_with


def test_the_start_sets_the_ack_floor() -> None:
    store = store_with("s.a", "s.b", "s.a", "s.b")
    assert make(store, deliver_policy="new").asflr == 4
    assert make(store, deliver_policy="by_start_sequence", opt_start_seq=3).asflr == 2
    assert make(store, deliver_policy="all").asflr == 0


def test_reset_to_the_ack_floor_delivers_again_as_first_deliveries() -> None:
    c = make(store_with("s.a", "s.a", "s.a", "s.a"), ack_policy="explicit", ack_wait=S)
    out = pull(c, b'{"batch":3}')
    ack(c, ack_tokens(out, 0), b"", 0)
    pull(c, b'{"batch":3}', now=2 * S)  # 2 and 3 come back as redeliveries
    assert c.redelivered
    assert c.reset(0) == 2
    assert (c.dseq, c.sseq, c.adflr, c.asflr, c.pending, c.redelivered, c.npc) == (
        1,
        2,
        0,
        1,
        {},
        {},
        3,
    )
    assert deliveries(pull(c, b'{"batch":4}', now=3 * S)) == [(2, 1), (3, 1), (4, 1)]


def test_reset_forward_and_past_the_end() -> None:
    c = make(store_with("s.a", "s.b", "s.a", "s.b", "s.a"), filter_subject="s.a")
    assert c.reset(2) == 2 and c.npc == 2
    assert deliveries(pull(c, b'{"batch":5}')) == [(3, 1), (5, 1)]
    assert c.reset(40) == 40 and (c.npc, c.asflr) == (0, 39)


@pytest.mark.parametrize(
    ("cfg", "seq", "detail"),
    [
        ({"deliver_policy": "new"}, 1, "not allowed"),
        ({"deliver_policy": "last"}, 1, "not allowed"),
        ({"deliver_policy": "last_per_subject", "filter_subject": "s.>"}, 1, "not allowed"),
        ({"deliver_policy": "by_start_sequence", "opt_start_seq": 3}, 2, "below start seq"),
        ({"deliver_policy": "by_start_time", "opt_start_time": 3 * S}, 2, "below start time"),
    ],
)
def test_a_policy_that_names_its_start_refuses_going_below(
    cfg: dict[str, object], seq: int, detail: str
) -> None:
    c = make(store_with("s.a", "s.b", "s.a", "s.b"), **cfg)
    before = (c.sseq, c.asflr)
    with pytest.raises(ApiError) as refused:
        c.reset(seq)
    assert refused.value.to_json() == {
        "code": 400,
        "err_code": 10204,
        "description": f"invalid reset: {detail}",
    }
    assert (c.sseq, c.asflr) == before
    assert c.reset(0) == before[1] + 1  # the ack floor is always allowed


def test_the_state_log_replays_a_reset(tmp_path: Path) -> None:
    store = store_with("s.a", "s.b", "s.a", "s.b")
    c = make(store, ack_policy="explicit", deliver_policy="last_per_subject", filter_subject="s.>")
    files = ConsumerStore(tmp_path, sync_interval_ns=None)
    files.save_state(c.snapshot())
    assert c.snapshot()["lps"] == [3, 4]
    c.journal = []
    pull(c, b'{"batch":1}')
    c.reset(0)
    files.append([*c.journal, POSITION, c.dseq, c.sseq, c.adflr, c.asflr, 0, 0])
    files.close()
    state = load_state(tmp_path)
    assert state is not None
    assert (state["pending"], state["lps"], state["lps_resume"]) == ([], [], 0)
    assert (state["sseq"], state["asflr"]) == (c.sseq, c.asflr) == (3, 2)
