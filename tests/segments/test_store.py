"""Behaviour of the MsgStore contract, the same for the file and memory stores."""

from __future__ import annotations

import pytest

from log.segments import NewMsg, StoredMsg, msg_size
from log.segments.api import StoreError
from log.streams.entries import Publish, Run, decode_deferring_runs, encode
from tests.segments.conftest import Stores, msgs

SUBJECTS = ["orders.eu.new", "orders.us.new", "orders.eu.paid", "audit"]


def fill(st: Stores, batches: int = 10, per: int = 7) -> list[StoredMsg]:
    """Append batches cycling over SUBJECTS; return what a reader should see."""
    out = []
    for b in range(batches):
        subjects = [SUBJECTS[(b * per + i) % len(SUBJECTS)] for i in range(per)]
        batch = msgs(subjects, ts=1_000 * (b + 1))
        first = st.store.append(batch)
        assert first == b * per + 1
        out += [StoredMsg(first + i, m.ts, m.subject, m.hdr, m.data) for i, m in enumerate(batch)]
    return out


def test_round_trip_and_restart(stores: Stores) -> None:
    written = fill(stores)
    for store in stores.now_and_after_restart():
        assert [store.load(m.seq) for m in written] == written
        assert store.load(0) is None and store.load(len(written) + 1) is None
        st = store.state()
        assert (st.msgs, st.first_seq, st.last_seq, st.num_deleted) == (70, 1, 70, 0)
        assert st.bytes == sum(msg_size(m.subject, m.hdr, m.data, store.overhead) for m in written)
        assert (st.first_ts, st.last_ts) == (written[0].ts, written[-1].ts)
        assert st.num_subjects == len(SUBJECTS)


def test_filtered_lookups(stores: Stores) -> None:
    written = fill(stores)
    store = stores.reopen()
    eu = [m for m in written if m.subject.startswith("orders.eu.")]
    assert store.load_next(1, "orders.eu.*") == eu[0]
    assert store.load_next(eu[3].seq + 1, "orders.eu.>") == eu[4]
    assert store.load_next(1, "nothing.*") is None
    assert store.load_last("orders.*.new") == [m for m in written if m.subject.endswith("new")][-1]
    assert store.load_last("audit") == [m for m in written if m.subject == "audit"][-1]
    assert list(store.seqs_for("orders.eu.*", 30)) == [m.seq for m in eu if m.seq >= 30]
    assert list(store.seqs_for(">", 65)) == [65, 66, 67, 68, 69, 70]
    assert store.subjects("orders.>") == {
        s: 70 // 4 + (i < 70 % 4) for i, s in enumerate(SUBJECTS) if s != "audit"
    }
    ss = store.subject_state("orders.us.new")
    us = [m.seq for m in written if m.subject == "orders.us.new"]
    assert ss is not None and (ss.msgs, ss.first_seq, ss.last_seq) == (len(us), us[0], us[-1])
    assert store.subject_state("nope") is None


def test_remove_and_interior_gaps(stores: Stores) -> None:
    written = fill(stores)
    store = stores.store
    assert store.remove(5) and not store.remove(5) and not store.remove(999)
    assert store.remove(1)
    assert store.remove(2)
    for store in stores.now_and_after_restart():
        st = store.state(with_deleted=True)
        assert (st.msgs, st.first_seq, st.num_deleted, st.deleted) == (67, 3, 1, [5])
        assert store.load(5) is None and store.load_next(5) == written[5]
        assert st.bytes == sum(
            msg_size(m.subject, m.hdr, m.data, store.overhead) for m in written[2:] if m.seq != 5
        )


def test_remove_many_is_remove_of_each_at_once(stores: Stores) -> None:
    """What a run of acks on an interest stream does: the same end state as one remove
    per seq, with gone, duplicate and unknown seqs skipped."""
    written = fill(stores)
    store = stores.store
    assert store.remove(7)
    assert store.remove_many([9, 1, 7, 2, 9, 999, 40]) == 4  # 7 gone, 9 twice, 999 unknown
    for store in stores.now_and_after_restart():
        st = store.state(with_deleted=True)
        assert (st.msgs, st.first_seq, st.deleted) == (65, 3, [7, 9, 40])
        assert store.load_many([1, 2, 3, 9, 40, 41]) == [written[2], written[40]]
        assert store.subjects() == {
            subject: sum(
                1 for m in written if m.subject == subject and m.seq not in (1, 2, 7, 9, 40)
            )
            for subject in SUBJECTS
        }


def test_purge_filter_upto_keep(stores: Stores) -> None:
    written = fill(stores)
    store = stores.store
    assert store.purge("orders.eu.new", upto_seq=20) == len(
        [m for m in written if m.subject == "orders.eu.new" and m.seq < 20]
    )
    audit = [m.seq for m in written if m.subject == "audit"]
    assert store.purge("audit", keep=2) == len(audit) - 2
    before = store.state().msgs
    assert store.purge(">", keep=30) == before - 30
    for store in stores.now_and_after_restart():
        st = store.state()
        assert st.msgs == 30
        ss = store.subject_state("audit")
        assert ss is not None and ss.msgs <= 2 and ss.last_seq == audit[-1]
        live = list(store.seqs_for(">", 0))
        assert len(live) == 30 and live[-1] == 70 and st.first_seq == live[0]
        assert st.num_deleted == st.last_seq - st.first_seq + 1 - st.msgs


