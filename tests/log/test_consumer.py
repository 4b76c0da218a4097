"""The consumer state machine with a fake clock: no sockets, no sleeps, microseconds each."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from log.config import StreamConfig
from log.consumers.config import ConsumerConfig, with_defaults
from log.consumers.consumer import SLICE, Consumer
from log.consumers.wire import AckResult, Advisory, Deliveries, Output, Status, WireMsg
from log.segments.api import NewMsg, StoredMsg
from log.segments.memstore import MemoryStore

S = 1_000_000_000
STREAM = StreamConfig(name="S", subjects=("s.>",))


def store_with(*subjects: str) -> MemoryStore:
    store = MemoryStore(name="S")
    for i, subject in enumerate(subjects):
        store.append([NewMsg(subject, None, f"m{i}".encode(), (i + 1) * S)])
    return store


def make(store: MemoryStore, now: int = 0, **cfg: Any) -> Consumer:
    config = with_defaults(ConsumerConfig(**cfg), STREAM)
    last = store.state().last_seq
    return Consumer("S", "c", config, store, created=now, now=now, committed=last)


def sent(out: list[Output]) -> list[WireMsg]:
    return [m for o in out if isinstance(o, Deliveries) for m in o.wire()]


def deliveries(out: list[Output]) -> list[tuple[int, int]]:
    """(stream seq, delivery count) of each delivery."""
    return [(int(t[5]), int(t[4])) for t in (m[1].split(b".") for m in sent(out))]


def statuses(out: list[Output]) -> list[str]:
    return [o.hdr.split(b"\r\n")[0].decode() for o in out if isinstance(o, Status)]


def ack_tokens(out: list[Output], i: int = 0) -> list[str]:
    return sent(out)[i][1].decode().split(".")


def ack(c: Consumer, tokens: list[str], body: bytes, now: int) -> AckResult:
    """What the runner does with an ack subject's tokens."""
    return c.ack(int(tokens[4]), int(tokens[5]), int(tokens[6]), body, now)


def pull(c: Consumer, body: bytes, now: int = 0, reply: str = "inb") -> list[Output]:
    return c.pull(reply, body, now) + c.pump(now)


def test_ack_reply_layout_and_pending_counts() -> None:
    c = make(store_with("s.a", "s.b", "s.a"), ack_policy="explicit")
    out = pull(c, b'{"batch":2}')
    assert ack_tokens(out, 1) == ["$JS", "ACK", "S", "c", "1", "2", "2", str(2 * S), "1"]
    assert (c.dseq, c.sseq, len(c.pending), c.npc) == (3, 3, 2, 1)


def test_filtered_consumer_reads_only_its_subject() -> None:
    c = make(store_with("s.a", "s.b", "s.b", "s.a"), ack_policy="none", filter_subject="s.a")
    assert c.count_pending() == 2
    assert deliveries(pull(c, b'{"batch":5,"no_wait":true}')) == [(1, 1), (4, 1)]


def test_redelivery_after_ack_wait_with_backoff() -> None:
    c = make(store_with("s.a"), ack_policy="explicit", backoff=(1 * S, 3 * S), max_deliver=5)
    assert deliveries(pull(c, b'{"batch":1}')) == [(1, 1)]
    assert c.next_deadline(0) == 1 * S
    assert deliveries(pull(c, b'{"batch":1}', now=S - 1)) == []
    assert deliveries(c.pump(S)) == [(1, 2)]
    assert c.next_deadline(S) == 4 * S  # the second backoff step
    assert deliveries(pull(c, b'{"batch":1}', now=4 * S - 1)) == []
    assert deliveries(c.pump(4 * S)) == [(1, 3)]
    assert (len(c.redelivered), len(c.pending)) == (1, 1)


def test_max_deliver_drops_and_advises() -> None:
    c = make(store_with("s.a", "s.b"), ack_policy="explicit", ack_wait=S, max_deliver=2)
    pull(c, b'{"batch":1}')
    assert deliveries(pull(c, b'{"batch":1}', now=S)) == [(1, 2)]
    out = pull(c, b'{"batch":1}', now=2 * S)
    advisories = [o for o in out if isinstance(o, Advisory)]
    assert advisories[0].subject == "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.c"
    assert (advisories[0].body["stream_seq"], advisories[0].body["deliveries"]) == (1, 2)
    assert deliveries(out) == [(2, 1)]


