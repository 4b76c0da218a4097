"""The consumers of every stream: the CONSUMER.* API, recovery and retention by acks.

Create-or-update follows nats-server's `jsConsumerCreateRequest` and
`addConsumerWithAssignment` check for check, because clients branch on the
error codes (nats.go turns 10148/10149 into typed errors, nats-py rebinds
durables by name). Interest and workqueue streams drop a message once no
consumer whose filter matches it still needs it, as the reference's
`checkForInterest` rules.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import string
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from consensus.commits import settle
from ingest.parser.headers import encode_headers, header_value
from ingest.parser.subjects import subjects_overlap
from ingest.server.accounts import js_limits
from ingest.server.jetstream.api import HEADERS, LIST_LIMIT, NAMES_LIMIT, Response, paged
from ingest.server.jetstream.api import optional_json as _json_object
from ingest.server.jetstream.consumer_runner import Runner
from log import errors, sourcing
from log.config import API_LEVEL, is_valid_name, parse_json
from log.consumers import config as ccfg
from log.consumers import errors as cerr
from log.consumers.consumer import Consumer
from log.consumers.priority import invalid_group_name, unknown_group, valid_group_name
from log.consumers.replicated import ConsumerFiles, ReplicatedStore
from log.consumers.store import ConsumerStore, StateStore, consumers_dir, load_all
from log.request_fields import Fields, fields, refuse_unknown
from log.sources import stream_identity
from log.streams.stream import CommitListener, Stream
from log.timefmt import now_ns, parse_rfc3339, rfc3339

if TYPE_CHECKING:
    from ingest.server.jetstream.engine import JetStream

log = logging.getLogger("jetlake.jetstream")

_ALPHABET = string.ascii_letters + string.digits
# How long a replicated consumer's records wait to share one entry in the stream's log:
# a fetch + ack turns the loop over every few messages, and each entry costs every
# member a Raft round (the leader's loop thread most). What waits is redelivered after
# a new leader takes over, as what is in flight already is.
REPLICATED_SAVE_DELAY = 0.002
_CREATE_REQUEST = fields("stream_name config action pedantic")  # `config`: ccfg checks it


class Consumers:
    def __init__(self, engine: JetStream, server_version: str) -> None:
        self._js = engine
        self._version = server_version
        self._by_stream: dict[str, dict[str, Runner]] = {}
        self._listeners: dict[str, tuple[CommitListener, Callable[[], None]]] = {}
        self._interest_scheduled = False
        engine.messaging.watch_interest(self._interest_changed)

    # -- registry ---------------------------------------------------------------

    def attach(self, stream: Stream, folder: Path) -> None:
        """Start serving a stream's consumers, recovering the persisted ones."""
        runners = self._by_stream.setdefault(stream.name, {})

        def on_commit(seq: int, subject: str) -> None:
            # Every stored message passes here: without consumers, one test.
            if runners or stream.config.retention == "interest":
                self._on_commit(stream, seq, subject)

        def on_stored() -> None:
            if runners:  # a pump may end a consumer (its runner leaves the dict)
                for runner in list(runners.values()):
                    runner.pump_due()

        self._listeners[stream.name] = (on_commit, on_stored)
        stream.add_commit_listener(on_commit, on_stored)
        if stream.config.storage == "file" and not _replicated(stream):
            self._recover(stream, folder)

    def lead(self, stream: Stream) -> None:
        """This member now leads a replicated stream: run its consumers from their files.

        Call it (after `attach`) once the stream has applied every committed entry, so
        the files (`log.consumers.replicated.ConsumerFiles`) hold everything agreed on.
        """
        runners = self._by_stream.setdefault(stream.name, {})
        if not runners:  # not leading already
            self._recover(stream, self._js.stream_folder(stream.name))

    def follow(self, stream: Stream) -> None:
        """Another member leads the stream now: stop its consumers here, keep their files.

        Waiting pull requests hear `409 Leadership Change`, the status the reference's
        new consumer leader sends them; here the old leader still knows them.
        """
        runners = self._by_stream.get(stream.name, {})
        for runner in runners.values():
            runner.stop(reason="Leadership Change")
        runners.clear()

    def _recover(self, stream: Stream, folder: Path) -> None:
        """Start every consumer persisted in a stream's folder, where it left off."""
        for saved in load_all(folder):
            try:
                cfg = ccfg.with_defaults(ccfg.from_request(saved.config), stream.config)
            except errors.ApiError as err:
                log.warning("consumer %s > %s not recovered: %s", stream.name, saved.name, err)
                continue
            runner = self._open(stream, saved.name, cfg, parse_rfc3339(saved.created))
            if saved.state is not None:
                runner.consumer.restore(saved.state, now_ns())
            runner.start()

    def detach(self, stream: Stream, *, reason: str) -> None:
        """Stop a stream's consumers (shutdown, stream deleted); their files stay."""
        listeners = self._listeners.pop(stream.name, None)
        if listeners is not None:
            stream.remove_commit_listener(*listeners)
        for runner in self._by_stream.pop(stream.name, {}).values():
            runner.stop(reason=reason)

    def count(self, stream: str) -> int:
        """A stream's `consumer_count`: a limits origin's unlisted sourcing readers are not
        in it (the account's total has them, as the reference's does). A replicated
        stream's member that runs none of them (a follower) counts those its files hold."""
        runners = self._by_stream.get(stream)
        if runners:
            return sum(1 for r in runners.values() if _listed(r))
        held = self._js.streams.get(stream)
        files = held.consumer_ops if held is not None and not held.accepting else None
        return files.listed() if isinstance(files, ConsumerFiles) else 0

    def total(self) -> int:
        return sum(len(v) for v in self._by_stream.values())

    def _consumer(self, stream: str, name: str) -> Runner:
        self._js.stream(stream)
        runner = self._by_stream.get(stream, {}).get(name)
        if runner is None:
            raise errors.consumer_not_found()
        return runner

    def _open(self, stream: Stream, name: str, cfg: ccfg.ConsumerConfig, created: int) -> Runner:
        now = now_ns()
        consumer = Consumer(
            stream.name,
            name,
            cfg,
            stream.store,
            created=created,
            now=now,
            committed=stream.committed_seq,
        )
        store: StateStore | None = None
        if cfg.is_durable and stream.config.storage == "file" and not cfg.mem_storage:
            if _replicated(stream):  # files are written as ops commit (create proposes one)
                store = ReplicatedStore(name, stream)
            else:
                folder = consumers_dir(self._js.stream_folder(stream.name)) / name
                store = ConsumerStore(folder, sync_interval_ns=self._js.config.sync_interval_ns)
                store.save_meta(ccfg.to_state_json(cfg), rfc3339(created))
        runner = Runner(
            consumer,
            stream,
            self._js.messaging,
            store=store,
            on_done=self._on_done,
            on_idle=self._on_idle,
            save_delay=REPLICATED_SAVE_DELAY if isinstance(store, ReplicatedStore) else 0.0,
        )
        self._by_stream[stream.name][name] = runner
        return runner

    def _remove(self, stream: Stream, runner: Runner) -> None:
        runner.stop(reason="Consumer Deleted")
        self._by_stream.get(stream.name, {}).pop(runner.name, None)
        if runner.store is not None:
            runner.store.delete()
        if stream.config.retention == "interest":
            self._sweep_interest(stream)

    # -- events ---------------------------------------------------------------------

    def _on_commit(self, stream: Stream, seq: int, subject: str) -> None:
        runners = self._by_stream.get(stream.name, {})
        for runner in runners.values():
            runner.on_commit(seq, subject)
        if stream.config.retention == "interest" and not any(
            r.consumer.matches(subject) for r in runners.values()
        ):
            stream.remove((seq,))

    def _on_done(self, runner: Runner, seqs: list[int]) -> None:
        """A consumer is finished with these messages: drop those nobody else needs.

        Only the other consumers are asked, and only they need a message's subject:
        the common case (one consumer, e.g. each MQTT QoS 1 subscription) removes
        without loading a message, and the rest load once per batch, not per message.
        """
        stream = runner.stream
        if stream.config.retention == "limits":
            return
        others = [
            r.consumer for r in self._by_stream.get(stream.name, {}).values() if r is not runner
        ]
        _drop_unneeded(stream, sorted(seqs), others)

    def _sweep_interest(self, stream: Stream) -> None:
        """After a consumer left an interest stream: drop what no one still needs."""
        others = [r.consumer for r in self._by_stream.get(stream.name, {}).values()]
        seqs = list(stream.store.seqs_for(">", stream.store.state().first_seq))
        for i in range(0, len(seqs), _SWEEP_RUN):  # a run at a time: never the whole stream loaded
            _drop_unneeded(stream, seqs[i : i + _SWEEP_RUN], others)

    def _on_idle(self, runner: Runner) -> None:
        stream = self._js.streams.get(runner.consumer.stream)
        if stream is not None and runner.name in self._by_stream.get(stream.name, {}):
            self._remove(stream, runner)

    def _interest_changed(self) -> None:
        if not self._interest_scheduled and any(self._by_stream.values()):
            self._interest_scheduled = True
            asyncio.get_running_loop().call_soon(self._recheck_interest)

    def _recheck_interest(self) -> None:
        self._interest_scheduled = False
        for runners in list(self._by_stream.values()):
            for runner in list(runners.values()):
                runner.check_interest()

    # -- API ------------------------------------------------------------------------

    def create(self, tokens: list[str], data: bytes) -> Response | Awaitable[Response]:
        req = _json_object(data)
        refuse_unknown(req, _CREATE_REQUEST)
        raw_cfg = req.get("config")
        cfg = ccfg.from_request(raw_cfg if raw_cfg is not None else {})
        durable_api = tokens[1] == "DURABLE"
        stream_name = tokens[3] if durable_api else tokens[2]
        if durable_api and len(tokens) != 5:
            raise cerr.durable_not_in_subject()
        name = tokens[4] if durable_api else (tokens[3] if len(tokens) > 3 else cfg.name)
        subject_filter = ".".join(tokens[4:]) if not durable_api and len(tokens) > 4 else ""
        if stream_name != req.get("stream_name"):
            raise errors.stream_name_mismatch()
        if name and ("/" in name or "\\" in name):
            raise cerr.path_separators()
        if durable_api:
            if not cfg.durable_name:
                raise cerr.durable_not_set()
            if name != cfg.durable_name:
                raise cerr.durable_mismatch()
            cfg = dataclasses.replace(cfg, name=name)
        elif len(tokens) > 3:
            if cfg.durable_name and name != cfg.durable_name:
                raise cerr.durable_mismatch()
            cfg = dataclasses.replace(cfg, name=name)
        elif cfg.durable_name:
            raise cerr.ephemeral_with_durable()
        if subject_filter and cfg.filter_subjects:
            raise cerr.multiple_filters_in_subject()
        if subject_filter and cfg.filter_subject != subject_filter:
            raise cerr.filter_mismatch()
        if cfg.num_replicas > 1 and not _replicated(self._js.streams.get(stream_name)):
            raise errors.replicas_not_supported()
        stream = self._js.stream(stream_name)
        if cfg.num_replicas > stream.config.num_replicas:
            raise cerr.replicas_exceed_stream()
        cfg = sourcing.origin_side(cfg, stream.config.retention, self._fresh_name(stream.name))
        identity = self._expected_identity(stream, cfg)
        return _told(identity, self._create(stream, cfg, str(req.get("action") or "")))

    def _expected_identity(self, stream: Stream, cfg: ccfg.ConsumerConfig) -> str | None:
        """A sourcing reader's request may name the origin it expects (`Nats-Stream-Identity`,
        API level 5): another one is refused with `10225`, so a source learns its origin was
        recreated; the answer tells the identity. None: not a sourcing reader."""
        if not (cfg.direct or cfg.sourcing):
            return None
        identity = stream_identity(stream.created_ns)
        asked = header_value(self._js.api.current_hdr or b"", _IDENTITY)
        if asked and asked.decode() != identity:
            raise errors.ApiError(
                400, 10225, f"consumer's stream identity does not match: {identity}"
            )
        return identity

    def _create(
        self, stream: Stream, cfg: ccfg.ConsumerConfig, action: str
    ) -> Response | Awaitable[Response]:
        existing_name = cfg.durable_name or cfg.name
        existing = self._by_stream[stream.name].get(existing_name) if existing_name else None
        if existing is not None:
            cfg = dataclasses.replace(cfg, pause_until=existing.consumer.cfg.pause_until)
            cfg = sourcing.kept_start(cfg, existing.consumer.cfg)
        ceilings = js_limits.ceilings(self._js.config, self._js.limits, stream.config.num_replicas)
        cfg = ccfg.with_defaults(cfg, stream.config, **ceilings)
        ccfg.check(cfg, stream.config)
        js_limits.check_server_ceilings(self._js.config, cfg)
        if existing is not None:
            return self._update(stream, existing, cfg, action)
        if action == "update":
            raise cerr.does_not_exist()
        self._check_new(stream, cfg)
        name = cfg.name or self._fresh_name(stream.name)  # a generated name stays out of config
        if not is_valid_name(name):
            raise cerr.bad_durable_name()
        runner = self._open(stream, name, cfg, now_ns())
        if isinstance(runner.store, ReplicatedStore):  # it starts once its create commits
            c = runner.consumer
            runner.store.create(ccfg.to_state_json(cfg), rfc3339(c.created), c.snapshot())
            return self._after_commit(
                runner.store,
                partial(self._start, stream, runner),
                undo=partial(self._forget, stream, runner),
            )
        return self._start(stream, runner)

    def _start(self, stream: Stream, runner: Runner) -> Response:
        runner.start()
        return self.describe(stream, runner, dynamic=True)

    def _forget(self, stream: Stream, runner: Runner) -> None:
        """A create that did not commit: the runner never started, no file was written."""
        if self._by_stream.get(stream.name, {}).get(runner.name) is runner:
            del self._by_stream[stream.name][runner.name]

    def _answer(
        self, runner: Runner, answer: Callable[[], Response]
    ) -> Response | Awaitable[Response]:
        """The response, once what the request changed has committed (replicated streams)."""
        if isinstance(runner.store, ReplicatedStore):
            return self._after_commit(runner.store, answer)
        return answer()

    async def _after_commit(
        self,
        store: ReplicatedStore,
        answer: Callable[[], Response],
        undo: Callable[[], None] | None = None,
    ) -> Response:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        store.confirm(partial(settle, future, 0))
        try:
            await future
        except Exception as err:
            if undo is not None:
                undo()
            log.warning("%s: not committed: %s", store, err)
            raise errors.cluster_unavailable() from err
        return answer()

    def _update(
        self, stream: Stream, runner: Runner, cfg: ccfg.ConsumerConfig, action: str
    ) -> Response | Awaitable[Response]:
        old = runner.consumer.cfg
        if action == "create" and cfg != old:
            raise cerr.already_exists()
        if stream.config.retention == "workqueue":
            self._check_partition(stream, cfg, skip=runner.name)
        bound = bool(old.deliver_subject) and self._js.messaging.has_interest(old.deliver_subject)
        ccfg.check_update(old, cfg, deliver_bound=bound)
        if cfg != old:
            runner.consumer.update_config(cfg)
            if runner.store is not None:
                runner.store.save_meta(ccfg.to_state_json(cfg), rfc3339(runner.consumer.created))
        if cfg.sourcing:
            _rewind(runner.consumer)
        if cfg != old or cfg.sourcing:
            runner.check_interest()
            runner.schedule()
        return self._answer(runner, partial(self.describe, stream, runner, dynamic=True))

    def _check_new(self, stream: Stream, cfg: ccfg.ConsumerConfig) -> None:
        """The limits and work-queue rules; a sourcing reader is exempt from both, as the
        reference's `numLimitableConsumers` leaves it out."""
        if cfg.sourcing or cfg.direct:
            return
        scfg = stream.config
        count = sum(1 for r in self._by_stream[stream.name].values() if _limitable(r))
        if scfg.max_consumers > 0 and count >= scfg.max_consumers:
            raise cerr.max_consumers()
        limits = self._js.limits
        if scfg.max_consumers <= 0 and not js_limits.bounds_consumers(limits, scfg.num_replicas):
            default = self._js.config.default_max_consumers  # read now: a reload moves it
            if 0 < default <= count:
                raise cerr.max_consumers()
        if limits is not None:
            js_limits.check_consumer(limits, count, cfg, scfg.num_replicas)
        if scfg.retention == "workqueue":
            if cfg.ack_policy not in ("explicit", "flow_control"):
                raise cerr.wq_requires_explicit_ack()
            if cfg.deliver_policy != "all":
                raise cerr.wq_not_deliver_all()
            if count:
                if not cfg.filters:
                    raise cerr.wq_multiple_unfiltered()
                self._check_partition(stream, cfg, skip=cfg.name)

    def _check_partition(self, stream: Stream, cfg: ccfg.ConsumerConfig, *, skip: str) -> None:
        """Workqueue consumers must not share a subject (the reference's partitionUnique)."""
        for other in self._by_stream[stream.name].values():
            if other.name == skip or not _limitable(other):
                continue
            theirs = other.consumer.cfg.filters or (">",)
            if any(subjects_overlap(a, b) for a in cfg.filters or (">",) for b in theirs):
                raise cerr.wq_not_unique()

    def _fresh_name(self, stream: str) -> str:
        while True:
            name = "".join(secrets.choice(_ALPHABET) for _ in range(8))
            if name not in self._by_stream[stream]:
                return name

    def info(self, tokens: list[str], data: bytes) -> Response:
        runner = self._consumer(tokens[2], tokens[3])
        return self.describe(runner.stream, runner, dynamic=True)

    def delete(self, tokens: list[str], data: bytes) -> Response | Awaitable[Response]:
        runner = self._consumer(tokens[2], tokens[3])
        self._remove(runner.stream, runner)
        return self._answer(runner, lambda: {"success": True})

    def pause(self, tokens: list[str], data: bytes) -> Response | Awaitable[Response]:
        req = _json_object(data)
        runner = self._consumer(tokens[2], tokens[3])
        until_text = req.get("pause_until")
        until = parse_rfc3339(until_text) if isinstance(until_text, str) else 0
        if until_text == "0001-01-01T00:00:00Z":
            until = 0
        cfg = dataclasses.replace(runner.consumer.cfg, pause_until=until or None)
        runner.consumer.update_config(cfg)
        if runner.store is not None:
            runner.store.save_meta(ccfg.to_state_json(cfg), rfc3339(runner.consumer.created))
        runner.schedule()
        now = now_ns()
        out: Response = {"paused": until > now, "pause_until": rfc3339(until)}
        if until > now:
            out["pause_remaining"] = until - now
        return self._answer(runner, lambda: out)

    def unpin(self, tokens: list[str], data: bytes) -> Response:
        """`CONSUMER.UNPIN`: release a group's pin; the next waiting request gets a new one."""
        if not data.strip():
            raise errors.invalid_json("unexpected end of JSON input")
        req = parse_json(data)
        group = _UNPIN_FIELDS.str(req, "group") if isinstance(req, dict) else ""
        if not group:
            raise errors.invalid_json("consumer group not specified")
        if not valid_group_name(group):
            raise invalid_group_name()
        runner = self._consumer(tokens[2], tokens[3])
        if group not in runner.consumer.cfg.priority_groups:
            raise unknown_group()
        runner.consumer.priority.unpin(group, "admin", now_ns())
        runner.schedule()
        return {}

    def reset(self, tokens: list[str], data: bytes) -> Response | Awaitable[Response] | None:
        """`CONSUMER.RESET.<stream>.<consumer>`: redeliver from a sequence. The reference's
        consumer answers it on a subscription of its own, so a stream or consumer that is
        not here gets no answer at all (the client times out), not a not-found error."""
        runner = self._by_stream.get(tokens[2], {}).get(tokens[3])
        if runner is None:
            return None
        seq = _RESET_FIELDS.uint(_json_object(data), "seq")
        stream = runner.stream
        at = runner.consumer.reset(seq)
        runner.save()  # proposed (replicated) or written before the answer
        runner.schedule()
        if stream.config.retention == "interest":  # what it skipped is no longer its interest
            self._sweep_interest(stream)
        extra: Response = {"reset_seq": at}
        asked = self._js.api.current_hdr
        if asked and header_value(asked, _IDENTITY) is not None:
            identity = stream_identity(stream.created_ns)  # told, never checked
            extra[HEADERS] = encode_headers({STREAM_IDENTITY: identity})
        return self._answer(
            runner, lambda: {**self.describe(stream, runner, dynamic=True), **extra}
        )

    def names(self, tokens: list[str], data: bytes) -> Response:
        self._js.stream(tokens[2])
        req = _json_object(data)
        return paged(req, self._listed_names(tokens[2]), NAMES_LIMIT, "consumers", lambda p: p)

    def list(self, tokens: list[str], data: bytes) -> Response:
        stream = self._js.stream(tokens[2])
        req = _json_object(data)
        runners = self._by_stream.get(stream.name, {})
        return paged(
            req,
            self._listed_names(stream.name),
            LIST_LIMIT,
            "consumers",
            lambda page: [self.describe(stream, runners[n]) for n in page],
            clustered_list=self._js.cluster is not None,
        )

    def details(self, stream: Stream) -> list[Response]:
        """The infos of a stream's listed consumers, by name (`/jsz?consumers=1`)."""
        runners = self._by_stream.get(stream.name, {})
        return [self.describe(stream, runners[n]) for n in self._listed_names(stream.name)]

    def _listed_names(self, stream: str) -> list[str]:
        """A stream's consumers as CONSUMER.NAMES and LIST show them, by name."""
        return sorted(n for n, r in self._by_stream.get(stream, {}).items() if _listed(r))

    def describe(self, stream: Stream, runner: Runner, *, dynamic: bool = False) -> Response:
        """The reference's ConsumerInfo document."""
        c, now = runner.consumer, now_ns()
        extra = {"_nats.level": str(API_LEVEL), "_nats.ver": self._version} if dynamic else None
        delivered: Response = {"consumer_seq": c.dseq - 1, "stream_seq": c.sseq - 1}
        if c.last_delivered:
            delivered["last_active"] = rfc3339(c.last_delivered)
        ack_floor: Response = {"consumer_seq": c.adflr, "stream_seq": c.asflr}
        if c.last_acked:
            ack_floor["last_active"] = rfc3339(c.last_acked)
        c.npc = c.count_pending()
        c.drop_deaf()  # the reference counts waiting requests after dropping those
        out: Response = {
            "stream_name": stream.name,
            "name": c.name,
            "created": rfc3339(c.created),
            "config": c.cfg.to_json(dynamic=extra),
            "delivered": delivered,
            "ack_floor": ack_floor,
            "num_ack_pending": len(c.pending),
            "num_redelivered": len(c.redelivered),
            "num_waiting": len(c.waiting),
            "num_pending": c.npc,
        }
        if c.cfg.is_push and c.active:
            out["push_bound"] = True
        pause = c.cfg.pause_until
        if pause is not None and pause > now:
            out["paused"] = True
            out["pause_remaining"] = pause - now
        if self._js.cluster is not None:  # led with its stream: the same group and leader
            out["cluster"] = self._js.cluster.stream_info(self._js.account, stream.name)
        out["ts"] = rfc3339(now)
        if groups := c.priority.states():
            out["priority_groups"] = groups
        return out


