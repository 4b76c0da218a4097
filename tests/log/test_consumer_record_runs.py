"""The ack log's records read in runs, against the rule read one record at a time.

`record_runs` groups a frame's consecutive records of one tag by counting tags in
slices, and `replay` applies each run whole. The model below is the per-record walk
and the per-record replay they replace, written from the record format
(`log.consumers.store`): both must give the same runs, the same errors and the same
state for any frame, hand-made shapes (a turn's acks, then its deliveries) and
arbitrary ones alike.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from log.consumers.store import (
    ACKED,
    DELIVERED,
    GAVE_UP,
    POSITION,
    RESET,
    WIDTH,
    record_runs,
    replay,
)

SEQ = st.integers(1, 12)
RECORD = st.one_of(
    st.tuples(st.just(DELIVERED), SEQ, st.integers(1, 50), st.integers(1, 3), st.integers(0, 99)),
    st.tuples(st.just(ACKED), SEQ),
    st.tuples(st.just(GAVE_UP), SEQ),
    st.tuples(st.just(RESET), SEQ),
    st.tuples(st.just(POSITION), *([st.integers(0, 60)] * 6)),
)
# Runs of one kind, as a turn writes them: many deliveries or acks in a row.
RUN = st.tuples(RECORD, st.integers(1, 40)).map(lambda r: [r[0]] * r[1]) | st.lists(
    RECORD, max_size=6
)
FRAME = st.lists(RUN, max_size=6).map(lambda runs: [v for run in runs for r in run for v in r])
BASE: dict[str, Any] = {
    "dseq": 1,
    "sseq": 1,
    "adflr": 0,
    "asflr": 0,
    "pending": [[3, 2, 7]],
    "redelivered": [[3, 2]],
    "lps": [1, 4, 20],
    "lps_resume": 9,
    "last_delivered": 0,
    "last_acked": 0,
}


def model_runs(records: list[int]) -> list[tuple[int, int, int]]:
    runs: list[tuple[int, int, int]] = []
    i = 0
    while i < len(records):
        tag = records[i]
        if tag not in WIDTH:
            raise ValueError(f"unknown record tag {tag} at {i}")
        if i + WIDTH[tag] > len(records):
            raise ValueError(f"record at {i} cut short")
        if runs and runs[-1][0] == tag and runs[-1][2] == i:
            runs[-1] = (tag, runs[-1][1], i + WIDTH[tag])
        else:
            runs.append((tag, i, i + WIDTH[tag]))
        i += WIDTH[tag]
    return runs


def model_replay(state: dict[str, Any], frames: list[list[int]]) -> dict[str, Any]:
    pending = {s: (d, ts) for s, d, ts in state["pending"]}
    redelivered = {s: n for s, n in state["redelivered"]}
    lps, out = state["lps"], dict(state)
    keys = ("dseq", "sseq", "adflr", "asflr", "last_delivered", "last_acked")
    for records in frames:
        i = 0
        while i < len(records):
            tag = records[i]
            if tag == DELIVERED:
                pending[records[i + 1]] = (records[i + 2], records[i + 4])
                if records[i + 3] > 1:
                    redelivered[records[i + 1]] = records[i + 3]
            elif tag in (ACKED, GAVE_UP):
                pending.pop(records[i + 1], None)
                if tag == ACKED:
                    redelivered.pop(records[i + 1], None)
            elif tag == RESET:
                pending.clear()
                redelivered.clear()
                lps, out["lps_resume"] = [], 0
            else:
                out.update(zip(keys, records[i + 1 : i + 7], strict=True))
            i += WIDTH[tag]
    out["pending"] = [[s, d, ts] for s, (d, ts) in sorted(pending.items())]
    out["redelivered"] = [[s, n] for s, n in redelivered.items()]
    out["lps"] = [s for s in lps if s >= out["sseq"]]
    return out


def log_of(frames: list[list[int]]) -> bytes:
    out = b""
    for records in frames:
        payload = array("q", records).tobytes()
        out += struct.pack("<II", len(payload), zlib.crc32(payload)) + payload
    return out


@settings(max_examples=500)
@given(FRAME, st.integers(0, 7))
def test_runs_are_the_per_record_walks_grouped(records: list[int], cut: int) -> None:
    """Whole frames, and frames with their last record cut short."""
    for values in (records, records[: max(len(records) - cut, 0)]):
        try:
            expected: object = model_runs(values)
        except ValueError as err:
            expected = str(err)
        try:
            got: object = list(record_runs(array("q", values)))
        except ValueError as err:
            got = str(err)
        assert got == expected


@settings(max_examples=500)
@given(st.lists(FRAME.filter(bool), max_size=4))
def test_replay_in_runs_is_the_per_record_replay(frames: list[list[int]]) -> None:
    assert replay(BASE, log_of(frames)) == model_replay(BASE, frames)


def test_an_unknown_tag_inside_a_run_is_named_by_its_index() -> None:
    records = array("q", [ACKED, 1, ACKED, 2, 9, 3])
    with pytest.raises(ValueError, match="unknown record tag 9 at 4"):
        list(record_runs(records))