def test_nak_now_and_with_delay() -> None:
    c = make(store_with("s.a"), ack_policy="explicit", ack_wait=30 * S)
    out = pull(c, b'{"batch":1}')
    assert ack(c, ack_tokens(out), b'-NAK {"delay": 2000000000}', 0).confirm
    assert deliveries(pull(c, b'{"batch":1}', now=S)) == []
    again = c.pump(2 * S)
    assert deliveries(again) == [(1, 2)]
    ack(c, ack_tokens(again), b"-NAK", 2 * S)
    assert deliveries(pull(c, b'{"batch":1}', now=2 * S)) == [(1, 3)]


def test_term_and_progress() -> None:
    c = make(store_with("s.a", "s.b"), ack_policy="explicit", ack_wait=S)
    out = pull(c, b'{"batch":2}')
    ack(c, ack_tokens(out, 1), b"+WPI", S - 1)
    result = ack(c, ack_tokens(out, 0), b"+TERM bad input", S - 1)
    assert result.confirm and c.finished == [1]
    pumped = c.pump(S)
    terminated = [o for o in pumped if isinstance(o, Advisory)]
    assert terminated[0].body["reason"] == "bad input"
    assert deliveries(pumped) == []  # seq 2 was extended by +WPI
    assert c.next_deadline(S) == 2 * S - 1


def test_ack_all_moves_floor_over_everything_below() -> None:
    c = make(store_with("s.a", "s.a", "s.a"), ack_policy="all")
    out = pull(c, b'{"batch":3}')
    assert ack(c, ack_tokens(out, 1), b"+ACK", 0).confirm and c.finished == [1, 2]
    assert (c.adflr, c.asflr, list(c.pending)) == (2, 2, [3])


def test_explicit_ack_floor_follows_gaps() -> None:
    c = make(store_with("s.a", "s.a", "s.a"), ack_policy="explicit")
    out = pull(c, b'{"batch":3}')
    ack(c, ack_tokens(out, 1), b"", 0)
    assert (c.adflr, c.asflr) == (0, 0)
    ack(c, ack_tokens(out, 0), b"", 0)
    assert (c.adflr, c.asflr) == (2, 2)
    assert not c.ack(1, 9, 9, b"", 0).confirm


def test_max_ack_pending_stops_new_deliveries() -> None:
    c = make(store_with("s.a", "s.a", "s.a"), ack_policy="explicit", max_ack_pending=2)
    out = pull(c, b'{"batch":3,"expires":1000000000}')
    assert deliveries(out) == [(1, 1), (2, 1)]
    assert deliveries(ack(c, ack_tokens(out, 0), b"", 0) and c.pump(0)) == [(3, 1)]


def test_pull_statuses() -> None:
    c = make(store_with("s.a"), ack_policy="explicit", max_waiting=1, max_batch=5)
    assert statuses(pull(c, b'{"batch":2,"no_wait":true}')) == ["NATS/1.0 404 No Messages"]
    assert statuses(pull(c, b'{"batch":9}')) == ["NATS/1.0 409 Exceeded MaxRequestBatch of 5"]
    assert statuses(pull(c, b'{"batch":1,"expires":1000000000}', now=S)) == []
    assert statuses(pull(c, b'{"batch":1}', now=S, reply="x")) == [
        "NATS/1.0 409 Exceeded MaxWaiting"
    ]
    timeout = c.pump(2 * S)
    assert statuses(timeout) == ["NATS/1.0 408 Request Timeout"]
    assert b"Nats-Pending-Messages: 1\r\nNats-Pending-Bytes: 0" in timeout[0].hdr  # type: ignore[union-attr]
    assert statuses(pull(c, b'{"expires":10,"idle_heartbeat":9}')) == [
        "NATS/1.0 400 Bad Request - heartbeat value too large"
    ]


def test_max_bytes_refuses_big_messages() -> None:
    c = make(store_with("s.a"))
    out = pull(c, b'{"batch":1,"max_bytes":5}')
    assert statuses(out) == ["NATS/1.0 409 Message Size Exceeds MaxBytes"]
    assert deliveries(pull(c, b'{"batch":1,"max_bytes":500}')) == [(1, 1)]