def test_full_purge_keeps_numbering_across_restart(stores: Stores) -> None:
    fill(stores)
    assert stores.store.purge() == 70
    store = stores.reopen()
    st = store.state()
    assert (st.msgs, st.first_seq, st.last_seq, st.num_deleted, st.bytes) == (0, 71, 70, 0, 0)
    assert store.load_last() is None and store.load_next(0) is None
    assert store.append(msgs(["x"])) == 71
    store = stores.reopen()
    assert store.state().first_seq == 71 and store.load(71) is not None


def test_purge_upto_beyond_last_is_full_purge(stores: Stores) -> None:
    fill(stores, batches=2)
    assert stores.store.purge(upto_seq=1_000) == 14
    assert stores.reopen().state().first_seq == 15


def test_expire_before(stores: Stores) -> None:
    written = fill(stores)
    store = stores.store
    cutoff = written[30].ts
    gone = store.expire_before(cutoff)
    assert gone == len([m for m in written if m.ts < cutoff])
    for store in stores.now_and_after_restart():
        assert store.state().first_seq == written[gone].seq
        assert store.load(written[gone].seq - 1) is None
        assert store.expire_before(cutoff) == 0


def test_remove_everything_one_by_one(stores: Stores) -> None:
    written = fill(stores, batches=3)
    for m in reversed(written):
        assert stores.store.remove(m.seq)
    for store in stores.now_and_after_restart():
        st = store.state()
        assert (st.msgs, st.first_seq, st.last_seq, st.num_deleted) == (0, 22, 21, 0)
        assert store.subjects() == {}


def test_many_subjects_wildcard_scan(stores: Stores) -> None:
    """Filters matching many subjects take the regex scan path; same answers."""
    subjects = [f"kv.b.{i}" for i in range(200)] + ["other.x"] * 50
    store = stores.store
    store.append(msgs(subjects))
    store.remove(3)
    for store in stores.now_and_after_restart():
        assert store.load_next(3, "kv.b.*").seq == 4
        assert store.load_next(201, "kv.*.*") is None
        assert store.load_last("kv.>").seq == 200
        assert store.load_next(150, ">").seq == 150
        assert len(list(store.seqs_for("kv.b.*", 0))) == 199


def test_empty_append_is_a_no_op(stores: Stores) -> None:
    assert stores.store.append([]) == 1
    assert stores.store.state().last_seq == 0


def test_header_scans_after_restart_skip_only_batches_without_headers(stores: Stores) -> None:
    """A restart notes which batches hold no headers; dedup and TTL recovery skip those."""

    def plain(ts: int) -> list[NewMsg]:
        return [NewMsg(subject="a", hdr=None, data=b"x", ts=ts + i) for i in range(5)]

    stores.store.append(plain(1_000))
    stores.store.append(msgs(["b", "b"], ts=2_000))  # the first carries `K: 0`
    stores.store.append(plain(3_000))
    for store in stores.now_and_after_restart():
        assert [m.seq for m in store.with_header("K")] == [6]
    tagged = NewMsg(subject="c", hdr=b"NATS/1.0\r\nK: 9\r\n\r\n", data=b"y", ts=4_000)
    stores.store.append([tagged])
    assert [m.seq for m in stores.store.with_header("K")] == [6, 13]
    assert [m.seq for m in stores.store.with_header("K", since_ts=2_001)] == [13]


def test_rows_laid_out_from_a_run_store_as_their_messages(stores: Stores) -> None:
    """`append_rows` (a replicated run's batch written from its log bytes) leaves what
    `append` of the same messages leaves, across a restart; rows that do not start at the
    next seq are refused and nothing is written."""
    written = fill(stores, batches=2)
    batch = msgs(SUBJECTS * 2, ts=9_000)
    first = len(written) + 1
    run = Run(tuple(Publish(m, first + i) for i, m in enumerate(batch)))
    rows = decode_deferring_runs(encode(run)).rows(stores.store.overhead)  # type: ignore[union-attr]
    assert rows is not None
    late = rows._replace(first=first + 1)
    with pytest.raises(StoreError, match=f"rows from seq {first + 1}, the store's next is {first}"):
        stores.store.append_rows(late)
    stores.store.append_rows(rows)
    written += [StoredMsg(first + i, m.ts, m.subject, m.hdr, m.data) for i, m in enumerate(batch)]
    for store in stores.now_and_after_restart():
        assert [store.load(m.seq) for m in written] == written
        st = store.state()
        assert st.bytes == sum(msg_size(m.subject, m.hdr, m.data, store.overhead) for m in written)
        assert (st.last_seq, st.last_ts, st.num_subjects) == (len(written), 9_007, len(SUBJECTS))
