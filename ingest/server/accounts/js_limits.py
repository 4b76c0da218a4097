"""An account's JetStream limits (the map form of its `jetstream`), checked as the
reference checks them when streams and consumers are created or updated, and the
figures `$JS.API.INFO` reports.

Storage is reserved by a stream's `max_bytes`: a stream whose reservation would take
its account past `max_memory`/`max_file` is refused, as is one past the per-stream
caps, or one without `max_bytes` where the account requires it.

An account JWT's tiered limits bound the streams of each replica count apart: a
stream, its consumers and its stored bytes count against its tier (`R<replicas>`)
only, and `$JS.API.INFO` reports each tier's figures.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypedDict

from ingest.server.accounts.settings import JetStreamLimits
from ingest.server.settings import JetStreamConfig
from log.config import StreamConfig
from log.consumers.config import ConsumerConfig
from log.errors import ApiError
from log.publish import error_ack
from log.segments.api import msg_size
from log.streams.stream import Stream

UNLIMITED = JetStreamLimits()
RESOURCES_EXCEEDED = "resource limits exceeded for account"


class Ceilings(TypedDict):
    """`ConsumerConfig.with_defaults`' keywords: see `ceilings`."""

    ack_ceiling: int
    batch: int


def limits_document(limits: JetStreamLimits | None) -> dict[str, Any]:
    """The `limits` of an account info response."""
    limits = limits or UNLIMITED
    return {
        "max_memory": limits.max_memory,
        "max_storage": limits.max_file,
        "max_streams": limits.max_streams,
        "max_consumers": limits.max_consumers,
        "max_ack_pending": limits.max_ack_pending,
        "memory_max_stream_bytes": limits.memory_max_stream_bytes,
        "storage_max_stream_bytes": limits.disk_max_stream_bytes,
        "max_bytes_required": limits.max_bytes_required,
    }


def tier(limits: JetStreamLimits, replicas: int) -> JetStreamLimits:
    """The limits that bound a stream of `replicas`: the account's, or its tier's."""
    if not limits.tiers:
        return limits
    for count, found in limits.tiers:
        if count == max(replicas, 1):
            return found
    raise ApiError(400, 10120, "no JetStream default or applicable tiered limit present")


def _in_tier(
    limits: JetStreamLimits, configs: Mapping[str, StreamConfig], replicas: int
) -> Mapping[str, StreamConfig]:
    if not limits.tiers:
        return configs
    return {n: c for n, c in configs.items() if max(c.num_replicas, 1) == max(replicas, 1)}


def tiers_document(
    engine: _Engine, configs: Mapping[str, StreamConfig], consumers: Mapping[str, int]
) -> dict[str, Any]:
    """The `tiers` of an account info response, when the account has tiers: of the
    account's streams (`configs`) and their consumer counts."""
    limits = engine.limits
    if limits is None or not limits.tiers:
        return {}
    tiers = {}
    for replicas, bounds in limits.tiers:
        mine = _in_tier(limits, configs, replicas)
        used = engine.usage(replicas)
        tiers[f"R{replicas}"] = {
            "memory": used["memory"],
            "storage": used["storage"],
            "reserved_memory": reserved(mine, memory=True, each=False),
            "reserved_storage": reserved(mine, memory=False, each=False),
            "streams": len(mine),
            "consumers": sum(consumers.get(name, 0) for name in mine),
            "limits": limits_document(bounds),
        }
    return {"tiers": tiers}


def reserved(
    configs: Mapping[str, StreamConfig], *, memory: bool, but: str = "", each: bool = True
) -> int:
    """Bytes the streams' `max_bytes` hold back in one kind of storage (`but` left out):
    on every replica (`each`, what a limit is checked against), or once per stream (what
    the reference's account info reports)."""
    return sum(
        cfg.max_bytes * (max(cfg.num_replicas, 1) if each else 1)
        for name, cfg in configs.items()
        if name != but and cfg.max_bytes > 0 and (cfg.storage == "memory") == memory
    )


def check_stream(
    limits: JetStreamLimits, configs: Mapping[str, StreamConfig], cfg: StreamConfig
) -> None:
    """Refuse a stream created or updated past the account's limits; `configs` are the
    account's streams as they are now."""
    configs = _in_tier(limits, configs, cfg.num_replicas)
    limits = tier(limits, cfg.num_replicas)
    if cfg.name not in configs and 0 <= limits.max_streams <= len(configs):
        raise ApiError(400, 10027, "maximum number of streams reached")
    if limits.max_bytes_required and cfg.max_bytes <= 0:
        raise ApiError(400, 10113, "account requires a stream config to have max bytes set")
    memory = cfg.storage == "memory"
    cap = limits.memory_max_stream_bytes if memory else limits.disk_max_stream_bytes
    if cap > 0 and cfg.max_bytes > cap:
        raise ApiError(400, 10122, "stream max bytes exceeds account limit max stream bytes")
    total = limits.max_memory if memory else limits.max_file
    if total >= 0 and cfg.max_bytes > 0:
        wanted = cfg.max_bytes * max(cfg.num_replicas, 1)
        if reserved(configs, memory=memory, but=cfg.name) + wanted > total:
            if memory:
                raise ApiError(500, 10028, "insufficient memory resources available")
            raise ApiError(500, 10047, "insufficient storage resources available")


