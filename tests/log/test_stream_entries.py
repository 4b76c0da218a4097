"""The stream entries' binary codec: every entry round-trips; anything else raises its error."""

from __future__ import annotations

import jetlake_native
import pytest
from hypothesis import given
from hypothesis import strategies as st

from log.segments.api import FILE_OVERHEAD, MEMORY_OVERHEAD, NewMsg, Overhead, msg_size
from log.segments.ipc import encode_batch
from log.streams.entries import (
    _BATCH_HEAD,
    ROLLUPS,
    Barrier,
    ConsumerOp,
    Delete,
    Entry,
    EntryDecodeError,
    Expire,
    FastMark,
    Publish,
    Purge,
    RawRun,
    Remove,
    Restored,
    Run,
    _read_publishes,
    decode,
    decode_deferring_runs,
    encode,
    own_entry,
    pack_run,
    unpack_runs,
)

u64 = st.integers(0, 2**64 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
# any code point but lone surrogates (escaped bytes are tested on their own)
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
seqs = st.lists(u64, max_size=50).map(tuple)

publishes = st.builds(
    Publish,
    st.builds(NewMsg, text, st.none() | st.binary(max_size=200), st.binary(max_size=500), i64),
    u64,
    st.sampled_from(ROLLUPS),
    i64,
    text,
    st.none()
    | st.builds(FastMark, text, u64, st.booleans(), st.integers(1, 65_535), st.booleans(), text),
)
entries: st.SearchStrategy[Entry] = st.one_of(
    publishes,
    st.builds(Delete, u64, u64),
    st.builds(Remove, seqs),
    st.builds(Purge, text, u64, u64, u64, u64),
    st.builds(Expire, i64, u64, seqs, u64),
    st.builds(ConsumerOp, text, st.binary(max_size=200)),
    st.just(Barrier()),
    st.builds(
        Restored,
        st.lists(publishes.map(lambda p: p._replace(fast=None)), max_size=3).map(tuple),
        u64,
    ),
    st.builds(Run, st.lists(publishes.map(lambda p: p._replace(fast=None)), max_size=3).map(tuple)),
)


@given(entries)
def test_every_entry_round_trips(entry: Entry) -> None:
    assert decode(encode(entry)) == entry


def test_a_header_block_absent_and_empty_stay_apart() -> None:
    none = Publish(NewMsg("a", None, b"x", 1), 1)
    empty = Publish(NewMsg("a", b"", b"x", 1), 1)
    assert decode(encode(none)).msg.hdr is None
    assert decode(encode(empty)).msg.hdr == b""


def test_escaped_bytes_in_strings_round_trip() -> None:
    subject = b"s.\xff".decode("utf-8", "surrogateescape")
    entry = Publish(NewMsg(subject, None, b"", 0), 7, msg_id=subject)
    assert decode(encode(entry)) == entry


@given(entries, st.data())
def test_a_truncated_or_extended_entry_raises(entry: Entry, data: st.DataObject) -> None:
    raw = encode(entry)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(EntryDecodeError):
        decode(raw[:cut])
    with pytest.raises(EntryDecodeError):
        decode(raw + data.draw(st.binary(min_size=1, max_size=9)))


@given(st.binary(max_size=64))
def test_garbage_decodes_or_raises_the_typed_error(raw: bytes) -> None:
    try:
        entry = decode(raw)
    except EntryDecodeError:
        return
    assert encode(entry) == raw  # whatever decodes is exactly one entry's bytes


def test_unknown_kinds_and_rollups_are_named() -> None:
    with pytest.raises(EntryDecodeError, match="unknown stream entry kind 99"):
        decode(b"\x63")
    raw = bytearray(encode(Publish(NewMsg("a", None, b"", 0), 1, "sub")))
    raw[25] = 9  # the rollup code
    with pytest.raises(EntryDecodeError, match="rollup code 9"):
        decode(bytes(raw))


@given(st.lists(publishes, max_size=4), st.lists(entries, max_size=3))
def test_a_packed_run_unpacks_to_its_publishes_in_place(
    run: list[Publish], around: list[Entry]
) -> None:
    packed = pack_run(run)
    if run and all(p.fast is None for p in run):
        assert packed == [Run(tuple(run))]
    else:
        assert packed == run  # none, or a fast batch's: as it is
    log = [*around, *packed, *around]
    assert unpack_runs(log) == [*unpack_runs(around), *run, *unpack_runs(around)]


run_publishes = st.lists(publishes.map(lambda p: p._replace(fast=None)), max_size=4).map(tuple)


@given(run_publishes, st.data())
def test_the_compiled_decoder_reads_a_run_as_the_reference_or_leaves_it(
    msgs: tuple[Publish, ...], data: st.DataObject
) -> None:
    """native/src/entries.rs gives what `_decode_publishes` gives, or None for the
    reference to read (and name what is wrong): also for a run with one byte changed."""
    raw = bytearray(encode(Run(msgs)))
    assert _compiled(bytes(raw), len(msgs)) == msgs
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] = data.draw(st.integers(0, 255))
    if at < _BATCH_HEAD.size:
        return  # the kind and count are read by the Python side
    compiled = _compiled(bytes(raw), len(msgs))
    try:
        reference = _read_publishes(bytes(raw), _BATCH_HEAD.size, len(msgs), "run")
    except EntryDecodeError:
        assert compiled is None
        return
    if compiled is not None:
        assert compiled == reference
        assert all(type(p) is Publish and type(p.msg) is NewMsg for p in compiled)


