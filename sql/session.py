"""The Python API: a SparkSession with Delta and every stream's view, for notebooks and jobs.

    from sql.session import session
    spark = session(store_dir="./data")
    spark.sql("SELECT subject, count(*) FROM ORDERS GROUP BY 1").show()
    refresh(spark, store_dir="./data")   # see messages published since

`lake_dir` defaults to `<store_dir>/lake`, where the server's compactor puts
tables (an `s3://bucket/prefix` URI names a lake in object storage, reached with
the standard AWS settings: `log.compactor.location`); the master follows
`build_session` (argument, JETLAKE_SPARK_MASTER, `local[*]`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from log.compactor.layout import lake_at
from log.compactor.location import LakeAt
from log.compactor.spark import build_session
from sql.views import DEFAULT_BUILDERS, ViewBuilder, register_views

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def refresh(
    spark: SparkSession,
    *,
    store_dir: str | Path,
    lake_dir: LakeAt | None = None,
    builders: Iterable[ViewBuilder] = DEFAULT_BUILDERS,
) -> dict[str, list[str]]:
    """Re-register the views so they include the newest acknowledged messages; returns the
    view names by account (a named account's as `A.ORDERS`: quote them in SQL)."""
    return register_views(spark, store_dir, lake_at(lake_dir, store_dir), builders)


def session(
    *,
    store_dir: str | Path,
    lake_dir: LakeAt | None = None,
    master: str | None = None,
    builders: Iterable[ViewBuilder] = DEFAULT_BUILDERS,
) -> SparkSession:
    spark = build_session("jetlake-sql", master=master, lake=lake_at(lake_dir, store_dir))
    refresh(spark, store_dir=store_dir, lake_dir=lake_dir, builders=builders)
    return spark