def ceilings(js: JetStreamConfig, limits: JetStreamLimits | None, replicas: int = 1) -> Ceilings:
    """What a new consumer's defaults come down to (`ConsumerConfig.with_defaults`): the
    lowest max_ack_pending limit of the server's and its account's (its stream's tier's),
    and the server's max_request_batch; 0 where none is set."""
    account = tier(limits, replicas).max_ack_pending if limits is not None else 0
    acks = [n for n in (js.max_ack_pending, account) if n > 0]
    return {"ack_ceiling": min(acks, default=0), "batch": max(js.max_request_batch, 0)}


def check_server_ceilings(js: JetStreamConfig, cfg: ConsumerConfig) -> None:
    """Refuse a consumer above the server's `jetstream { limits {} }` ceilings, with the
    reference's errors."""
    batch = js.max_request_batch
    if not cfg.is_push and 0 < batch < cfg.max_batch:
        raise ApiError(400, 10125, f"consumer max request batch exceeds server limit of {batch}")
    if 0 < js.max_ack_pending < cfg.max_ack_pending:
        raise ApiError(
            400, 10121, f"consumer max ack pending exceeds system limit of {js.max_ack_pending}"
        )


def bounds_consumers(limits: JetStreamLimits | None, replicas: int = 1) -> bool:
    """Whether the account limits each stream's consumers (its stream's tier does): the
    server's `default_max_consumers` applies only where it does not."""
    return limits is not None and tier(limits, replicas).max_consumers >= 0


def check_consumer(
    limits: JetStreamLimits, consumers: int, cfg: ConsumerConfig, replicas: int = 1
) -> None:
    """Refuse a new consumer past the account's ack-pending limit, or when its stream has
    `max_consumers` already: the reference bounds each stream's consumers by the account's
    limit (its stream's tier's), not the account's consumers in all."""
    limits = tier(limits, replicas)
    if 0 <= limits.max_consumers <= consumers:
        raise ApiError(400, 10026, "maximum consumers limit reached")
    if limits.max_ack_pending >= 0 and cfg.max_ack_pending > limits.max_ack_pending:
        raise ApiError(
            400,
            10121,
            f"consumer max ack pending exceeds system limit of {limits.max_ack_pending}",
        )


PublishHandler = Callable[[str, "str | None", "bytes | None", bytes], None]
RunHandler = Callable[[bytes, list[bytes], list[bytes]], None]


class _Engine(Protocol):
    limits: JetStreamLimits | None
    messaging: Any
    consumers: Any

    def usage(self, replicas: int = 0) -> dict[str, int]: ...

    def configs(self) -> dict[str, StreamConfig]: ...


def limited(
    engine: _Engine, stream: Stream, on_msg: PublishHandler
) -> tuple[PublishHandler, RunHandler]:
    """A stream's publish handlers in an account with a storage limit: a message that
    would take the account's stored bytes past it is refused (10002), one at a time.

    As on the reference, the bytes are the account's in the whole cluster, every replica
    counted, and the message counts once per replica; a tier's limit is per replica, so
    it is scaled by the replica count."""
    assert engine.limits is not None
    copies = max(stream.config.num_replicas, 1)
    replicas = copies if engine.limits.tiers else 0
    try:
        limits = tier(engine.limits, replicas)
    except ApiError:  # its tier gone since it was made: nothing bounds it
        limits = UNLIMITED
    memory = stream.config.storage == "memory"
    cap = limits.max_memory if memory else limits.max_file
    cap *= copies if replicas else 1
    kind = "memory" if memory else "storage"

    def checked(subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if cap >= 0:
            size = msg_size(subject, hdr, data, stream.store.overhead)
            if engine.usage(replicas)[kind] + size * copies > cap:
                if reply and not stream.config.no_ack:
                    body = error_ack(stream.name, ApiError(400, 10002, RESOURCES_EXCEEDED))
                    engine.messaging.publish(reply, None, None, body)
                return
        on_msg(subject, reply, hdr, data)

    def run(subject: bytes, replies: list[bytes], payloads: list[bytes]) -> None:
        text = subject.decode("utf-8", "surrogateescape")
        for reply, data in zip(replies, payloads, strict=True):
            checked(text, reply.decode("utf-8", "surrogateescape") or None, None, data)

    return checked, run
