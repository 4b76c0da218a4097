"""Which account may read which files: the walls between accounts' views.

The server keeps each account's streams under `<store>/jetstream/<account>/streams/`
and the lake each account's tables apart (`log.compactor.layout`); `sql.views`
names a named account's views `<account>.<name>` (`StreamViews.qualified` on the
JVM side), so two accounts' streams of the same name are two views, and a session
bound to the account reads its own by their bare names.

The wall itself is in the JVM (`sql/views_ext/AccountWalls.java`): a bound session may
read only the files its account's views read, and `allow` hands it those views.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def allow(spark: SparkSession, views: Mapping[str, list[DataFrame]]) -> None:
    """Tell the JVM's wall which files each account's views read."""
    jvm = spark._jvm
    assert jvm is not None
    plans = jvm.java.util.HashMap()
    for account, frames in views.items():
        found = jvm.java.util.ArrayList()
        for frame in frames:
            found.add(frame._jdf.queryExecution().analyzed())
        plans.put(account, found)
    jvm.io.jetlake.sql.AccountWalls.allow(plans)


def bind(session: SparkSession, account: str | None) -> None:
    """Bind a session of the service to an account: its streams, by their bare names, only;
    None binds it to every account (the system account's, or the service's own session)."""
    jvm = session._jvm
    assert jvm is not None
    walls = jvm.io.jetlake.sql.AccountWalls
    if account is None:
        walls.bindAll(session._jsparkSession)
    else:
        walls.bind(session._jsparkSession, account)


def told(session: SparkSession, error: Exception) -> str:
    """The first line of a failed query's error as the session may be told it: an error whose
    plan reaches another account's view becomes the wall's own (`WalledErrors` in the JVM)."""
    from sql.service_info import first_line

    origin = getattr(error, "_origin", None)
    jvm = session._jvm
    if origin is None or jvm is None:
        return first_line(error)
    return str(jvm.io.jetlake.sql.WalledErrors.firstLine(session._jsparkSession, origin))
