"""The IPC messages written without building Arrow arrays are pyarrow's own, byte for byte,
from the pure encoder and from the compiled one (native/src/ipc.rs) alike."""

from __future__ import annotations

import hypothesis.strategies as st
import jetlake_native
import pytest
from hypothesis import given, settings

from log.segments import ipc
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


@settings(max_examples=300, deadline=None)
@given(first=st.integers(1, 2**62) | st.integers(2**64 - 81, 2**64 - 80), msgs=messages)
def test_the_compiled_encoder_writes_the_pure_ones_bytes(first: int, msgs: list[NewMsg]) -> None:
    native = jetlake_native.encode_batch(ipc._META, ipc._LAYOUT, first, msgs)
    assert native == ipc._encode(first, msgs)


def test_a_field_that_is_no_plain_bytes_takes_the_pure_encoder() -> None:
    """A bytearray payload (or a subclass of nothing expected) is the reference's to encode."""
    msgs = [NewMsg("a", None, b"x", 1), NewMsg("b", b"h", bytearray(b"yz"), 2)]  # type: ignore[arg-type]
    assert jetlake_native.encode_batch(ipc._META, ipc._LAYOUT, 3, msgs) is None
    assert encode_batch(3, msgs) == ipc._encode(3, msgs)
    assert decode_batch(encode_batch(3, msgs)).column("data").to_pylist() == [b"x", b"yz"]


@pytest.mark.parametrize(
    ("first", "msgs", "error"),
    [
        (1, [NewMsg("\udc80", None, b"", 1)], UnicodeEncodeError),  # a lone surrogate
        (1, [NewMsg("a", None, b"", 2**63)], OverflowError),  # ts past int64
        (2**64 - 1, [NewMsg("a", None, b"", 1)] * 2, OverflowError),  # seq past uint64
    ],
)
def test_what_the_pure_encoder_refuses_the_compiled_one_refuses_alike(
    first: int, msgs: list[NewMsg], error: type[Exception]
) -> None:
    with pytest.raises(error):
        ipc._encode(first, msgs)
    with pytest.raises(error):
        jetlake_native.encode_batch(ipc._META, ipc._LAYOUT, first, msgs)
