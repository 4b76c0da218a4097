"""Durable sourcing (JetStream API level 4): the consumer a mirror or source reads its
origin through, on both ends of the API.

The reading stream asks the origin's `$JS.API.CONSUMER.CREATE` (behind an
`external` API prefix when the origin is in another account or domain) for a
flow-controlled push consumer with a stable name, `JS_MIRROR_<hash>` or
`JS_SRC_<hash>`, marked `direct` and `sourcing`. The origin decides what it
becomes, as the reference's `jsConsumerCreateRequest` does: on an interest or
work-queue origin a durable acknowledged by flow control, which the origin
lists and whose acknowledgements it waits for before retiring a message (so a
mirror and a source of one work queue each get every message); on a limits
origin an unlisted reader under a name made unique, since nothing there waits
for it. Either way the reading stream's own copies stay its progress.

A link given its own `consumer` (a durable the user made on the origin, with
`ack_policy: flow_control`) creates nothing: it resets that durable with
`$JS.API.CONSUMER.RESET` (back to its ack floor) and reads its delivery
subject, and leaves it in place when the link goes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from log.consumers.config import ConsumerConfig
from log.sources import API_PREFIX, StreamSource, name_hash
from log.timefmt import rfc3339

MIRROR_PREFIX = "JS_MIRROR_"
SOURCE_PREFIX = "JS_SRC_"
HEALTH_HEARTBEAT_NS = 1_000_000_000  # the reference's sourcing heartbeat
HEALTH_CHECK_NS = 10_000_000_000  # silence after which a reader is set up again
RETRY_NS = 2_000_000_000  # the reference's pause between consumer create attempts
MAX_RETRY_NS = 60_000_000_000
_MAX_DELIVER_ONCE = 1
_ACK_WAIT = 22 * 3600 * 1_000_000_000  # the reference's ack wait for a sourcing reader
REQUIRED_LEVEL = "Nats-Required-Api-Level"
STREAM_IDENTITY = "Nats-Stream-Identity"
SOURCE_LEVEL = 5  # a source tells the origin it expects (recreated origins, `10225`)
DURABLE_LEVEL = 4  # durable sourcing, flow-control acks, consumer reset
IDENTITY_MISMATCH = 10225
_LEVEL_REFUSED = (10185, 10025)  # an origin below the level asked (or one not knowing it)


def stable_hash(stream: str, account: str, domain: str = "") -> str:
    """The reference's hash of the reading stream (`createStableConsumerHash`)."""
    ident = f"{stream} {account}" + (f" {domain}" if domain else "")
    return name_hash(ident)


def consumer_name(
    stream: str,
    account: str,
    source: StreamSource,
    sources: Sequence[StreamSource],
    *,
    mirror: bool,
) -> str:
    """`JS_MIRROR_<hash>` or `JS_SRC_<hash>`: the same across restarts, so a durable on the
    origin is found again. A source's hash is hashed once more, and also covers its filters
    when the stream names one origin twice (`createSourcingConsumerHash`)."""
    ident = stable_hash(stream, account)
    if mirror:
        return MIRROR_PREFIX + ident
    if sum(1 for s in sources if s.name == source.name) > 1:
        ident = f"{ident} {source.index_name}"
    return SOURCE_PREFIX + name_hash(ident)


def retry_delay(fails: int) -> int:
    """How long to wait before asking again after `fails` refused or unanswered requests:
    doubling from the reference's 2 s, so an origin nothing answers is not asked (and
    logged) every 2 s for ever."""
    return min(RETRY_NS << min(max(fails - 1, 0), 8), MAX_RETRY_NS)


def api_subject(source: StreamSource, subject: str) -> str:
    """An API subject as the origin is reached: through the external prefix if any."""
    if source.external is None or not source.external.api:
        return subject
    return subject.replace(API_PREFIX, source.external.api, 1).replace("..", ".")


def deliver_subject(source: StreamSource, token: str, *, mirror: bool) -> str:
    """Where the origin delivers: `$JS.M.<token>`/`$JS.S.<token>`, or under the external
    delivery prefix (the subject the origin's account exports to this one)."""
    kind = "M" if mirror else "S"
    if source.external is not None and source.external.deliver:
        return f"{source.external.deliver}.{kind}.{token}".replace("..", ".")
    return f"$JS.{kind}.{token}"


class Start(NamedTuple):
    """Where a (re)created reader starts: a sequence, a time, or the origin's beginning."""

    seq: int = 0
    time: int = 0  # ns since the epoch


