"""The cancels of SQL over NATS, without I/O: which query a cancel stops, and a cancel that
comes before its query."""

from __future__ import annotations

import pytest

from sql.nats_door.cancel import CANCEL_PREFIX, CallOffs, query_id


def test_a_cancel_stops_the_asking_accounts_query_only() -> None:
    stopped: list[str] = []
    offs = CallOffs()
    offs.add(("A", "q1"), lambda: stopped.append("A"))
    offs.add(("B", "q1"), lambda: stopped.append("B"))
    offs.call_off(("B", "q1"))
    assert stopped == ["B"]
    offs.call_off(("B", "q1"))  # stopped once
    assert stopped == ["B"]
    offs.discard(("A", "q1"))  # ended by itself: a late cancel stops nothing
    offs.call_off(("A", "q1"))
    assert stopped == ["B"]


def test_a_cancel_before_its_query_keeps_it_from_running() -> None:
    stopped: list[str] = []
    offs = CallOffs()
    offs.call_off((None, "early"))
    offs.add((None, "early"), lambda: stopped.append("early"))
    assert stopped == ["early"]
    offs.add((None, "early"), lambda: stopped.append("again"))  # remembered once
    assert stopped == ["early"]


def test_ids_are_subject_tokens() -> None:
    assert query_id({}) is None
    assert query_id({"Jl-Sql-Id": "3f2a-b_9"}) == "3f2a-b_9"
    for bad in ("", "a.b", "*", ">", "x" * 65, "a b"):
        with pytest.raises(ValueError, match="Jl-Sql-Id"):
            query_id({"Jl-Sql-Id": bad})
    assert CallOffs.key_of(f"{CANCEL_PREFIX}.abc", "A") == ("A", "abc")
    assert CallOffs.key_of(f"{CANCEL_PREFIX}.a.b", "A") is None
