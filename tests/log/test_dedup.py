"""The duplicate window on its own: what an id answers inside and past the window."""

from __future__ import annotations

from log.dedup import DedupWindow

WINDOW = 100


def test_an_id_answers_its_seq_until_the_window_passes() -> None:
    window = DedupWindow(WINDOW)
    window.add("a", 1, 1_000)
    window.add("b", 2, 1_050)
    assert window.lookup("a", 1_100) == 1
    assert window.lookup("a", 1_101) is None
    assert window.lookup("b", 1_101) == 2
    assert len(window) == 1


def test_an_id_added_again_ages_from_its_newest_add() -> None:
    window = DedupWindow(WINDOW)
    window.add("a", 1, 1_000)
    window.add("a", 5, 1_080)
    assert window.lookup("a", 1_150) == 5
    assert window.lookup("a", 1_181) is None


def test_expiry_keeps_the_newest_across_compactions() -> None:
    window = DedupWindow(WINDOW)
    for ts in range(5_000):
        window.add(f"id{ts}", ts + 1, ts)
        window.expire(ts)
        assert len(window) == min(ts + 1, WINDOW + 1)
    assert window.lookup("id4899", 4_999) == 4_900
    assert window.lookup("id4898", 4_999) is None


def test_clear_forgets_everything() -> None:
    window = DedupWindow(WINDOW)
    window.add("a", 1, 1_000)
    window.clear()
    assert window.lookup("a", 1_000) is None and len(window) == 0
    window.add("a", 2, 2_000)
    assert window.lookup("a", 2_000) == 2