def create_request(
    source: StreamSource,
    name: str,
    deliver: str,
    start: Start,
    metadata: dict[str, str],
) -> tuple[str, bytes]:
    """The CONSUMER.CREATE subject and body a reading stream sends, as the reference's."""
    cfg: dict[str, Any] = {"name": name, "deliver_subject": deliver}
    if start.seq:
        cfg["deliver_policy"] = "by_start_sequence"
        cfg["opt_start_seq"] = start.seq
    elif start.time:
        cfg["deliver_policy"] = "by_start_time"
        cfg["opt_start_time"] = rfc3339(start.time)
    else:
        cfg["deliver_policy"] = "all"
    cfg.update(
        ack_policy="none",
        ack_wait=_ACK_WAIT,
        max_deliver=_MAX_DELIVER_ONCE,
        idle_heartbeat=HEALTH_HEARTBEAT_NS,
        flow_control=True,
        direct=True,
        sourcing=True,
        inactive_threshold=HEALTH_CHECK_NS,
        metadata=metadata,
    )
    if source.filter_subject:
        cfg["filter_subject"] = source.filter_subject
    elif source.subject_transforms:
        cfg["filter_subjects"] = [t.src or ">" for t in source.subject_transforms]
    subject = api_subject(source, f"{API_PREFIX}.CONSUMER.CREATE.{source.name}")
    body = {"stream_name": source.name, "config": cfg}
    return subject, json.dumps(body, separators=(",", ":")).encode()


def reset_subject(source: StreamSource) -> str:
    """Where a link with its own durable asks for it to be reset to its ack floor."""
    name = source.consumer.name if source.consumer is not None else ""
    return api_subject(source, f"{API_PREFIX}.CONSUMER.RESET.{source.name}.{name}")


def request_headers(
    source: StreamSource, *, mirror: bool, level: int, identity: str
) -> bytes | None:
    """The headers of a link's create or reset request, as the reference sends them: a
    mirror asks for level 4 when it creates its reader and sends nothing with a reset; a
    source asks for level 5 and names the origin identity it expects, or asks for level 4
    alone once an origin refused level 5."""
    if mirror:
        return None if source.consumer is not None else _headers(REQUIRED_LEVEL, str(level))
    if level < SOURCE_LEVEL:
        return _headers(REQUIRED_LEVEL, str(level))
    return _headers(REQUIRED_LEVEL, str(level), STREAM_IDENTITY, identity)


def _headers(*pairs: str) -> bytes:
    lines = "".join(f"{k}: {v}\r\n" for k, v in zip(pairs[::2], pairs[1::2], strict=True))
    return f"NATS/1.0\r\n{lines}\r\n".encode()


def level_refused(error: Mapping[str, Any], level: int) -> bool:
    """The origin does not know the level asked: a source asks again at level 4."""
    return level > DURABLE_LEVEL and error.get("err_code") in _LEVEL_REFUSED


def durable_refused(
    source: StreamSource, answer: Mapping[str, Any], *, mirror: bool
) -> dict[str, Any] | None:
    """The user's durable must acknowledge by flow control: only then does it hold each
    message until this link has committed its copy (the reference's 10214/10217)."""
    if source.consumer is None:
        return None
    config = answer.get("config")
    if isinstance(config, Mapping) and config.get("ack_policy") == "flow_control":
        return None
    if mirror:
        return {"code": 400, "err_code": 10214, "description": MIRROR_NEEDS_FC}
    return {"code": 400, "err_code": 10217, "description": SOURCE_NEEDS_FC}


MIRROR_NEEDS_FC = "stream mirror consumer requires flow control ack policy"
SOURCE_NEEDS_FC = "stream source consumer requires flow control ack policy"


def origin_side(cfg: ConsumerConfig, retention: str, unique: str) -> ConsumerConfig:
    """What the origin makes of a sourcing reader's request (`direct`, `sourcing`, a name).

    Interest and work-queue origins keep it as a durable acknowledged by flow control, so
    they hold each message until every reader has it; a limits origin keeps an unlisted
    reader whose name gets `-<unique>`, as a stable name could be in use there."""
    if not (cfg.direct and cfg.sourcing and cfg.name):
        return cfg
    if retention == "limits":
        return dataclasses.replace(cfg, name=f"{cfg.name}-{unique}")
    return dataclasses.replace(
        cfg,
        direct=False,
        durable_name=cfg.name,
        ack_policy="flow_control",
        ack_wait=0,
        max_deliver=0,
        inactive_threshold=0,
    )


def kept_start(new: ConsumerConfig, old: ConsumerConfig) -> ConsumerConfig:
    """A durable sourcing reader asked for again keeps where it was set to start: its ack
    floor, not the request, says where delivery resumes."""
    if not (new.sourcing and new.durable_name):
        return new
    return dataclasses.replace(
        new,
        deliver_policy=old.deliver_policy,
        opt_start_seq=old.opt_start_seq,
        opt_start_time=old.opt_start_time,
    )


class AckReply(NamedTuple):
    """What a delivered message's `$JS.ACK…` reply subject says about it."""

    consumer: str
    delivered: int  # times delivered
    stream_seq: int
    consumer_seq: int
    ts: int
    pending: int


def parse_ack_reply(reply: str) -> AckReply | None:
    """`$JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<dseq>.<ts>.<pending>`, or the longer form
    with domain and account hash (12 tokens, an optional random last one)."""
    tokens = reply.split(".")
    if len(tokens) < 9 or tokens[0] != "$JS" or tokens[1] != "ACK":
        return None
    if len(tokens) >= 12:
        tokens = tokens[:2] + tokens[4:11]
    try:
        dc, sseq, dseq, ts, pending = (int(t) for t in tokens[4:9])
    except ValueError:
        return None
    return AckReply(tokens[3], dc, sseq, dseq, ts, pending)
