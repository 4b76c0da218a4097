"""Property: any sequence of log operations reads back as a simple model says, across restarts;
and one flipped bit anywhere in the log files yields a prefix of it, never a damaged entry."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from consensus.log_store import LogStore
from consensus.types import Entry, HardState, Restored
from tests.consensus.log_store_writer import entries, no_fsync, snapshot  # noqa: F401 (fixture)

SMALL = 700


@dataclass
class Model:
    term: int = 1
    snap: int = 0  # snapshot index (0: none)
    snap_term: int = 0
    log: list[Entry] = field(default_factory=list)  # the entries after the snapshot
    hs: HardState = field(default_factory=HardState)

    @property
    def last(self) -> int:
        return self.log[-1].index if self.log else self.snap

    def term_at(self, index: int) -> int:
        return self.log[index - self.snap - 1].term if index > self.snap else self.snap_term


append_op = st.tuples(st.just("append"), st.integers(0, 8), st.integers(1, 12), st.booleans())
ops = st.lists(
    st.one_of(
        append_op,
        append_op,
        append_op,
        st.tuples(st.just("hard_state"), st.integers(0, 5), st.booleans()),
        st.tuples(st.just("snapshot"), st.integers(0, 10)),
        st.tuples(st.just("install"), st.integers(0, 5)),
        st.tuples(
            st.just("reopen"),
        ),
    ),
    max_size=40,
)


def check(restored: Restored, model: Model) -> None:
    assert restored.entries == tuple(model.log)
    assert restored.hard_state == model.hs
    assert (restored.snapshot.index if restored.snapshot else 0) == model.snap
    assert restored.vote_floor == 0


def run(path: Path, script: list[tuple], model: Model) -> LogStore:
    store, restored = LogStore.open(path, name="m", max_file_bytes=SMALL)
    check(restored, model)
    for op in script:
        if op[0] == "append":
            _, back, count, new_term = op
            # Never below the commit index: Raft never replaces a committed entry.
            start = max(model.snap + 1, model.hs.commit + 1, model.last + 1 - back)
            if new_term and start <= model.last:
                model.term += 1  # only a newer leader rewrites entries
            written = entries(model.term, start, start + count - 1)
            store.append(written)
            model.log = model.log[: start - model.snap - 1] + written
        elif op[0] == "hard_state":
            _, commit_back, vote = op
            model.hs = HardState(
                model.term, "n1" if vote else None, max(0, model.last - commit_back)
            )
            store.set_hard_state(model.hs)
        elif op[0] == "snapshot":
            index = model.last - op[1]
            if index > model.snap:
                term = model.term_at(index)
                store.save_snapshot(snapshot(term, index))
                model.log = model.log[index - model.snap :]
                model.snap, model.snap_term = index, term
        elif op[0] == "install":  # a leader's snapshot at or past the end of this log
            model.term += 1
            index = model.last + op[1]
            store.save_snapshot(snapshot(model.term, index))
            model.log, model.snap, model.snap_term = [], index, model.term
            model.hs = HardState(model.term, model.hs.vote, min(model.hs.commit, index))
            store.set_hard_state(model.hs)
        else:
            store.close()
            store, restored = LogStore.open(path, name="m", max_file_bytes=SMALL)
            check(restored, model)
        assert store.last_index == model.last
    return store


@settings(
    max_examples=60,
    deadline=None,
    # The fixture only turns fsync off: every example may share it.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(script=ops, flip=st.integers(0, 2**32))
@pytest.mark.usefixtures("no_fsync")
def test_operations_read_back_and_a_flip_yields_a_prefix(script: list[tuple], flip: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        model = Model()
        store = run(path, script, model)
        store.close()
        store, restored = LogStore.open(path, name="m", max_file_bytes=SMALL)
        store.close()
        check(restored, model)
        wals = sorted(p for p in path.glob("*.wal") if p.stat().st_size)
        if not wals:
            return
        target = wals[flip % len(wals)]
        data = bytearray(target.read_bytes())
        data[(flip >> 3) % len(data)] ^= 1 << (flip % 8)
        target.write_bytes(bytes(data))
        store, restored = LogStore.open(path, name="m", max_file_bytes=SMALL)
        store.close()
        got = restored.entries
        assert got == tuple(model.log[: len(got)])
        event("cut" if len(got) < len(model.log) else "nothing after the snapshot lost")
        if len(got) < len(model.log):  # cut: the floor covers what it had reached
            assert restored.vote_floor >= model.last - 1