def test_max_bytes_counts_the_ack_reply_to_the_byte() -> None:
    """The reference's size: subject, ack reply, headers and payload (the reply is
    spelt out for the count although the outlet frames it)."""
    reply = b"$JS.ACK.S.c.1.1.1.%d.0" % S
    size = len(b"s.a") + len(reply) + len(b"m0")
    c = make(store_with("s.a"))
    out = pull(c, b'{"batch":1,"max_bytes":%d}' % (size - 1))
    assert statuses(out) == ["NATS/1.0 409 Message Size Exceeds MaxBytes"]
    out = pull(c, b'{"batch":1,"max_bytes":%d}' % size)
    assert [m[1] for m in sent(out)] == [reply]


def test_pending_request_served_on_commit() -> None:
    store = store_with()
    c = make(store)
    assert pull(c, b'{"batch":1}') == []
    store.append([NewMsg("s.x", None, b"late", 5 * S)])
    c.on_commit(1, "s.x")
    assert deliveries(c.pump(S)) == [(1, 1)]


def test_request_nobody_hears_is_dropped_and_leaves_messages_pending() -> None:
    c = make(store_with("s.a", "s.b"), ack_policy="explicit")
    listeners = {"heard"}
    c.listening = listeners.__contains__
    assert pull(c, b'{"batch":5}', reply="deaf") == []
    assert (len(c.waiting), c.npc, len(c.pending), c.dseq) == (0, 2, 0, 1)
    assert deliveries(pull(c, b'{"batch":1}', reply="heard")) == [(1, 1)]
    c.pull("heard", b'{"batch":5,"expires":10000000000}', 0)  # waits, then its client leaves
    listeners.clear()
    c.drop_deaf()
    assert (len(c.waiting), c.npc, len(c.pending), c.dseq) == (0, 1, 1, 2)


def test_uncommitted_messages_stay_hidden() -> None:
    store = store_with("s.a")
    c = make(store)
    store.append([NewMsg("s.a", None, b"not yet", 5 * S)])  # applied, not committed
    assert deliveries(pull(c, b'{"batch":5,"no_wait":true}')) == [(1, 1)]
    assert c.count_pending() == 0


@pytest.mark.parametrize(
    ("cfg", "first"),
    [
        ({"deliver_policy": "all"}, 1),
        ({"deliver_policy": "last"}, 4),
        ({"deliver_policy": "new"}, None),
        ({"deliver_policy": "by_start_sequence", "opt_start_seq": 3}, 3),
        ({"deliver_policy": "by_start_time", "opt_start_time": 2 * S + 1}, 3),
    ],
)
def test_start_positions(cfg: dict[str, Any], first: int | None) -> None:
    c = make(store_with("s.a", "s.b", "s.a", "s.c"), **cfg)
    got = deliveries(pull(c, b'{"batch":1,"no_wait":true}'))
    assert got == ([] if first is None else [(first, 1)])


def test_last_per_subject_then_new_messages() -> None:
    store = store_with("s.a", "s.b", "s.a", "s.c", "s.b")
    c = make(store, deliver_policy="last_per_subject", filter_subject="s.>")
    assert c.count_pending() == 3
    store.append([NewMsg("s.a", None, b"new", 9 * S)])
    c.on_commit(6, "s.a")
    assert c.npc == 4
    got = deliveries(pull(c, b'{"batch":9,"no_wait":true}'))
    assert got == [(3, 1), (4, 1), (5, 1), (6, 1)]


def test_push_needs_interest_and_sends_heartbeats_and_flow_control() -> None:
    store = store_with(*["s.a"] * 3)
    c = make(store, deliver_subject="d", flow_control=True, idle_heartbeat=S)
    assert c.pump(0) == []
    c.set_active(True, 0)
    assert deliveries(c.pump(0)) == [(1, 1), (2, 1), (3, 1)]
    beat = c.pump(S)
    assert statuses(beat) == ["NATS/1.0 100 Idle Heartbeat"]
    assert b"Nats-Last-Consumer: 3\r\nNats-Last-Stream: 3" in beat[0].hdr  # type: ignore[union-attr]
    big = b"x" * (1024 * 1024)
    for i in range(2):
        store.append([NewMsg("s.a", None, big, 9 * S)])
        c.on_commit(4 + i, "s.a")
    out = c.pump(2 * S)
    fc = [o for o in out if isinstance(o, Status)]
    assert fc and fc[0].reply.startswith("$JS.FC.S.c.")
    c.flow_control_reply(fc[0].reply, None, 2 * S)


