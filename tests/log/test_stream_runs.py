"""A client read's run of plain publishes (`Stream.publish_run`) answers and stores what
publishing its messages one by one would, whether it is admitted whole or each alone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from log.segments.api import msg_size
from log.streams.stream import Stream
from tests.log.test_stream import make, read_headers

SUBJECT = "s.a"
PAYLOADS = [b"%d" % i * (i + 1) for i in range(12)]  # 1 to 12 bytes
REPLIES = [b"r%d" % i if i % 4 else b"" for i in range(12)]  # some ask for no answer


def stored(stream: Stream) -> list[tuple[int, str, bytes | None, bytes]]:
    msgs = (stream.store.load(seq) for seq in stream.store.seqs_for(">", 0))
    return [(m.seq, m.subject, m.hdr, m.data) for m in msgs if m is not None]


async def one_by_one(stream: Stream) -> list[tuple[bytes, Any]]:
    answers: list[tuple[bytes, Any]] = []
    for reply, data in zip(REPLIES, PAYLOADS, strict=True):
        sink = (lambda body, r=reply: answers.append((r, json.loads(body)))) if reply else None
        stream.publish(SUBJECT, None, data, {}, sink)
    await stream.flush()
    return answers


async def as_run(stream: Stream) -> list[tuple[bytes, Any]]:
    answers: list[tuple[bytes, Any]] = []
    stream.publish_run(SUBJECT, REPLIES, PAYLOADS, answers.extend)
    await stream.flush()
    return [(reply, json.loads(body)) for reply, body in answers]


@pytest.mark.parametrize(
    ("cfg", "whole"),
    [
        ({}, True),
        ({"max_msgs_per_subject": 3, "max_bytes": 200}, True),  # discard old: at apply
        ({"subject_transform": {"src": "s.a", "dest": "s.b"}}, True),
        ({"max_msg_size": 8}, False),  # some too big: each refused or taken alone
        ({"discard": "new", "max_msgs": 5}, False),
        ({"discard": "new", "max_bytes": 300}, False),
        ({"allow_msg_counter": True}, False),
        ({"republish": {"src": ">", "dest": "re.>"}}, False),
    ],
)
async def test_a_run_answers_and_stores_what_one_by_one_would(
    cfg: dict[str, Any], whole: bool
) -> None:
    echoes: dict[str, list[tuple[str, bytes, bytes]]] = {"alone": [], "run": []}
    alone, run = (
        Stream(
            s.config,
            s.store,
            created_ns=0,
            read_headers=read_headers,
            republish=lambda *echo, sent=sent: sent.append(echo),
        )
        for s, sent in ((make(**cfg), echoes["alone"]), (make(**cfg), echoes["run"]))
    )
    await one_by_one(alone)  # messages before the run: the limits already count them
    await as_run(run)
    assert (run.proposed.admit_plain(SUBJECT, PAYLOADS) is not None) is whole
    run.proposed.reset()  # nothing of that probe is proposed
    expected, got = await one_by_one(alone), await as_run(run)
    assert got == expected
    assert stored(run) == stored(alone)
    sent = {k: [(subj, data) for subj, _, data in v] for k, v in echoes.items()}
    assert sent["run"] == sent["alone"]  # republished alike (headers but the time stamp)
    assert run.store.totals() == alone.store.totals()
    assert run.proposed.msgs == alone.proposed.msgs
    assert run.proposed.bytes == alone.proposed.bytes


async def test_a_run_admitted_whole_counts_as_in_flight_until_it_applies() -> None:
    stream = make()
    proposed = stream.proposed
    entries = proposed.admit_plain(SUBJECT, PAYLOADS)
    assert entries is not None
    assert [e.seq for e in entries] == list(range(1, 13))
    assert proposed.last_seq == 12 and proposed.last_seq_for(SUBJECT) == 12
    assert proposed.subject_msgs(SUBJECT) == proposed.msgs == 12
    size = sum(msg_size(SUBJECT, None, d, stream.store.overhead) for d in PAYLOADS)
    assert proposed.bytes == size
    proposed.settle(entries, following=False)
    assert proposed.msgs == proposed.bytes == proposed.subject_msgs(SUBJECT) == 0
