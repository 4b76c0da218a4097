"""What an account's JetStream reports about itself: stream info's common part, the
bytes it stores (for limits and `$JS.API.INFO`), the `/jsz` document and the monitor's
detail per stream."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ingest.server.jetstream.cluster.placement import capacity
from ingest.server.version import VERSION
from log.config import API_LEVEL, StreamConfig
from log.timefmt import now_ns, rfc3339

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from ingest.server.jetstream.api import Api
    from ingest.server.jetstream.cluster.controller import JetStreamCluster
    from ingest.server.jetstream.consumers import Consumers
    from ingest.server.jetstream.engine import JetStreamOptions
    from ingest.server.jetstream.sources import Sources
    from log.streams.stream import Stream

REFERENCE_SYNC_INTERVAL_NS = 120_000_000_000  # what the reference reports beside sync_always


class Reports:
    """Mixed into `JetStream`, which owns the state named below."""

    if TYPE_CHECKING:
        config: JetStreamOptions
        server_id: str
        server_name: str
        account: str
        store_dir: Path
        streams: dict[str, Stream]
        consumers: Consumers
        sources: Sources
        api: Api
        cluster: JetStreamCluster | None
        elsewhere: Callable[[int], tuple[int, int]] | None

    def describe(
        self,
        stream: Stream,
        *,
        dynamic: bool = False,
        deleted_details: bool = False,
        subjects_filter: str = "",
    ) -> dict[str, Any]:
        """config/created/state/ts of stream info, create, update and list responses."""
        extra = {"_nats.level": str(API_LEVEL), "_nats.ver": VERSION} if dynamic else None
        return {
            "config": stream.config.to_json(dynamic=extra),
            "created": rfc3339(stream.created_ns),
            "state": stream.state_json(
                consumers=self.consumers.count(stream.name),
                deleted_details=deleted_details,
                subjects_filter=subjects_filter,
            ),
            **self.sources.state(stream.name),
            **({"cluster": self._cluster_block(stream)} if self.cluster is not None else {}),
            "ts": rfc3339(now_ns()),
        }

    def _cluster_block(self, stream: Stream) -> dict[str, Any]:
        assert self.cluster is not None
        return self.cluster.stream_info(self.account, stream.name)

    def configs(self) -> dict[str, StreamConfig]:
        return {name: stream.config for name, stream in self.streams.items()}

    def usage(self, replicas: int = 0) -> dict[str, int]:
        """Bytes the account stores, by kind, in the whole cluster: here and what the other
        servers last reported (each replica counted, as on the reference); of the streams
        of `replicas` only (an account tier's)."""
        used = self.local_usage(replicas)
        if self.elsewhere is not None:
            memory, storage = self.elsewhere(replicas)
            used["memory"] += memory
            used["storage"] += storage
        return used

    def local_usage(self, replicas: int = 0) -> dict[str, int]:
        """Bytes stored on this server, by kind; of the streams of `replicas` only."""
        used = {"memory": 0, "storage": 0}
        for stream in self.streams.values():
            if replicas and max(stream.config.num_replicas, 1) != replicas:
                continue
            kind = "memory" if stream.config.storage == "memory" else "storage"
            used[kind] += stream.store.totals()[1]  # 4 times a second in a cluster
        return used

    def info(self) -> dict[str, Any]:
        """The /jsz document."""
        messages = total_bytes = 0
        for stream in self.streams.values():
            state = stream.store.state()
            messages += state.msgs
            total_bytes += state.bytes
        return {
            "server_id": self.server_id,
            "now": rfc3339(now_ns()),
            "config": {
                "max_memory": capacity(self.config.max_memory_store, None),
                "max_storage": capacity(self.config.max_file_store, self.store_dir),
                "store_dir": str(self.store_dir),
                **_sync_fields(self.config.sync_interval_ns),
                "strict": True,  # unknown fields of an API request are refused (10025)
            },
            **self.local_usage(),
            "reserved_memory": 0,
            "reserved_storage": 0,
            "accounts": 1,
            "ha_assets": 0,
            "api": {"level": API_LEVEL, "total": self.api.total, "errors": self.api.errors},
            "streams": len(self.streams),
            "consumers": self.consumers.total(),
            "messages": messages,
            "bytes": total_bytes,
        }

    def monitor_info(self, *, consumers: bool = False, config: bool = False) -> dict[str, Any]:
        """What the monitor reads: `/jsz` figures and each stream's detail, with its
        consumers' infos (`/jsz?consumers=1`) and its config (`config=1`) when asked:
        /varz and /metrics read it too, and need neither."""
        doc = self.info()
        stats = {k: doc[k] for k in ("memory", "storage", "reserved_memory", "reserved_storage")}
        stats.update(accounts=doc["accounts"], ha_assets=doc["ha_assets"], api=doc["api"])
        streams = []
        for stream in self.streams.values():
            detail: dict[str, Any] = {"name": stream.name, "created": rfc3339(stream.created_ns)}
            if self.cluster is not None:
                detail["cluster"] = self._cluster_block(stream)
                group = detail["cluster"].get("raft_group")
                if group:
                    detail["stream_raft_group"] = group  # shown with ?raft=1 only
            else:  # as the reference shows a standalone server's streams
                detail["cluster"] = {"leader": self.server_name}
            detail["state"] = stream.state_json(consumers=self.consumers.count(stream.name))
            if config:
                detail["config"] = stream.config.to_json()
            detail.update(self.sources.state(stream.name))
            if consumers:
                detail["consumer_detail"] = self.consumers.details(stream)
            streams.append(detail)
        return {"config": doc["config"], "stats": stats, "limits": self._server_limits(),
                "streams": streams}  # fmt: skip

    def _server_limits(self) -> dict[str, int]:
        """`jetstream { limits {} }` as /jsz and /varz show it: what is set, and the default
        consumer bound always."""
        cfg = self.config
        out = {"max_request_batch": cfg.max_request_batch, "max_ack_pending": cfg.max_ack_pending}
        return {
            **{k: v for k, v in out.items() if v},
            "default_max_consumers": cfg.default_max_consumers,
        }


def _sync_fields(sync_interval_ns: int | None) -> dict[str, Any]:
    """As the reference reports them: `sync_always` beside its default interval."""
    if sync_interval_ns is None:
        return {"sync_interval": REFERENCE_SYNC_INTERVAL_NS, "sync_always": True}
    return {"sync_interval": sync_interval_ns}
