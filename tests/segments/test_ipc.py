"""The IPC messages written without building Arrow arrays are pyarrow's own, byte for byte."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from log.segments.api import NewMsg
from log.segments.ipc import FAST, arrow_batch, decode_batch, encode_batch

messages = st.lists(
    st.builds(
        NewMsg,
        subject=st.text(min_size=1, max_size=20),
        hdr=st.none() | st.binary(max_size=40),
        data=st.binary(max_size=70),
        ts=st.integers(0, 2**63 - 1),
    ),
    min_size=1,
    max_size=80,
)


def test_the_fast_layout_holds_for_this_pyarrow() -> None:
    """If a pyarrow upgrade moved the metadata's fields, batches would silently go slow."""
    assert FAST


@settings(max_examples=300, deadline=None)
@given(first=st.integers(1, 2**62), msgs=messages)
def test_same_bytes_as_pyarrow_and_the_same_rows_back(first: int, msgs: list[NewMsg]) -> None:
    payload = encode_batch(first, msgs)
    assert payload == arrow_batch(first, msgs).serialize().to_pybytes()
    batch = decode_batch(payload)
    assert batch.column("seq").to_pylist() == list(range(first, first + len(msgs)))
    assert batch.column("hdr").to_pylist() == [m.hdr for m in msgs]
    assert batch.column("subject").to_pylist() == [m.subject for m in msgs]
