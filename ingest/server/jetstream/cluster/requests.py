"""Which server answers a JetStream API request in a cluster, and the meta leader's answers.

Every JetStream server announces the API subjects, so every server receives
every request and exactly one answers, as in the reference: the meta leader
for the account-wide requests (create, update, delete, names, list, account
info) and the stream's leader for everything about one stream and its
consumers. A stream no server has heard of is the meta leader's to refuse.
While a role is vacant (an election), nobody answers and the client times out,
which is what the reference's clients see too: never an answer from a server
that may be behind.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from ingest.parser.subjects import subjects_overlap
from ingest.server.accounts import js_limits
from ingest.server.jetstream.api import (
    LIST_LIMIT,
    NAMES_LIMIT,
    PREFIX,
    Response,
    create_request,
    listed_total,
    optional_json,
    page_of,
    paged,
    require_empty,
    update_request,
)
from ingest.server.jetstream.backup import name_in_use, restore_request
from ingest.server.jetstream.cluster import meta
from ingest.server.jetstream.cluster.meta import StreamAssignment
from ingest.server.jetstream.cluster.placement import (
    check_replicas,
    choose_peers,
    group_name,
    placement_of,
)
from ingest.server.jetstream.cluster.stepdown import stepdown_target
from log import config as streamconfig
from log import errors
from log.timefmt import now_ns, rfc3339

if TYPE_CHECKING:
    from ingest.server.jetstream.api import Api
    from ingest.server.jetstream.cluster.controller import JetStreamCluster
    from ingest.server.jetstream.engine import JetStream

log = logging.getLogger("jetlake")

META_KINDS = frozenset(
    {
        "account_info_response",
        "stream_create_response",
        "stream_update_response",
        "stream_delete_response",
        "stream_names_response",
        "stream_list_response",
        "stream_remove_peer_response",
        "stream_restore_response",
    }
)
_TWO_WORD_VERBS = frozenset(
    {"STREAM.MSG", "CONSUMER.DURABLE", "STREAM.LEADER", "CONSUMER.LEADER", "STREAM.PEER"}
)
ASK_TIMEOUT = 2.0  # how long the meta leader waits for a stream leader's info in a list


def stream_token(tokens: list[str]) -> str:
    """The stream a request names: the fourth token after a two-word verb
    (`STREAM.MSG.GET.<s>`, `CONSUMER.LEADER.STEPDOWN.<s>.<c>`), otherwise the third."""
    index = 3 if ".".join(tokens[:2]) in _TWO_WORD_VERBS else 2
    return tokens[index] if len(tokens) > index else ""


class ClusterRequests:
    """One account's API in a cluster: the role rule, and the meta leader's handlers."""

    def __init__(self, cluster: JetStreamCluster, engine: JetStream) -> None:
        self._cluster = cluster
        self._js = engine
        self._account = engine.account
        # Creations proposed and not yet applied, by stream name: a client's retry of one
        # proposing again would place the stream anew, dropping the replicas the first
        # one started (under load, every retry did, and the stream never came up).
        self._proposed: dict[str, streamconfig.StreamConfig] = {}

    def install(self, api: Api) -> None:
        api.gate = self.answers
        api.routes.update(
            {
                "INFO": ("account_info_response", self._account_info),
                "STREAM.CREATE.*": ("stream_create_response", self._create),
                "STREAM.RESTORE.*": ("stream_restore_response", self._restore),
                "STREAM.UPDATE.*": ("stream_update_response", self._update),
                "STREAM.DELETE.*": ("stream_delete_response", self._delete),
                "STREAM.NAMES": ("stream_names_response", self._names),
                "STREAM.LIST": ("stream_list_response", self._list),
                "STREAM.LEADER.STEPDOWN.*": ("stream_leader_stepdown_response", self._stepdown),
                "STREAM.PEER.REMOVE.*": ("stream_remove_peer_response", self._remove_peer),
                "CONSUMER.LEADER.STEPDOWN.*.*": (
                    "consumer_leader_stepdown_response",
                    self._stepdown,
                ),
                # The system account's alone; asked elsewhere it goes unanswered (a timeout).
                "META.LEADER.STEPDOWN": ("meta_leader_stepdown_response", _ignored),
            }
        )

    def answers(self, kind: str, tokens: list[str]) -> bool:
        cluster = self._cluster
        if kind in META_KINDS:
            return cluster.is_meta_leader
        name = stream_token(tokens)
        stream = self._js.streams.get(name)
        if stream is not None:
            return stream.accepting
        return cluster.is_meta_leader and cluster.assignment(self._account, name) is None

    # -- the meta leader's ------------------------------------------------------------

    def _create(
        self, tokens: list[str], data: bytes
    ) -> Response | Awaitable[Response | None] | None:
        cfg, raw = create_request(tokens, data)
        replicas = max(cfg.num_replicas, 1)
        check_replicas(replicas)
        existing = self._cluster.assignment(self._account, cfg.name)
        if existing is not None:
            return self._created_already(existing, cfg)
        if self._retried(cfg):
            return None
        self._check_limits(cfg)
        self._check_overlap(cfg.subjects, cfg.name)
        if cfg.max_bytes > 0:  # placed by room: every server's must be known first
            return self._assign_by_room(cfg, placement_of(raw), self._reply)
        self._assign(cfg, placement_of(raw), self._reply)
        return None

    async def _assign_by_room(
        self, cfg: streamconfig.StreamConfig, placement: dict[str, Any], reply: str
    ) -> Response | None:
        await self._cluster.peers.hear_statsz()
        existing = self._cluster.assignment(self._account, cfg.name)
        if existing is not None:  # created by another request meanwhile
            return await self._created_already(existing, cfg)
        if self._retried(cfg):
            return None
        self._assign(cfg, placement, reply)
        return None

    def _retried(self, cfg: streamconfig.StreamConfig) -> bool:
        """Whether a creation of this stream is proposed already: a retry goes unanswered
        (its first request's leader answers that one; the next retry finds the stream)."""
        proposed = self._proposed.get(cfg.name)
        if proposed is not None and proposed != cfg:
            raise errors.stream_name_exists()
        return proposed is not None

    def _created_already(
        self, existing: StreamAssignment, cfg: streamconfig.StreamConfig
    ) -> Awaitable[Response | None]:
        """A create of a stream that exists: its info when the configs match."""
        if streamconfig.from_request(existing.config) != cfg:
            raise errors.stream_name_exists()
        return self._info_of(cfg.name)

    def _restore(self, tokens: list[str], data: bytes) -> Response | None:
        """`STREAM.RESTORE`: placed as a create is; its first leader takes the backup
        (answers with the subject for it), as the reference's does."""
        cfg, raw = restore_request(tokens, data)
        check_replicas(max(cfg.num_replicas, 1))
        if self._cluster.assignment(self._account, cfg.name) is not None or (
            cfg.name in self._proposed
        ):
            raise name_in_use()
        self._check_overlap(cfg.subjects, cfg.name)
        self._assign(cfg, placement_of(raw), self._reply, restore=True)
        return None

    def _assign(
        self,
        cfg: streamconfig.StreamConfig,
        placement: dict[str, Any],
        reply: str,
        *,
        restore: bool = False,
    ) -> None:
        """Place a new stream and propose its assignment; its first leader answers."""
        cluster = self._cluster
        replicas = max(cfg.num_replicas, 1)
        peers = choose_peers(
            cfg.name,
            replicas,
            cluster.members(),
            cluster.state.load(),
            online=cluster.peers.online(),
            cluster=cluster.name,
            wanted_cluster=str(placement.get("cluster") or ""),
            tags=cluster.peers.tags(),
            wanted_tags=[str(t) for t in placement.get("tags") or ()],
            available=cluster.peers.available(cfg.storage),
            need=cfg.max_bytes,
        )
        sa = StreamAssignment(
            account=self._account,
            config=_placed(cfg.to_json(), placement),
            peers=peers,
            group=group_name(cfg.name, replicas, cfg.storage, secrets.token_bytes(8)),
            created=rfc3339(now_ns()),
            reply=reply,
            restore=restore,
        )
        self._proposed[cfg.name] = cfg

        def decided(future: asyncio.Future[int]) -> None:
            """Not committed (a lost lead, a server stopping): the client's retry decides."""
            self._proposed.pop(cfg.name, None)
            if not future.cancelled() and (exc := future.exception()) is not None:
                log.debug("JetStream: stream '%s > %s' not placed: %s", sa.account, cfg.name, exc)

        cluster.propose_meta(meta.add_stream(sa)).add_done_callback(decided)

    def _update(self, tokens: list[str], data: bytes) -> Response | None:
        cfg = update_request(tokens, data)
        sa = self._cluster.assignment(self._account, cfg.name)
        if sa is None:
            raise errors.stream_not_found()
        old = streamconfig.from_request(sa.config)
        new = streamconfig.check_update(old, cfg, clustered=True)
        self._check_limits(new)
        self._check_overlap(new.subjects, new.name)
        return self._after_commit(new, sa)

    async def _after_commit(self, new: streamconfig.StreamConfig, sa: StreamAssignment) -> Response:
        """The update's answer: the stream's info from its leader once the leader has
        applied the update (it hears of the commit a moment after this server does)."""
        config = _placed(new.to_json(), placement_of(sa.config))
        peers = await self._resized(sa, max(new.num_replicas, 1))
        await self._cluster.propose_meta(meta.update_stream(self._account, config, peers))
        wanted = _without_metadata(new.to_json())
        deadline = asyncio.get_running_loop().time() + ASK_TIMEOUT
        while True:
            doc = await self._leader_info(new.name)
            if doc is not None and _without_metadata(doc.get("config") or {}) == wanted:
                return doc
            if asyncio.get_running_loop().time() > deadline:
                raise errors.cluster_unavailable()
            await asyncio.sleep(0.01)

    async def _resized(self, sa: StreamAssignment, replicas: int) -> tuple[str, ...]:
        """The stream's peers for a new replica count. More: servers placed as a creation
        places them, added as learners that catch up from the leader before they vote.
        Fewer: the leader stays (it carries the change out) with the first of the others."""
        if replicas == len(sa.peers):
            return sa.peers
        if replicas > len(sa.peers):
            return (*sa.peers, *self._cluster.spares(sa, replicas - len(sa.peers)))
        doc = await self._ask(f"{PREFIX}STREAM.INFO.{sa.name}", b"")
        leader = ((doc or {}).get("cluster") or {}).get("leader")
        first = [leader] if leader in sa.peers else []
        return (*first, *[p for p in sa.peers if p not in first])[:replicas]

    async def _delete(self, tokens: list[str], data: bytes) -> Response:
        require_empty(data)
        name = tokens[-1]
        if self._cluster.assignment(self._account, name) is None:
            raise errors.stream_not_found()
        await self._cluster.propose_meta(meta.remove_stream(self._account, name))
        return {"success": True}

    async def _remove_peer(self, tokens: list[str], data: bytes) -> Response:
        """Move a stream off one server: another takes its place, caught up from the log
        before it votes (the stream's leader carries the change out, `_reconcile`)."""
        req = optional_json(data)
        peer = req.get("peer")
        if not isinstance(peer, str) or not peer:
            raise errors.bad_request()
        sa = self._cluster.assignment(self._account, tokens[-1])
        if sa is None:
            raise errors.stream_not_found()
        if peer not in sa.peers:
            raise errors.peer_not_member()
        cluster = self._cluster
        peers = cluster.remapped(sa, peer)
        if peers is None:
            raise errors.peer_remap_failed()
        await cluster.propose_meta(meta.update_stream(self._account, sa.config, peers))
        return {"success": True}

    def _check_limits(self, cfg: streamconfig.StreamConfig) -> None:
        """The account's JetStream limits, against its streams anywhere in the cluster."""
        limits = self._js.limits
        if limits is not None:
            js_limits.check_stream(limits, self._configs(), cfg)

    def _configs(self) -> dict[str, streamconfig.StreamConfig]:
        """The account's streams anywhere in the cluster, by name, as assigned."""
        return {
            sa.name: streamconfig.from_request(sa.config)
            for sa in self._cluster.state.in_account(self._account)
        }

    def _check_overlap(self, subjects: tuple[str, ...] | list[str], name: str) -> None:
        for sa in self._cluster.state.in_account(self._account):
            if sa.name != name and any(
                subjects_overlap(a, b) for a in subjects for b in sa.config.get("subjects") or []
            ):
                raise errors.subjects_overlap()

    def _matching(self, req: Response) -> list[StreamAssignment]:
        subject = str(req.get("subject") or "")
        return sorted(
            (
                sa
                for sa in self._cluster.state.in_account(self._account)
                if not subject
                or any(subjects_overlap(subject, s) for s in sa.config.get("subjects") or [])
            ),
            key=lambda sa: sa.name,
        )

    async def _account_info(self, tokens: list[str], data: bytes) -> Response:
        """Of the account's streams anywhere in the cluster, as the reference counts them
        from its assignments; each stream's consumers as its leader counts them (one that
        does not answer in time counts none)."""
        configs = self._configs()
        docs = await asyncio.gather(*(self._info_of(name) for name in configs))
        counts = {
            name: int((doc.get("state") or {}).get("consumer_count", 0))
            for name, doc in zip(configs, docs, strict=True)
            if doc is not None
        }
        return self._js.api.account_document(configs, counts, sum(counts.values()))

    def _names(self, tokens: list[str], data: bytes) -> Response:
        req = optional_json(data)
        names = [sa.name for sa in self._matching(req)]
        return paged(req, names, NAMES_LIMIT, "streams", lambda page: page or None)

    async def _list(self, tokens: list[str], data: bytes) -> Response:
        req = optional_json(data)
        found = self._matching(req)
        offset, page = page_of(req, found, LIST_LIMIT)
        docs = await asyncio.gather(*(self._leader_info(sa.name) for sa in page))
        streams = [doc for doc in docs if doc is not None and "error" not in doc]
        missing = [sa.name for sa, doc in zip(page, docs, strict=True) if doc is None]
        total = listed_total(found, page, clustered=True)
        out: Response = {"total": total, "offset": offset, "limit": LIST_LIMIT}
        out["streams"] = streams
        if missing:
            out["missing"] = missing
        return out

    # -- a stream leader's --------------------------------------------------------------

    def _stepdown(self, tokens: list[str], data: bytes) -> Response:
        """A stream's, or a consumer's: the consumer leader is its stream's leader."""
        cluster = self._cluster
        hosted = cluster.hosted_stream(self._account, stream_token(tokens))
        if hosted is None:
            raise errors.stream_not_found()
        node = hosted.group.node
        if len(hosted.assignment.peers) > 1:  # a group of one keeps its leader, "successfully"
            to = stepdown_target(
                optional_json(data),
                me=cluster.me,
                members=node.status()["voters"],  # type: ignore[arg-type]
                online=cluster.peers.online(),
                cluster=cluster.name,
                tags=cluster.peers.tags(),
            )
            node.transfer_leadership(to)
        return {"success": True}

    # -- helpers ----------------------------------------------------------------------

    async def _info_of(self, name: str) -> Response | None:
        """The stream's info from its leader, wherever that is (None while it has none):
        a create repeating an existing stream's config is answered with it, as on one
        server (the reference forwards the request there as a `STREAM.INFO`), and
        account info counts its consumers."""
        info = await self._leader_info(name)
        return None if info is None or "error" in info else info

    async def _leader_info(self, name: str) -> Response | None:
        """The stream's info as its leader gives it, less the envelope; None: no answer."""
        doc = await self._ask(f"{PREFIX}STREAM.INFO.{name}", b"")
        for key in ("type", "total", "offset", "limit"):
            if doc is not None:
                doc.pop(key, None)
        return doc

    @property
    def _reply(self) -> str:
        return self._js.api.current_reply

    async def _ask(self, subject: str, data: bytes) -> dict[str, Any] | None:
        return await self._js.api.ask(subject, data, ASK_TIMEOUT)


def _placed(config: dict[str, Any], placement: dict[str, Any]) -> dict[str, Any]:
    """The assignment keeps the request's placement (the stream config drops it): a
    later remap must honour the same tags."""
    return {**config, "placement": placement} if placement else config


def _ignored(tokens: list[str], data: bytes) -> None:
    return None


def _without_metadata(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k != "metadata"}
