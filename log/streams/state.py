"""The `state` block of stream info, as the reference reports it, read from a store."""

from __future__ import annotations

from typing import Any

from log.segments.api import MsgStore
from log.timefmt import rfc3339


def state_json(
    store: MsgStore, *, consumers: int = 0, deleted_details: bool = False, subjects_filter: str = ""
) -> dict[str, Any]:
    state = store.state()
    out: dict[str, Any] = {
        "messages": state.msgs,
        "bytes": state.bytes,
        "first_seq": state.first_seq if state.last_seq else 0,  # never written: 0
        "first_ts": rfc3339(state.first_ts if state.msgs else 0),
        "last_seq": state.last_seq,
        "last_ts": rfc3339(state.last_ts),
    }
    if state.num_subjects:
        out["num_subjects"] = state.num_subjects
    if subjects_filter:
        counts = store.subjects(subjects_filter)
        if counts:
            out["subjects"] = dict(sorted(counts.items()))
    if state.num_deleted:
        if deleted_details:
            out["deleted"] = list(state.deleted) or interior_gaps(store, state.first_seq)
        out["num_deleted"] = state.num_deleted
    out["consumer_count"] = consumers
    return out


def interior_gaps(store: MsgStore, first_seq: int) -> list[int]:
    """Deleted sequences between first and last, for stores that only count them."""
    gaps: list[int] = []
    expected = first_seq
    for seq in store.seqs_for(">", first_seq):
        gaps.extend(range(expected, seq))
        expected = seq + 1
    return gaps
