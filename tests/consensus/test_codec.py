"""Frames round-trip every message, survive any split, and reject any garbage cleanly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consensus.codec import (
    _KIND_LIST,
    _LEN,
    _TYPE_LIST,
    MAX_FRAME,
    CodecError,
    FrameDecoder,
    _payload,
    _Reader,
    decode,
    encode,
)
from consensus.types import (
    ConfState,
    Entry,
    EntryKind,
    Message,
    MessageType,
    Snapshot,
    SnapshotMeta,
)
from ingest.parser.fast import native

_ENUMS = (_TYPE_LIST, _KIND_LIST)
U64 = st.integers(0, 2**64 - 1)
NAMES = st.text(max_size=12)
entries = st.builds(Entry, U64, U64, st.sampled_from(EntryKind), st.binary(max_size=64))
snapshots = st.builds(
    Snapshot,
    st.builds(
        SnapshotMeta,
        U64,
        U64,
        st.builds(ConfState, st.frozensets(NAMES, max_size=5), st.frozensets(NAMES, max_size=3)),
    ),
    st.binary(max_size=128),
)
messages = st.builds(
    Message,
    st.sampled_from(MessageType),
    NAMES,
    NAMES,
    U64,
    log_term=U64,
    index=U64,
    entries=st.lists(entries, max_size=5).map(tuple),
    commit=U64,
    reject=st.booleans(),
    reject_hint=U64,
    context=st.binary(max_size=16),
    snapshot=st.none() | snapshots,
    held=st.booleans(),
)


@given(messages)
def test_every_message_round_trips(msg: Message) -> None:
    assert decode(encode(msg)) == msg


@given(messages)
def test_a_message_without_snapshot_or_context_is_framed_as_the_general_path_frames_it(
    msg: Message,
) -> None:
    payload = _payload(msg)
    assert encode(msg) == _LEN.pack(len(payload)) + payload


@given(st.lists(messages, max_size=6), st.data())
def test_a_stream_of_frames_decodes_whatever_the_split(
    msgs: list[Message], data: st.DataObject
) -> None:
    stream = b"".join(encode(m) for m in msgs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    decoder = FrameDecoder()
    out: list[Message] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        out += decoder.feed(stream[start:end])
    assert out == msgs
    assert decoder.pending == 0


@given(st.binary(max_size=512))
def test_any_bytes_decode_or_raise_the_codec_error(junk: bytes) -> None:
    decoder = FrameDecoder(max_frame=1024)
    try:
        decoded = decoder.feed(junk)
    except CodecError:
        with pytest.raises(CodecError):  # the stream lost its framing: stays refused
            decoder.feed(b"")
        return
    assert all(isinstance(m, Message) for m in decoded)
    assert decoder.pending <= len(junk)


@settings(deadline=None)  # a snapshot's frame on a crowded machine took 0.5 s of the 0.2
@given(messages, st.data())
def test_a_corrupted_frame_decodes_differently_or_raises_the_codec_error(
    msg: Message, data: st.DataObject
) -> None:
    frame = bytearray(encode(msg))
    at = data.draw(st.integers(0, len(frame) - 1))
    frame[at] ^= data.draw(st.integers(1, 255))
    try:
        decoded = FrameDecoder().feed(bytes(frame))
    except CodecError:
        return
    assert decoded != [msg]  # every byte means something: a flip never goes unnoticed


def test_an_oversized_announcement_is_refused_before_buffering_it() -> None:
    decoder = FrameDecoder()
    with pytest.raises(CodecError, match="limit"):
        decoder.feed((MAX_FRAME + 1).to_bytes(4, "big"))


def test_unknown_message_type_and_truncation_are_named() -> None:
    frame = bytearray(encode(Message(MessageType.APPEND, "a", "b", 1)))
    frame[5] = 99  # the type byte, after the length and version
    with pytest.raises(CodecError, match="MessageType 99"):
        decode(bytes(frame))
    whole = encode(Message(MessageType.VOTE, "a", "b", 2, entries=(Entry(1, 1, data=b"xyz"),)))
    short = (len(whole) - 5).to_bytes(4, "big") + whole[4:-1]
    with pytest.raises(CodecError, match="truncated"):
        decode(short)


def test_numbers_that_do_not_fit_are_refused_at_encode() -> None:
    with pytest.raises(CodecError, match="to b"):
        encode(Message(MessageType.APPEND, "a", "b", -1))


def _reference(payload: bytes) -> Message | CodecError:
    try:
        return _Reader(payload, 0, len(payload)).message()
    except CodecError as exc:
        return exc


@pytest.mark.skipif(native is None, reason="the compiled extension is not installed")
@settings(deadline=None)
@given(messages, st.data())
def test_the_compiled_reader_agrees_with_the_reference_or_hands_back(
    msg: Message, data: st.DataObject
) -> None:
    """Whole, and with a byte changed: the same message with the same enum members, or
    None where the reference raises or reads a snapshot (it then reads the frame itself)."""
    payload = bytearray(encode(msg)[4:])
    if data.draw(st.booleans()):
        payload[data.draw(st.integers(0, len(payload) - 1))] ^= data.draw(st.integers(1, 255))
    padded = b"xy" + bytes(payload) + b"z"  # read at an offset, up to an end
    compiled = native.decode_raft(padded, 2, len(padded) - 1, Message, Entry, *_ENUMS)
    expected = _reference(bytes(payload))
    if compiled is None:
        assert isinstance(expected, CodecError) or expected.snapshot is not None
        return
    assert compiled == expected
    assert type(compiled.type) is MessageType
    assert all(type(entry.kind) is EntryKind for entry in compiled.entries)
