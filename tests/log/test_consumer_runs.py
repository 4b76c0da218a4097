"""Pull deliveries in runs (`Consumer._send_run`) against one message at a time.

The same random consumers, stores and events (pulls of any size, several requests
at once, byte budgets, acks, naks, time passing, new messages) run twice: as the
consumer runs, and with runs switched off so every message takes `_take` and
`_send`. Every output (deliveries with their ack replies, statuses) and every piece
of state, journal included, must be the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from log.consumers.consumer import Consumer
from log.consumers.wire import Deliveries, Output, Status
from log.segments.api import NewMsg
from log.segments.memstore import MemoryStore
from tests.log.test_consumer import S, make

CONFIGS = st.fixed_dictionaries(
    {
        "ack_policy": st.sampled_from(["none", "explicit", "all"]),
        "max_ack_pending": st.sampled_from([0, 3, 50]),
    },
    optional={
        "filter_subject": st.just("s.a"),
        "deliver_policy": st.sampled_from(["last_per_subject", "new", "last"]),
        "headers_only": st.just(True),
        "max_deliver": st.just(2),
    },
)
EVENT = st.one_of(
    st.tuples(st.just("pull"), st.sampled_from([b"1", b"7", b'{"batch":40}', b'{"batch":5}'])),
    st.tuples(st.just("pull"), st.sampled_from([b'{"batch":9,"max_bytes":300}'])),
    st.tuples(st.just("pull"), st.sampled_from([b'{"batch":3,"no_wait":true}'])),
    st.tuples(st.just("ack"), st.sampled_from([b"", b"-NAK", b"+TERM"])),
    st.tuples(st.just("acks"), st.integers(1, 12)),
    st.tuples(st.just("time"), st.integers(1, 40)),
    st.tuples(st.just("publish"), st.integers(1, 30)),
)


def flat(out: list[Output]) -> list[Any]:
    items: list[Any] = []
    for o in out:
        if isinstance(o, Deliveries):
            items += [("msg", o.subject, *m) for m in o.wire()]
        elif isinstance(o, Status):
            items.append(("status", o.subject, o.hdr))
    return items


def run(
    cfg: dict[str, Any], first: int, events: list[Any], *, runs: bool, plain_acks: bool = True
) -> Any:
    """`plain_acks`: a read of plain acks goes to `plain_acks` whole, else to `ack` each."""
    store = MemoryStore(name="S")
    seq = 0

    def publish(n: int) -> None:  # one batch: a run is read up to a batch's end
        nonlocal seq
        msgs = []
        for _ in range(n):
            seq += 1
            subject = "s.a" if seq % 3 else "s.b"
            msgs.append(NewMsg(subject, b"NATS/1.0\r\nH: 1\r\n\r\n", b"m%d" % seq, seq * S))
        if msgs:
            store.append(msgs)

    publish(first)
    c = make(store, **cfg)
    c.journal = []
    if not runs:
        c._send_run = lambda *_: 0  # type: ignore[method-assign]
    now, log = 0, []
    for n, (kind, arg) in enumerate(events):
        if kind == "pull":
            log += flat(c.pull(f"inbox.{n % 3}", arg, now))
        elif kind == "ack" and c.pending:
            sseq = sorted(c.pending)[n % len(c.pending)]
            c.ack(1, sseq, c.pending[sseq][0], arg, now)
        elif kind == "acks":  # every other pending message, one twice, one never sent
            seqs = sorted(c.pending)[::2][:arg]
            flat_acks = [1, c.sseq + 1, c.dseq + 1]
            for sseq in [*seqs, *seqs[:1]]:
                flat_acks = [1, sseq, c.pending.get(sseq, (0,))[0], *flat_acks]
            if plain_acks:
                c.plain_acks(flat_acks, now)
            else:
                for i in range(0, len(flat_acks), 3):
                    c.ack(*flat_acks[i : i + 3], b"", now)
        elif kind == "time":
            now += arg * S
        elif kind == "publish":
            publish(arg)
            c.refresh(seq)
        log += flat(c.pump(now))
    state = (c.snapshot(), dict(c.pending), c.journal, c.finished, c.npc, c.next_deadline(now))
    return log, state


@settings(max_examples=400, deadline=None)
@given(CONFIGS, st.integers(0, 60), st.lists(EVENT, max_size=25))
def test_runs_deliver_exactly_what_single_messages_do(
    cfg: dict[str, Any], first: int, events: list[Any]
) -> None:
    assert run(cfg, first, events, runs=True) == run(cfg, first, events, runs=False)


@settings(max_examples=300, deadline=None)
@given(CONFIGS, st.integers(0, 60), st.lists(EVENT, max_size=25))
def test_a_read_of_plain_acks_does_what_acking_each_does(
    cfg: dict[str, Any], first: int, events: list[Any]
) -> None:
    whole = run(cfg, first, events, runs=True, plain_acks=True)
    assert whole == run(cfg, first, events, runs=True, plain_acks=False)


def test_a_fetch_goes_out_in_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The property would hold with runs never taken: prove a plain fetch takes them."""
    sizes: list[int] = []
    real = Consumer._record

    def counted(self: Consumer, target: str, msgs: list[Any], *args: Any) -> None:
        sizes.append(len(msgs))
        real(self, target, msgs, *args)

    monkeypatch.setattr(Consumer, "_record", counted)
    log, _ = run({"ack_policy": "explicit"}, 20, [("pull", b'{"batch":20}')], runs=True)
    assert len([x for x in log if x[0] == "msg"]) == 20
    assert max(sizes) > 1
