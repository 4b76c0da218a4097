"""The stream features of JetStream API levels 2 and up in a config, the level a config
needs, and how far jetlake is through each level.

A stream's `_nats.req.level` metadata tells a server loading it (after a
downgrade, say) which level it must implement to run the stream as asked, so
it is computed from the features used, as the reference's
`setStaticStreamMetadata` does: 1 for per-message TTLs, 2 for counters,
atomic batches, schedules and asynchronous persistence, 4 for fast batch
publish. The refusals and the settings one feature forces on another are the
reference's, in its order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from log import errors
from log.request_fields import Fields

if TYPE_CHECKING:
    from log.config import StreamConfig

PERSIST_MODES = ("default", "async")
ASYNC_SYNC_INTERVAL_NS = 120_000_000_000  # the reference's default sync interval
_FIELDS = Fields("StreamConfigRequest")


def persist_mode(raw: Mapping[str, Any]) -> str:
    """`persist_mode`: "default", "async", or absent/empty for the default."""
    if raw.get("persist_mode") == "":
        return "default"
    return _FIELDS.enum(raw, "persist_mode", PERSIST_MODES)


def required_level(cfg: StreamConfig) -> int:
    """The lowest API level whose servers can run a stream with this config."""
    if cfg.allow_batched:
        return 4
    if (
        cfg.allow_msg_counter
        or cfg.allow_atomic
        or cfg.allow_msg_schedules
        or cfg.persist_mode == "async"
    ):
        return 2
    return 1 if cfg.allow_msg_ttl or cfg.subject_delete_marker_ttl > 0 else 0


def check_counter(cfg: StreamConfig) -> None:
    """A counter's value is its subject's last message: anything that could drop or
    expire the newest one, or retire it on acknowledgement, would lose the count."""
    if not cfg.allow_msg_counter:
        return
    if cfg.discard == "new":
        raise errors.invalid_config("counter stream cannot use discard new")
    if cfg.allow_msg_ttl:
        raise errors.invalid_config("counter stream cannot use message TTLs")
    if cfg.allow_msg_schedules:
        raise errors.invalid_config("counter stream cannot use message schedules")
    if cfg.retention != "limits":
        raise errors.invalid_config("counter stream can only use limits retention")


def with_schedules(cfg: StreamConfig, replicas: int) -> StreamConfig:
    """Schedules are rollups of their subject, so they turn rollups (and purge) on; async
    persistence is refused where it would weaken a promise the stream makes elsewhere."""
    if cfg.allow_msg_schedules:
        if cfg.discard == "new":
            raise errors.invalid_config("message scheduling cannot use discard new")
        if not cfg.allow_rollup_hdrs:
            cfg = dataclasses.replace(cfg, allow_rollup_hdrs=True, deny_purge=False)
    if cfg.persist_mode == "async":
        if cfg.storage != "file":
            raise errors.invalid_config("async persist mode is only supported on file storage")
        if replicas > 1:
            raise errors.invalid_config("async persist mode is not supported on replicated streams")
        if cfg.allow_atomic:
            raise errors.invalid_config(
                "async persist mode is not supported with atomic batch publish"
            )
    if cfg.mirror is not None:  # a mirror stores its origin's messages verbatim
        if cfg.allow_msg_counter:
            raise errors.mirror_with_counters()
        if cfg.allow_atomic:
            raise errors.mirror_with_atomic()
        if cfg.allow_batched:
            raise errors.mirror_with_batched()
        if cfg.allow_msg_schedules:
            raise errors.mirror_with_schedules()
    if cfg.sources and cfg.allow_msg_schedules:
        raise errors.schedules_source_with()
    return cfg


def check_update(old: StreamConfig, new: StreamConfig) -> None:
    if new.allow_msg_counter != old.allow_msg_counter:
        raise errors.invalid_config(
            "stream configuration update can not change message counter setting"
        )
    if old.allow_msg_schedules and not new.allow_msg_schedules:
        raise errors.invalid_config("message schedules can not be disabled")
    if old.persist_mode != new.persist_mode:
        raise errors.invalid_config("stream configuration update can not change persist mode")


def sync_interval_ns(cfg: StreamConfig, server_ns: int | None) -> int | None:
    """`persist_mode: async` opts a stream out of `sync_interval: always` (None): its
    batches are acknowledged once written and fsynced within the default interval,
    as the reference's asynchronous flush does."""
    if server_ns is None and cfg.persist_mode == "async":
        return ASYNC_SYNC_INTERVAL_NS
    return server_ns


# The levels above 2 whose features are all here. The reference's levels are cumulative,
# so the level reported (`log.config.API_LEVEL`) is raised only once every level up to the
# new one is listed (tests/log/test_api_levels_record.py holds it to that).
COMPLETE_ABOVE_LEVEL_2: dict[int, str] = {
    3: "STREAM.SNAPSHOT window_size (ingest/server/jetstream/backup.py)",
    4: "fast batches (log/batches/fast.py), ack_policy flow_control (log/consumers),"
    " CONSUMER.RESET, durable sourcing and a source's own consumer (log/sourcing.py)",
    5: "a recreated source copied anew, `seq` in source info, the consumer API's"
    " Nats-Stream-Identity and 10225 (ingest/server/jetstream/consumers.py)",
}
