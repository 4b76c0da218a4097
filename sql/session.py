"""The Python API: a SparkSession with Delta and every stream's view, for notebooks and jobs.

    from sql.session import session
    spark = session(store_dir="./data")
    spark.sql("SELECT subject, count(*) FROM ORDERS GROUP BY 1").show()
    refresh(spark, store_dir="./data")   # see messages published since

`lake_dir` defaults to `<store_dir>/lake`, where the server's compactor puts
tables; the master follows `build_session` (argument, JETLAKE_SPARK_MASTER,
`local[*]`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from log.compactor.layout import default_lake_dir
from log.compactor.spark import build_session
from sql.views import DEFAULT_BUILDERS, ViewBuilder, register_views

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def refresh(
    spark: SparkSession,
    *,
    store_dir: str | Path,
    lake_dir: str | Path | None = None,
    builders: Iterable[ViewBuilder] = DEFAULT_BUILDERS,
) -> list[str]:
    """Re-register the views so they include the newest acknowledged messages."""
    lake = Path(lake_dir) if lake_dir is not None else default_lake_dir(store_dir)
    return register_views(spark, store_dir, lake, builders)


def session(
    *,
    store_dir: str | Path,
    lake_dir: str | Path | None = None,
    master: str | None = None,
    builders: Iterable[ViewBuilder] = DEFAULT_BUILDERS,
) -> SparkSession:
    spark = build_session("jetlake-sql", master=master)
    refresh(spark, store_dir=store_dir, lake_dir=lake_dir, builders=builders)
    return spark