def test_headers_only_and_replay_original() -> None:
    store = store_with("s.a", "s.a")
    c = make(store, headers_only=True, replay_policy="original")
    out = pull(c, b'{"batch":2}', now=100 * S)
    first = sent(out)
    assert first[0][2:] == (b"NATS/1.0\r\nNats-Msg-Size: 2\r\n\r\n", b"")
    assert len(first) == 1  # the second was stored 1s later: it waits 1s
    assert c.next_deadline(100 * S) == 101 * S
    assert deliveries(c.pump(101 * S)) == [(2, 1)]


def test_snapshot_restores_exact_state() -> None:
    store = store_with("s.a", "s.a", "s.a")
    c = make(store, ack_policy="explicit", ack_wait=S)
    out = pull(c, b'{"batch":3}')
    ack(c, ack_tokens(out, 0), b"", 0)
    again = make(store, ack_policy="explicit", ack_wait=S)
    again.restore(c.snapshot(), 0)
    assert (again.dseq, again.sseq, list(again.pending), again.asflr) == (4, 4, [2, 3], 1)
    assert deliveries(pull(again, b'{"batch":3}', now=S)) == [(2, 2), (3, 2)]


def test_interest_needs() -> None:
    c = make(store_with("s.a", "s.b"), ack_policy="explicit", filter_subject="s.a")
    assert c.needs(1, "s.a") and not c.needs(2, "s.b")
    out = pull(c, b'{"batch":1}')
    ack(c, ack_tokens(out), b"", 0)
    assert not c.needs(1, "s.a")


def test_paused_consumer_holds_until_deadline() -> None:
    c = make(store_with("s.a"))
    c.update_config(dataclasses.replace(c.cfg, pause_until=5 * S))
    assert deliveries(pull(c, b'{"batch":1}')) == []
    assert c.next_deadline(0) == 5 * S
    assert deliveries(c.pump(5 * S)) == [(1, 1)]


def test_pump_delivers_a_slice_then_asks_to_run_again() -> None:
    """A pump stops after SLICE messages, so the owner writes them before reading on."""
    c = make(store_with(*["s.a"] * (SLICE + 3)), deliver_subject="d")
    c.set_active(True, 0)
    first = c.pump(0)
    assert [(type(o), len(o.msgs)) for o in first] == [(Deliveries, SLICE)]  # type: ignore[union-attr]
    assert c.next_deadline(0) == 0
    assert deliveries(c.pump(0)) == [(SLICE + i, 1) for i in (1, 2, 3)]
    assert c.next_deadline(0) is None


@pytest.mark.parametrize("ack_policy", ["explicit", "none"])
def test_a_pull_batch_goes_out_in_whole_slices(ack_policy: str) -> None:
    """Up to a slice in one pump, so in one write, as the reference sends a batch: a
    client whose pending limit is below the batch drops what exceeds it."""
    c = make(store_with(*["s.a"] * (SLICE + 5)), ack_policy=ack_policy)
    assert deliveries(pull(c, b'{"batch":%d}' % (SLICE + 5))) == [
        (i, 1) for i in range(1, SLICE + 1)
    ]
    assert c.next_deadline(0) == 0
    assert deliveries(c.pump(0)) == [(SLICE + i, 1) for i in range(1, 6)]


def test_paused_after_a_slice_waits_for_the_pause() -> None:
    c = make(store_with(*["s.a"] * (SLICE + 1)), deliver_subject="d")
    c.set_active(True, 0)
    c.pump(0)
    c.update_config(dataclasses.replace(c.cfg, pause_until=5 * S))
    assert c.pump(S) == []
    assert c.next_deadline(S) == 5 * S


