"""Consumer configuration: the API's JSON in, the reference's defaults, checks and update rules.

Clients send a partial config and compare what the server echoes with what
they expect (nats.go on create-or-update, nats-py when it rebinds), so the
defaults must be filled exactly like nats-server's `setConsumerConfigDefaults`
and the refusals must carry its codes, words and order (`checkConsumerCfg`).
All durations are nanoseconds, as on the wire.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ingest.parser.subjects import is_literal, is_subset, is_valid_subject, subjects_overlap
from log import errors
from log.config import (
    MAX_DESCRIPTION_LEN,
    MAX_METADATA_LEN,
    MAX_NAME_LEN,
    REQUIRED_LEVEL_KEY,
    StreamConfig,
    is_valid_name,
)
from log.consumers import errors as cerr
from log.consumers import priority
from log.errors import ApiError
from log.request_fields import Fields, fields, refuse_unknown
from log.timefmt import ZERO_TIME, parse_rfc3339, rfc3339

DELIVER_POLICIES = (
    "all",
    "last",
    "new",
    "by_start_sequence",
    "by_start_time",
    "last_per_subject",
)

_FIELDS = Fields("ConsumerConfig.config")
_type_error = _FIELDS.type_error
_str = _FIELDS.str
_int = _FIELDS.int
_bool = _FIELDS.bool
_enum = _FIELDS.enum
_str_list = _FIELDS.str_list
ACK_POLICIES = ("none", "all", "explicit", "flow_control")
REPLAY_POLICIES = ("instant", "original")
DEFAULT_ACK_WAIT = 30_000_000_000
DEFAULT_MAX_ACK_PENDING = 1000
DEFAULT_MAX_WAITING = 512
DEFAULT_INACTIVE_THRESHOLD = 5_000_000_000
MIN_HEARTBEAT = 100_000_000
FLOW_CONTROL_ACK_HEARTBEAT = 1_000_000_000  # the only one `ack_policy: flow_control` allows
_MS = 1_000_000
_UNSUPPORTED = ("sample_freq",)
# Metadata a sourcing stream stamps on its consumer (who reads through it), kept as sent
_SOURCING_METADATA = ("_nats.mirror.", "_nats.src.")
# ConsumerConfig's fields: any other is refused
_SCHEMA = fields(
    "durable_name name description deliver_policy opt_start_seq opt_start_time ack_policy"
    " ack_wait max_deliver backoff filter_subject filter_subjects replay_policy rate_limit_bps"
    " sample_freq max_waiting max_ack_pending flow_control headers_only max_batch max_expires"
    " max_bytes deliver_subject deliver_group idle_heartbeat inactive_threshold num_replicas"
    " mem_storage direct sourcing metadata pause_until priority_groups priority_policy"
    " priority_timeout"
)


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    durable_name: str = ""
    name: str = ""
    description: str = ""
    deliver_policy: str = "all"
    opt_start_seq: int = 0
    opt_start_time: int | None = None  # ns since the epoch
    ack_policy: str = "none"
    ack_wait: int = 0
    max_deliver: int = 0
    backoff: tuple[int, ...] = ()
    filter_subject: str = ""
    filter_subjects: tuple[str, ...] = ()
    replay_policy: str = "instant"
    rate_limit_bps: int = 0
    max_waiting: int = 0
    max_ack_pending: int = 0
    flow_control: bool = False
    headers_only: bool = False
    max_batch: int = 0
    max_expires: int = 0
    max_bytes: int = 0
    deliver_subject: str = ""
    deliver_group: str = ""
    idle_heartbeat: int = 0
    inactive_threshold: int = 0
    num_replicas: int = 0
    mem_storage: bool = False
    direct: bool = False  # a sourcing stream's unlisted reader (`log.consumers.sourcing`)
    sourcing: bool = False  # reads for a mirror or source (API level 4)
    metadata: Mapping[str, str] = field(default_factory=dict)
    pause_until: int | None = None  # ns since the epoch
    priority_groups: tuple[str, ...] = ()
    priority_policy: str = "none"
    priority_timeout: int = 0  # ns a pinned client may stay silent before it loses its pin

    @property
    def is_push(self) -> bool:
        return bool(self.deliver_subject)

    @property
    def is_durable(self) -> bool:
        return bool(self.durable_name)

    @property
    def filters(self) -> tuple[str, ...]:
        """Every subject filter; empty means the whole stream."""
        return (self.filter_subject,) if self.filter_subject else self.filter_subjects

    def to_json(self, *, dynamic: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The config as the reference serialises it (Go field order, omitempty)."""
        out: dict[str, Any] = {}
        for key in ("durable_name", "name", "description"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        out["deliver_policy"] = self.deliver_policy
        if self.opt_start_seq:
            out["opt_start_seq"] = self.opt_start_seq
        if self.opt_start_time is not None:
            out["opt_start_time"] = rfc3339(self.opt_start_time)
        out["ack_policy"] = self.ack_policy
        for key in ("ack_wait", "max_deliver"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        if self.backoff:
            out["backoff"] = list(self.backoff)
        if self.filter_subject:
            out["filter_subject"] = self.filter_subject
        if self.filter_subjects:
            out["filter_subjects"] = list(self.filter_subjects)
        out["replay_policy"] = self.replay_policy
        for key in (
            "rate_limit_bps",
            "max_waiting",
            "max_ack_pending",
            "flow_control",
            "headers_only",
            "max_batch",
            "max_expires",
            "max_bytes",
            "deliver_subject",
            "deliver_group",
            "idle_heartbeat",
            "inactive_threshold",
        ):
            if getattr(self, key):
                out[key] = getattr(self, key)
        out["num_replicas"] = self.num_replicas
        for key in ("mem_storage", "direct", "sourcing"):
            if getattr(self, key):
                out[key] = True
        uses_priority = self.priority_policy != "none" or self.priority_groups
        level = "1" if self.pause_until is not None or uses_priority else "0"
        if self.ack_policy == "flow_control":
            level = "4"
        out["metadata"] = dict(
            sorted({**self.metadata, REQUIRED_LEVEL_KEY: level, **(dynamic or {})}.items())
        )
        if self.pause_until is not None:
            out["pause_until"] = rfc3339(self.pause_until)
        if self.priority_groups:
            out["priority_groups"] = list(self.priority_groups)
        if self.priority_policy != "none":
            out["priority_policy"] = self.priority_policy
        if self.priority_timeout:
            out["priority_timeout"] = self.priority_timeout
        return out


def from_request(raw: Any) -> ConsumerConfig:
    """Parse the `config` object of a create request (no defaults, no checks yet)."""
    if not isinstance(raw, Mapping):
        raise errors.invalid_json("json: cannot unmarshal into Go value of type ConsumerConfig")
    refuse_unknown(raw, _SCHEMA)
    for key in _UNSUPPORTED:
        if raw.get(key):
            raise cerr.create_failed(f"jetlake does not support {key} yet")
    start_time = raw.get("opt_start_time")
    pause = raw.get("pause_until")
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise errors.invalid_json("json: cannot unmarshal into metadata")
    return ConsumerConfig(
        durable_name=_str(raw, "durable_name"),
        name=_str(raw, "name"),
        description=_str(raw, "description"),
        deliver_policy=_enum(raw, "deliver_policy", DELIVER_POLICIES),
        opt_start_seq=_int(raw, "opt_start_seq"),
        opt_start_time=_time(start_time),
        ack_policy=_enum(raw, "ack_policy", ACK_POLICIES),
        ack_wait=_int(raw, "ack_wait"),
        max_deliver=_int(raw, "max_deliver"),
        backoff=tuple(_FIELDS.int_list(raw, "backoff", "[]time.Duration")),
        filter_subject=_str(raw, "filter_subject"),
        filter_subjects=tuple(_str_list(raw, "filter_subjects")),
        replay_policy=_enum(raw, "replay_policy", REPLAY_POLICIES),
        rate_limit_bps=_int(raw, "rate_limit_bps"),
        max_waiting=_int(raw, "max_waiting"),
        max_ack_pending=_int(raw, "max_ack_pending"),
        flow_control=_bool(raw, "flow_control"),
        headers_only=_bool(raw, "headers_only"),
        max_batch=_int(raw, "max_batch"),
        max_expires=_int(raw, "max_expires"),
        max_bytes=_int(raw, "max_bytes"),
        deliver_subject=_str(raw, "deliver_subject"),
        deliver_group=_str(raw, "deliver_group"),
        idle_heartbeat=_int(raw, "idle_heartbeat"),
        inactive_threshold=_int(raw, "inactive_threshold"),
        num_replicas=_int(raw, "num_replicas"),
        mem_storage=_bool(raw, "mem_storage"),
        direct=_bool(raw, "direct"),
        sourcing=_bool(raw, "sourcing"),
        metadata={
            str(k): str(v)
            for k, v in metadata.items()
            if not str(k).startswith("_nats.") or str(k).startswith(_SOURCING_METADATA)
        },
        pause_until=_time(pause),
        priority_groups=tuple(_str_list(raw, "priority_groups")),
        priority_policy=priority.parse_policy(raw.get("priority_policy")),
        priority_timeout=_int(raw, "priority_timeout"),
    )


def with_defaults(
    cfg: ConsumerConfig, stream: StreamConfig, *, ack_ceiling: int = 0, batch: int = 0
) -> ConsumerConfig:
    """Fill what the client left out, as `setConsumerConfigDefaults` does (non-pedantic).

    `ack_ceiling`: the lowest of the server's and the account's max_ack_pending limits (0:
    none), which a default below 1000 comes down to; `batch`: the server's
    max_request_batch, a pull consumer's default max_batch (0: none)."""
    limits = stream.consumer_limits
    max_deliver = -1 if cfg.max_deliver == 0 or cfg.max_deliver < -1 else cfg.max_deliver
    max_waiting = max(cfg.max_waiting, 0)
    if not cfg.is_push and max_waiting == 0:
        max_waiting = DEFAULT_MAX_WAITING
    ack_wait = cfg.ack_wait
    if ack_wait == 0 and cfg.ack_policy in ("explicit", "all"):
        ack_wait = DEFAULT_ACK_WAIT
    if cfg.backoff:
        ack_wait = cfg.backoff[0]
    max_ack_pending = -1 if cfg.max_ack_pending < -1 else cfg.max_ack_pending
    if max_ack_pending == 0:
        max_ack_pending = int(limits.get("max_ack_pending") or 0)
    inactive = max(cfg.inactive_threshold, 0) or int(limits.get("inactive_threshold") or 0)
    if not cfg.is_durable and inactive == 0:
        inactive = DEFAULT_INACTIVE_THRESHOLD
    if max_ack_pending == 0 and cfg.ack_policy != "none":
        max_ack_pending = min(DEFAULT_MAX_ACK_PENDING, ack_ceiling or DEFAULT_MAX_ACK_PENDING)
    if cfg.ack_policy == "flow_control":  # acks ride on flow control, which needs heartbeats
        cfg = dataclasses.replace(cfg, flow_control=True, idle_heartbeat=FLOW_CONTROL_ACK_HEARTBEAT)
    return dataclasses.replace(
        cfg,
        name=cfg.name or cfg.durable_name,
        max_deliver=max_deliver,
        max_waiting=max_waiting,
        ack_wait=ack_wait,
        max_ack_pending=max_ack_pending,
        max_batch=max(cfg.max_batch, 0) or (batch if not cfg.is_push else 0),
        max_expires=max(cfg.max_expires, 0),
        max_bytes=max(cfg.max_bytes, 0),
        idle_heartbeat=max(cfg.idle_heartbeat, 0),
        inactive_threshold=inactive,
        priority_timeout=priority.default_ttl(cfg.priority_policy, cfg.priority_timeout),
    )


def check(cfg: ConsumerConfig, stream: StreamConfig) -> None:
    """Refuse what `checkConsumerCfg` refuses, in its order (defaults already filled)."""
    if cfg.name and not is_valid_name(cfg.name):
        raise errors.invalid_config("consumer name can not contain '.', '*', '>', '\\', '/'")
    if cfg.durable_name and not is_valid_name(cfg.durable_name):
        raise errors.invalid_config(
            "consumer durable name can not contain '.', '*', '>', '\\', '/'"
        )
    if cfg.num_replicas > max(stream.num_replicas, 1):
        raise cerr.replicas_exceed_stream()
    if cfg.num_replicas < 0:
        raise errors.replicas_negative()
    if any(b < 0 for b in cfg.backoff):
        raise ApiError(400, 10184, "consumer backoff needs to be positive")
    if cfg.ack_wait < 0:
        raise ApiError(400, 10183, "consumer ack wait needs to be positive")
    if cfg.ack_policy == "flow_control":
        _check_ack_flow_control(cfg)
    if cfg.backoff and cfg.max_deliver != -1 and len(cfg.backoff) > cfg.max_deliver:
        raise cerr.max_deliver_backoff()
    if len(cfg.description) > MAX_DESCRIPTION_LEN:
        raise ApiError(
            400,
            10107,
            f"consumer description is too long, maximum allowed is {MAX_DESCRIPTION_LEN}",
        )
    if cfg.is_push:
        _check_push(cfg, stream)
    else:
        _check_pull(cfg, stream)
    _check_filters(cfg)
    _check_start(cfg)
    if cfg.flow_control and cfg.idle_heartbeat == 0:
        raise ApiError(400, 10108, "consumer with flow control also needs heartbeats")
    if cfg.durable_name and cfg.name and cfg.name != cfg.durable_name:
        raise ApiError(
            400, 10132, "Consumer Durable and Name have to be equal if both are provided"
        )
    if sum(len(k) + len(v) for k, v in cfg.metadata.items()) > MAX_METADATA_LEN:
        raise ApiError(400, 10135, "consumer metadata exceeds maximum size of 128KB")
    priority.check_config(
        cfg.priority_groups, cfg.priority_policy, cfg.priority_timeout, push=cfg.is_push
    )
    if len(cfg.name) > MAX_NAME_LEN:
        raise ApiError(400, 10102, f"consumer name is too long, maximum allowed is {MAX_NAME_LEN}")


def _check_ack_flow_control(cfg: ConsumerConfig) -> None:
    """`ack_policy: flow_control` (API level 4, how the reference sources durably): a push
    consumer acknowledged only by the replies to its flow control, so nothing may time
    out or be redelivered, and max_ack_pending is what makes it ask for a reply."""
    if not cfg.is_push:
        raise ApiError(400, 10218, "flow control ack policy requires a push based consumer")
    if not cfg.flow_control:
        raise ApiError(400, 10219, "flow control ack policy requires flow control")
    if cfg.idle_heartbeat != FLOW_CONTROL_ACK_HEARTBEAT:
        raise errors.invalid_config("flow control ack policy heartbeat needs to be 1s")
    if cfg.max_ack_pending <= 0:
        raise ApiError(400, 10220, "flow control ack policy requires max ack pending")
    if cfg.ack_wait or cfg.backoff:
        raise ApiError(400, 10221, "flow control ack policy requires unset ack wait")
    if cfg.max_deliver > 0:
        raise ApiError(400, 10222, "flow control ack policy requires unset max deliver")


def _check_push(cfg: ConsumerConfig, stream: StreamConfig) -> None:
    if not is_literal(cfg.deliver_subject):
        raise ApiError(400, 10079, "consumer deliver subject has wildcards")
    if not is_valid_subject(cfg.deliver_subject):
        raise ApiError(400, 10112, "invalid push consumer deliver subject")
    if any(subjects_overlap(cfg.deliver_subject, s) for s in stream.subjects):
        raise ApiError(400, 10081, "consumer deliver subject forms a cycle")
    if cfg.max_waiting != 0:
        raise ApiError(400, 10080, "consumer in push mode can not set max waiting")
    if cfg.max_ack_pending > 0 and cfg.ack_policy == "none":
        raise ApiError(400, 10082, "consumer requires ack policy for max ack pending")
    if 0 < cfg.idle_heartbeat < MIN_HEARTBEAT:
        raise ApiError(400, 10083, "consumer idle heartbeat needs to be >= 100ms")


def _check_pull(cfg: ConsumerConfig, stream: StreamConfig) -> None:
    if cfg.ack_policy == "none" and stream.retention == "workqueue":
        raise ApiError(
            400, 10084, "consumer in pull mode requires explicit ack policy on workqueue stream"
        )
    if cfg.rate_limit_bps > 0:
        raise ApiError(400, 10086, "consumer in pull mode can not have rate limit set")
    if cfg.idle_heartbeat > 0:
        raise ApiError(400, 10088, "consumer idle heartbeat requires a push based consumer")
    if cfg.flow_control:
        raise ApiError(400, 10089, "consumer flow control requires a push based consumer")
    if cfg.max_expires and cfg.max_expires < _MS:
        raise ApiError(400, 10115, "consumer max request expires needs to be >= 1ms")


def _check_filters(cfg: ConsumerConfig) -> None:
    if cfg.filter_subject and cfg.filter_subjects:
        raise ApiError(
            400, 10136, "consumer cannot have both FilterSubject and FilterSubjects specified"
        )
    if cfg.filter_subject and not is_valid_subject(cfg.filter_subject):
        raise errors.invalid_config("invalid subject")
    if any(not f for f in cfg.filter_subjects):
        raise ApiError(400, 10139, "consumer filter in FilterSubjects cannot be empty")
    filters = cfg.filters
    for i, subject in enumerate(filters):
        if not is_valid_subject(subject):
            raise errors.invalid_config("invalid subject")
        for j, other in enumerate(filters):
            if i != j and is_subset(subject, other):
                raise ApiError(400, 10138, "consumer subject filters cannot overlap")


def _check_start(cfg: ConsumerConfig) -> None:
    policy = cfg.deliver_policy
    words = policy.replace("_", " ")
    has_seq, has_time = cfg.opt_start_seq > 0, cfg.opt_start_time is not None
    if policy in ("all", "last", "last_per_subject", "new"):
        if has_seq:
            raise _bad_start(words, "sequence")
        if has_time:
            raise _bad_start(words, "time")
        if policy == "last_per_subject" and not cfg.filters:
            raise _not_set(words, "filter subject")
    elif policy == "by_start_sequence":
        if not has_seq:
            raise _not_set(words, "start sequence")
        if has_time:
            raise _bad_start(words, "time")
    elif policy == "by_start_time":
        if not has_time:
            raise _not_set(words, "start time")
        if cfg.opt_start_seq != 0:
            raise _bad_start(words, "start sequence")


def _bad_start(policy: str, start: str) -> ApiError:
    return cerr.invalid_policy(
        f"consumer delivery policy is deliver {policy}, but optional start {start} is also set"
    )


def _not_set(policy: str, what: str) -> ApiError:
    return cerr.invalid_policy(
        f"consumer delivery policy is deliver {policy}, but optional {what} is not set"
    )


def check_update(old: ConsumerConfig, new: ConsumerConfig, *, deliver_bound: bool) -> None:
    """What an update may change, as `checkNewConsumerConfig` rules (500/10012 refusals)."""
    if old == new:
        return
    fixed = (
        ("deliver_policy", "deliver policy can not be updated"),
        ("mem_storage", "storage type can not be updated"),
        ("direct", "direct can not be updated"),
        ("sourcing", "sourcing can not be updated"),
        ("opt_start_seq", "start sequence can not be updated"),
        ("opt_start_time", "start time can not be updated"),
        ("ack_policy", "ack policy can not be updated"),
        ("replay_policy", "replay policy can not be updated"),
        ("idle_heartbeat", "heart beats can not be updated"),
        ("flow_control", "flow control can not be updated"),
    )
    for key, message in fixed:
        if getattr(old, key) != getattr(new, key):
            raise cerr.create_failed(message)
    if old.deliver_subject != new.deliver_subject:
        if not old.deliver_subject:
            raise cerr.create_failed("can not update pull consumer to push based")
        if not new.deliver_subject:
            raise cerr.create_failed("can not update push consumer to pull based")
        if deliver_bound:
            raise cerr.name_exists()
    if old.max_waiting != new.max_waiting:
        raise cerr.create_failed("max waiting can not be updated")
    if new.backoff and new.max_deliver != -1 and len(new.backoff) > new.max_deliver:
        raise cerr.max_deliver_backoff()


def to_state_json(cfg: ConsumerConfig) -> dict[str, Any]:
    """The config as persisted next to the consumer's state (re-read by `from_request`)."""
    out = cfg.to_json()
    out["metadata"] = dict(cfg.metadata)
    return out


def _time(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise errors.invalid_json("json: cannot unmarshal into Go value of type time.Time")
    if value == ZERO_TIME:
        return None
    try:
        return parse_rfc3339(value)
    except ValueError as exc:
        raise errors.invalid_json(str(exc)) from None