_SWEEP_RUN = 4096
_UNPIN_FIELDS = Fields("JSApiConsumerUnpinRequest")
_RESET_FIELDS = Fields("JSApiConsumerResetRequest")
STREAM_IDENTITY = sourcing.STREAM_IDENTITY
_IDENTITY = STREAM_IDENTITY.encode()


def _told(
    identity: str | None, response: Response | Awaitable[Response]
) -> Response | Awaitable[Response]:
    """A sourcing reader's create answer carries the origin's identity as a header."""
    if identity is None:
        return response
    hdr = encode_headers({STREAM_IDENTITY: identity})
    if isinstance(response, dict):
        return {**response, HEADERS: hdr}
    pending: Awaitable[Response] = response

    async def later() -> Response:
        return {**await pending, HEADERS: hdr}

    return later()


def _replicated(stream: Stream | None) -> bool:
    """Its consumers' state travels in the stream's Raft log (`log.consumers.replicated`)."""
    return stream is not None and stream.config.num_replicas > 1


def _limitable(runner: Runner) -> bool:
    """Counted against max_consumers and the work-queue rules (not a sourcing reader)."""
    cfg = runner.consumer.cfg
    return not (cfg.sourcing or cfg.direct)


def _listed(runner: Runner) -> bool:
    """Shown by CONSUMER.LIST/NAMES: all but a limits origin's unlisted sourcing readers."""
    return not runner.consumer.cfg.direct


def _rewind(consumer: Consumer) -> None:
    """A durable sourcing reader asked for again resumes after its ack floor (the reference's
    `resetStartingSeq`): what was in flight to a reader that went is delivered anew."""
    state = consumer.snapshot()
    state.update(dseq=consumer.adflr + 1, sseq=consumer.asflr + 1, pending=[], redelivered=[])
    consumer.restore(state, now_ns())


def _drop_unneeded(stream: Stream, seqs: list[int], others: list[Consumer]) -> None:
    """Remove the messages among ascending seqs that none of `others` still needs, as one
    delete; with nobody to ask, no message is loaded."""
    if others:
        msgs = stream.store.load_many(seqs)
        seqs = [m.seq for m in msgs if not any(c.needs(m.seq, m.subject) for c in others)]
    stream.remove(seqs)