def test_a_status_between_deliveries_splits_the_run_in_order() -> None:
    store = MemoryStore(name="S")
    for _ in range(4):
        store.append([NewMsg("s.a", None, b"x" * 600_000, S)])
    c = make(store, deliver_subject="d", flow_control=True, idle_heartbeat=S)
    c.set_active(True, 0)
    out = c.pump(0)
    assert [type(o) for o in out] == [Deliveries, Status, Deliveries]
    assert [len(o.msgs) for o in out if isinstance(o, Deliveries)] == [2, 2]
    assert statuses(out) == ["NATS/1.0 100 FlowControl Request"]


def test_ack_floor_over_gaps_wider_than_the_probe() -> None:
    store = store_with("s.a", *["s.b"] * 10, "s.a", "s.a")
    c = make(store, ack_policy="explicit", filter_subject="s.a")
    out = pull(c, b'{"batch":3}')
    assert deliveries(out) == [(1, 1), (12, 1), (13, 1)]
    ack(c, ack_tokens(out, 1), b"", 0)
    assert (c.adflr, c.asflr) == (0, 0)  # seq 1 still pending: the floor stays
    ack(c, ack_tokens(out, 0), b"", 0)
    assert (c.adflr, c.asflr) == (2, 12)  # over seq 12, acked earlier, up to 13
    ack(c, ack_tokens(out, 2), b"", 0)
    assert (c.adflr, c.asflr, c.finished) == (3, 13, [12, 1, 13])


def test_ack_floor_stops_at_the_next_pending_past_a_gap() -> None:
    store = store_with("s.a", *["s.b"] * 10, "s.a")
    c = make(store, ack_policy="explicit", filter_subject="s.a")
    out = pull(c, b'{"batch":2}')
    ack(c, ack_tokens(out, 0), b"", 0)
    assert (c.adflr, c.asflr) == (1, 11)  # the reference's floor: just below seq 12


class ReadCountingStore(MemoryStore):
    """Records how the consumer reads: a slice of the log, or seqs one by one."""

    def __init__(self, *subjects: str) -> None:
        super().__init__(name="S")
        self.append(
            [NewMsg(s, None, f"m{i}".encode(), (i + 1) * S) for i, s in enumerate(subjects)]
        )
        self.reads: list[str] = []

    def load_run(self, start_seq: int, upto: int, limit: int) -> list[StoredMsg]:
        self.reads.append("run")
        return super().load_run(start_seq, upto, limit)

    def load_many(self, seqs: Sequence[int]) -> list[StoredMsg]:
        self.reads.append("many")
        return super().load_many(seqs)


def test_filtered_read_ahead_takes_a_slice_when_every_seq_matches() -> None:
    store = ReadCountingStore(*["s.a"] * 5)
    c = make(store, filter_subject="s.a")
    assert deliveries(pull(c, b'{"batch":1}')) == [(1, 1)]  # the matching seqs are listed
    store.remove(3)  # after the list was read: the slice must skip it
    got = deliveries(pull(c, b'{"batch":5,"no_wait":true}'))
    assert (got, store.reads) == ([(2, 1), (4, 1), (5, 1)], ["run", "run"])  # one batch
    sparse = ReadCountingStore("s.a", "s.b", "s.a")
    assert deliveries(pull(make(sparse, filter_subject="s.a"), b'{"batch":2}')) == [(1, 1), (3, 1)]
    assert sparse.reads == ["many"]


def test_a_request_past_its_expiry_gets_no_message_even_before_its_timer() -> None:
    """A message stored after a request expired goes to nobody, whether or not the timer
    that answers the 408 has fired yet: the client stopped waiting on that inbox, and
    its next fetch would find the message queued there (the reference checks a
    request's expiry before it delivers)."""
    store = store_with()
    c = make(store, ack_policy="explicit")
    assert statuses(pull(c, b'{"batch":1,"expires":1000000000}', now=0)) == []
    store.append([NewMsg("s.a", None, b"late", 2 * S)])
    c.on_commit(1, "s.a")
    out = c.pump(2 * S)  # the store's news, before the expiry timer ran
    assert deliveries(out) == []
    assert statuses(out) == ["NATS/1.0 408 Request Timeout"]
    assert deliveries(pull(c, b'{"batch":1}', now=2 * S)) == [(1, 1)]