def test_the_compiled_decoder_leaves_escaped_bytes_to_the_reference() -> None:
    msg = Publish(NewMsg("a\udcff", None, b"x", 1), 7, msg_id="id\udc80")
    raw = encode(Run((msg, msg)))
    assert _compiled(raw, 2) is None
    assert decode(raw) == Run((msg, msg))


def _compiled(raw: bytes, count: int) -> tuple[Publish, ...] | None:
    found: tuple[Publish, ...] | None = jetlake_native.decode_publishes(
        raw, _BATCH_HEAD.size, count, NewMsg, Publish, ROLLUPS
    )
    return found


plain_msgs = st.lists(
    st.builds(NewMsg, text, st.none() | st.binary(max_size=50), st.binary(max_size=90), i64),
    min_size=1,
    max_size=6,
)


@given(plain_msgs, st.integers(1, 2**40), st.sampled_from([FILE_OVERHEAD, MEMORY_OVERHEAD]))
def test_a_plain_run_becomes_the_batch_its_publishes_would(
    msgs: list[NewMsg], first: int, overhead: Overhead
) -> None:
    """A follower's RawRun laid out from its bytes is what the store makes of its messages:
    the same IPC bytes, subjects, counted sizes and timestamps."""
    run = Run(tuple(Publish(m, first + i) for i, m in enumerate(msgs)))
    raw = decode_deferring_runs(encode(run))
    assert type(raw) is RawRun and raw.msgs == run.msgs
    rows = raw.rows(overhead)
    assert rows is not None
    sizes = [msg_size(m.subject, m.hdr, m.data, overhead) for m in msgs]
    assert rows.payload == encode_batch(first, msgs)
    assert rows.first == first and rows.subjects == [m.subject for m in msgs]
    assert list(memoryview(rows.sizes).cast("Q")) == sizes and rows.total == sum(sizes)
    stamps = [m.ts for m in msgs]
    assert (rows.min_ts, rows.max_ts, rows.last_ts) == (min(stamps), max(stamps), stamps[-1])


@pytest.mark.parametrize(
    "change",
    [
        {"msg_id": "m"},
        {"rollup": "sub"},
        {"ttl": 5},
        {"seq": 9},  # not the next after the first
    ],
)
def test_a_run_that_is_not_plain_is_read_as_its_publishes(change: dict[str, object]) -> None:
    first = Publish(NewMsg("a", None, b"1", 1), 3)
    second = Publish(NewMsg("a", None, b"2", 2), 4)._replace(**change)
    raw = decode_deferring_runs(encode(Run((first, second))))
    assert type(raw) is RawRun
    assert raw.rows(FILE_OVERHEAD) is None
    assert raw.msgs == (first, second)


def test_a_deferred_run_that_is_malformed_names_what_is_wrong() -> None:
    raw = decode_deferring_runs(encode(Run((Publish(NewMsg("a", None, b"1", 1), 3),) * 2))[:-1])
    assert type(raw) is RawRun and raw.rows(FILE_OVERHEAD) is None
    with pytest.raises(EntryDecodeError, match="run entry"):
        raw.msgs  # noqa: B018
    with pytest.raises(EntryDecodeError, match="kind 11"):
        decode_deferring_runs(bytes((11, 0)))  # too short for its count


@given(run_publishes)
def test_the_compiled_encoder_writes_a_run_as_the_reference(msgs: tuple[Publish, ...]) -> None:
    """native/src/entries.rs writes each publish as `encode` does."""
    head = _BATCH_HEAD.pack(11, len(msgs))
    reference = head + b"".join(len(b).to_bytes(4, "big") + b for b in map(encode, msgs))
    compiled = jetlake_native.encode_publishes(head, msgs)
    assert compiled == reference
    assert encode(Run(msgs)) == reference


def test_the_compiled_encoder_leaves_fast_batches_and_escapes_to_the_reference() -> None:
    escaped = Publish(NewMsg("a\udcff", None, b"x", 1), 7)
    assert jetlake_native.encode_publishes(b"", (escaped,)) is None
    mark = FastMark("b", 1, False, 10, False, "r")
    msg = Publish(NewMsg("a", b"", b"x", 1), 7, "all", -1, "id", mark)
    assert jetlake_native.encode_publishes(b"", (msg,)) is None
    assert jetlake_native.encode_publishes(b"", (msg._replace(fast=None),)) is not None


def test_the_leader_applies_its_run_from_the_bytes_it_proposed_keeping_its_publishes() -> None:
    run = Run(tuple(Publish(NewMsg("a", None, b"%d" % i, i), 5 + i) for i in range(3)))
    raw = encode(run)
    own = own_entry(raw, run)
    assert type(own) is RawRun and own.msgs is run.msgs and own.data is raw
    assert own.rows(FILE_OVERHEAD) == decode_deferring_runs(raw).rows(FILE_OVERHEAD)  # type: ignore[union-attr]
    single = run.msgs[0]
    assert own_entry(encode(single), single) is single
