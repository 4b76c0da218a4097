"""How a view reads a lake version beside the base cached in memory (`sql.lake_cache`):
the pure choice, no Spark."""

from __future__ import annotations

from pathlib import Path

from log.compactor.layout import lake_at
from sql.lake_cache import MIN_ADDED, Plan, plan, wanted

BASE = frozenset(f"date=2026-11-28/part-{i}.parquet" for i in range(40))


def test_no_base_reads_all_into_a_new_base() -> None:
    assert plan(None, sorted(BASE)) == (Plan.REBASE, [])


def test_the_same_files_come_from_memory() -> None:
    assert plan(BASE, sorted(BASE, reverse=True)) == (Plan.REUSE, [])


def test_appended_files_are_read_from_disk_beside_the_base() -> None:
    added = ["date=2026-11-29/part-0.parquet", "date=2026-11-29/part-1.parquet"]
    assert plan(BASE, [*sorted(BASE), *added]) == (Plan.EXTEND, added)


def test_a_removed_file_means_a_new_base() -> None:
    """A DELETE or OPTIMIZE rewrote files: the base holds rows the version no longer has."""
    assert plan(BASE, sorted(BASE)[1:]) == (Plan.REBASE, [])
    assert plan(BASE, [*sorted(BASE)[1:], "date=2026-11-28/rewritten.parquet"])[0] is Plan.REBASE


def test_many_added_files_mean_a_new_base() -> None:
    quarter = [f"new-{i}.parquet" for i in range(len(BASE) // 4)]
    assert plan(BASE, [*BASE, *quarter])[0] is Plan.EXTEND
    assert plan(BASE, [*BASE, *quarter, "one-more.parquet"])[0] is Plan.REBASE
    small = frozenset(["a.parquet"])
    few = [f"new-{i}.parquet" for i in range(MIN_ADDED)]
    assert plan(small, ["a.parquet", *few])[0] is Plan.EXTEND
    assert plan(small, ["a.parquet", *few, "more.parquet"])[0] is Plan.REBASE


def test_the_service_caches_a_bucket_lake_by_default_and_reads_a_local_one_from_its_files(
    tmp_path: Path,
) -> None:
    local, bucket = lake_at(str(tmp_path / "lake"), tmp_path), lake_at("s3://b/lake", tmp_path)
    assert [wanted("auto", local), wanted("auto", bucket)] == [False, True]
    assert [wanted("on", local), wanted("off", bucket)] == [True, False]
