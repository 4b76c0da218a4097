"""The `lake { … }` section of a config file: jetlake's own, since the reference has no lake.

Its `s3` block takes the names Spark's S3A, delta-rs and the AWS CLI share, and its `sql`
block the SQL service's doors and login.
"""

from __future__ import annotations

from typing import Any

from ingest.server.config_reader import Section, read_size
from ingest.server.settings import SqlConfig
from log.compactor.location import S3Options

_LAKE_INTERVALS = ("seal_interval", "compact_interval", "optimize_interval")
_S3_STRINGS = ("endpoint", "region", "access_key", "secret_key")
_S3_FLAGS = ("path_style", "allow_http")


def read_lake(top: Section, key: str, out: dict[str, Any]) -> None:
    """jetlake's own section (the reference has no lake): `lake: true` or a map of its keys."""
    if isinstance(top.table[key], bool):
        out["lake"] = {**out["lake"], "enabled": top.boolean(key)}
        return
    section = top.section(key)
    lake = {**out["lake"], "enabled": True}
    for name in section.table:
        lowered = name.lower()
        if lowered in ("enable", "enabled"):
            lake["enabled"] = section.boolean(name)
        elif lowered in ("dir", "spark_master"):
            lake[lowered] = section.string(name)
        elif lowered in _LAKE_INTERVALS:
            seconds = section.timeout(name, f"lake {lowered}")
            if seconds < 0:
                raise section.error(name, f"lake {lowered} cannot be negative")
            lake[lowered] = seconds
        elif lowered == "s3":
            lake["s3"] = _lake_s3(section.section(name))
        elif lowered == "sql":
            lake["sql"] = _lake_sql(section, name)
        else:
            section.unknown(name)
    out["lake"] = lake


_SQL_LOGIN = ("user", "password", "token", "creds")


def _lake_sql(lake: Section, key: str) -> SqlConfig | None:
    """`sql: off` or `sql { listen, jdbc, nats, max_rows, max_result_size, catalog, user,
    password, token, creds }`: Connect's address, each other door's address, `true` (its default) or
    `false`/`off`, and the service's own NATS login."""
    if isinstance(lake.table[key], bool):
        return SqlConfig() if lake.boolean(key) else None
    section = lake.section(key)
    doors: dict[str, str | None] = {}
    limits: dict[str, int] = {}
    for name in section.table:
        lowered = name.lower()
        if lowered in ("max_rows", "max_result_size"):
            label = f"lake sql {lowered}"
            limit = (
                section.integer(name) if lowered == "max_rows" else read_size(section, name, label)
            )
            if limit < 1:
                raise section.error(name, f"{label} {limit} is not positive")
            limits[lowered] = limit
        elif lowered == "catalog":
            doors[lowered] = value = section.string(name)
            if not value.startswith("thrift://"):
                raise section.error(name, f"lake sql catalog {value!r} is not thrift://host:port")
        elif lowered in _SQL_LOGIN:
            doors[lowered] = section.string(name)
        elif lowered not in ("listen", "jdbc", "nats"):
            section.unknown(name)
        elif lowered != "listen" and isinstance(section.table[name], bool):
            doors[lowered] = getattr(SqlConfig(), lowered) if section.boolean(name) else None
        else:
            doors[lowered] = value = section.string(name)
            host, _, port = value.rpartition(":")
            if lowered != "nats" and (not host or not port.isdigit() or int(port) > 65535):
                raise section.error(name, f"lake sql {lowered} {value!r} is not host:port")
    return SqlConfig(**doors, **limits)


def _lake_s3(section: Section) -> S3Options:
    """`lake { s3 { … } }`: the names Spark's S3A, delta-rs and the AWS CLI share."""
    given: dict[str, Any] = {}
    for name in section.table:
        lowered = name.lower()
        if lowered in _S3_STRINGS:
            given[lowered] = section.string(name)
        elif lowered in _S3_FLAGS:
            given[lowered] = section.boolean(name)
        else:
            section.unknown(name)
    return S3Options(**given)
