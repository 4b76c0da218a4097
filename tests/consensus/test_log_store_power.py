"""A power loss under an open log, told from a kill -9 by the boot id; and the test stand-in
for one (consensus.power_loss) that the process-level crash tests use."""

from __future__ import annotations

from pathlib import Path

import pytest

from consensus.log_store import HOLD, RUNNING, LogStore
from consensus.power_loss import BOOT_ID_ENV, SYNC_RECORD_ENV, boot_id, lose_unsynced, power_cut
from consensus.types import HardState
from tests.consensus.log_store_writer import entries


@pytest.fixture
def boot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "boot_id"
    path.write_text("first-boot\n")
    monkeypatch.setenv(BOOT_ID_ENV, str(path))
    return path


def written(path: Path, term: int = 3, acks_unsynced: bool = True) -> LogStore:
    """A log with entries 1..10 of `term`, a vote in it, all synced; left open."""
    store, _ = LogStore.open(path, name="g", acks_unsynced=acks_unsynced)
    store.set_hard_state(HardState(term, "a", 0))
    store.append(entries(term, 1, 10))
    store.sync()
    return store


def test_the_boot_id_comes_from_the_kernel_unless_a_test_names_a_file(
    tmp_path: Path, boot: Path
) -> None:
    assert boot_id() == "first-boot"
    boot.unlink()
    assert boot_id() == ""
    written(tmp_path / "log")  # unreadable: every unclean stop counts as a power loss
    store, restored = LogStore.open(tmp_path / "log", name="g")
    assert (restored.reboot_term, store.held) == (3, True)
    store.close()


def test_a_clean_close_leaves_no_record_and_holds_nothing(tmp_path: Path, boot: Path) -> None:
    written(tmp_path / "log").close()
    assert not (tmp_path / "log" / RUNNING).exists()
    boot.write_text("second-boot\n")
    store, restored = LogStore.open(tmp_path / "log", name="g")
    assert (restored.reboot_term, store.held) == (0, False)
    store.close()


def test_a_kill_without_power_loss_holds_nothing(tmp_path: Path, boot: Path) -> None:
    written(tmp_path / "log")  # never closed: the process died, the page cache stayed
    assert (tmp_path / "log" / RUNNING).read_text() == "first-boot 1\n"
    store, restored = LogStore.open(tmp_path / "log", name="g")
    assert (restored.reboot_term, store.held, len(restored.entries)) == (0, False, 10)
    store.close()


def test_a_reboot_under_an_open_log_holds_until_released(tmp_path: Path, boot: Path) -> None:
    written(tmp_path / "log", term=3)
    boot.write_text("second-boot\n")
    store, restored = LogStore.open(tmp_path / "log", name="g")
    assert (restored.reboot_term, store.held) == (3, True)
    assert (tmp_path / "log" / HOLD).read_text() == "0 3\n"
    # a second restart (a kill -9 this time) must not forget the hold: nothing shows it
    store, restored = LogStore.open(tmp_path / "log", name="g")
    assert (restored.reboot_term, store.held) == (3, True)
    store.release_hold()
    store.close()
    store, restored = LogStore.open(tmp_path / "log", name="g")
    assert (restored.reboot_term, store.held) == (0, False)
    store.close()


def test_a_reboot_under_a_run_that_synced_before_acknowledging_holds_nothing(
    tmp_path: Path, boot: Path
) -> None:
    written(tmp_path / "log", acks_unsynced=False)
    boot.write_text("second-boot\n")
    store, restored = LogStore.open(tmp_path / "log", name="g")
    assert (restored.reboot_term, store.held) == (0, False)
    store.close()


def test_a_hold_file_flipped_beyond_reading_still_holds(tmp_path: Path, boot: Path) -> None:
    written(tmp_path / "log", term=3)
    boot.write_text("second-boot\n")
    LogStore.open(tmp_path / "log", name="g")
    (tmp_path / "log" / HOLD).write_text("0 x\n")
    store, restored = LogStore.open(tmp_path / "log", name="g")
    assert store.held and restored.reboot_term == 3 and restored.vote_floor == 11
    store.close()


def test_the_sync_record_makes_a_power_cut_lose_exactly_the_unsynced(
    tmp_path: Path, boot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "synced"
    monkeypatch.setenv(SYNC_RECORD_ENV, str(record))
    log = tmp_path / "log"
    store, _ = LogStore.open(log, name="g", max_file_bytes=512)
    store.set_hard_state(HardState(2, "b", 0))  # a vote: fsynced at once
    store.append(entries(2, 1, 12))
    store.set_hard_state(HardState(2, "b", 12))
    store.sync()
    store.append(entries(2, 13, 40))  # rolls into new files, none of it synced
    store.set_hard_state(HardState(2, "b", 40))
    assert len(list(log.glob("*.wal"))) > 1
    # the process is SIGKILLed here (the store is simply abandoned), then the power goes
    assert power_cut(record, boot) == [log]
    assert boot.read_text() != "first-boot\n"
    store, restored = LogStore.open(log, name="g", max_file_bytes=512)
    assert [e.index for e in restored.entries] == list(range(1, 13))
    assert restored.hard_state == HardState(2, "b", 12)
    assert (restored.reboot_term, restored.vote_floor, store.held) == (2, 0, True)
    store.close()
    # after a clean close the record says all is synced: cutting again loses nothing
    lose_unsynced(record)
    store, restored = LogStore.open(log, name="g", max_file_bytes=512)
    assert len(restored.entries) == 12
    store.close()
