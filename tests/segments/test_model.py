"""Random operations against a dict model, on both stores, with restarts in between."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ingest.parser.subjects import subject_matches
from log.segments import FileStore, MemoryStore, NewMsg, SegmentConfig, StoredMsg, msg_size
from log.segments.core import BatchStore

SUBJECTS = ["a.x", "a.y", "b.x", "b.y.z", "c"]
FILTERS = [">", "a.*", "*.x", "b.>", "c", "a.x", "nope"]
CONFIG = SegmentConfig(max_msgs=6, cache_batches=2)


class Model(RuleBasedStateMachine):
    kind = "file"

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.store = self.open()
        self.msgs: dict[int, StoredMsg] = {}
        self.last = 0
        self.ts = 0

    def open(self) -> BatchStore:
        if self.kind == "file":
            return FileStore(self.dir / "S", name="S", config=CONFIG)
        return MemoryStore(name="S")

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir)

    def live(self, subject_filter: str = ">") -> list[int]:
        return sorted(s for s, m in self.msgs.items() if subject_matches(subject_filter, m.subject))

    @rule(picks=st.lists(st.sampled_from(SUBJECTS), min_size=1, max_size=8), hdr=st.booleans())
    def append(self, picks: list[str], hdr: bool) -> None:
        batch = []
        for s in picks:
            self.ts += 10
            batch.append(NewMsg(s, b"NATS/1.0\r\n\r\n" if hdr else None, b"%d" % self.ts, self.ts))
        assert self.store.append(batch) == self.last + 1
        for m in batch:
            self.last += 1
            self.msgs[self.last] = StoredMsg(self.last, m.ts, m.subject, m.hdr, m.data)

    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        seq = data.draw(st.integers(0, self.last + 1))
        assert self.store.remove(seq) == (seq in self.msgs)
        self.msgs.pop(seq, None)

    @rule(f=st.sampled_from(FILTERS), upto=st.integers(0, 80), keep=st.integers(0, 5))
    def purge(self, f: str, upto: int, keep: int) -> None:
        matched = self.live(f)
        if keep:
            matched = matched[:-keep] if keep < len(matched) else []
        matched = [s for s in matched if s < (upto or self.last + 1)]
        assert self.store.purge(f, upto_seq=upto, keep=keep) == len(matched)
        for s in matched:
            del self.msgs[s]

    @rule(picks=st.sets(st.sampled_from(SUBJECTS), min_size=1), keep=st.integers(1, 3))
    def trim(self, picks: set[str], keep: int) -> None:
        """Per-subject limits: each picked subject keeps its newest `keep` (bytes too)."""
        gone = [s for subject in picks for s in self.live(subject)[:-keep]]
        assert self.store.trim_subjects(picks, keep) == len(gone)
        for s in gone:
            del self.msgs[s]

    @rule(back=st.integers(0, 100))
    def expire(self, back: int) -> None:
        cutoff = self.ts - back
        gone = [s for s in self.live() if self.msgs[s].ts < cutoff]
        assert self.store.expire_before(cutoff) == len(gone)
        for s in gone:
            del self.msgs[s]

    @precondition(lambda self: self.kind == "file")
    @rule(sync=st.booleans())
    def reopen(self, sync: bool) -> None:
        if sync:
            self.store.sync()
        self.store.close()
        self.store = self.open()

    @invariant()
    def agrees(self) -> None:
        store, live = self.store, self.live()
        state = store.state(with_deleted=True)
        first = live[0] if live else self.last + 1
        assert (state.msgs, state.first_seq, state.last_seq) == (len(live), first, self.last)
        gaps = [s for s in range(first, self.last + 1) if s not in self.msgs]
        assert (state.deleted, state.num_deleted) == (gaps, len(gaps))
        assert state.bytes == sum(
            msg_size(m.subject, m.hdr, m.data, store.overhead) for m in self.msgs.values()
        )
        assert state.num_subjects == len({m.subject for m in self.msgs.values()})
        assert store.totals() == (state.msgs, state.bytes)
        for seq in range(0, self.last + 2):
            assert store.load(seq) == self.msgs.get(seq)
        for f in FILTERS:
            seqs = self.live(f)
            assert list(store.seqs_for(f, 0)) == seqs
            assert store.load_last(f) == (self.msgs[seqs[-1]] if seqs else None)
            for start in (0, self.last // 2, self.last):
                nxt = [s for s in seqs if s >= start]
                assert store.load_next(start, f) == (self.msgs[nxt[0]] if nxt else None)
            want = {}
            for s in seqs:
                want[self.msgs[s].subject] = want.get(self.msgs[s].subject, 0) + 1
            assert store.subjects(f) == want
        for subject in SUBJECTS:
            ss = store.subject_state(subject)
            seqs = self.live(subject)
            assert (
                (ss.msgs, ss.first_seq, ss.last_seq) == (len(seqs), seqs[0], seqs[-1])
                if (ss)
                else not seqs
            )


class MemoryModel(Model):
    kind = "memory"


TestFileStoreModel = Model.TestCase
TestMemoryStoreModel = MemoryModel.TestCase
TestFileStoreModel.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
TestMemoryStoreModel.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
