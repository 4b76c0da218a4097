"""Service latency reports: what a sampled request through a service import cost, as the
reference publishes it to the export's latency subject in the exporting account."""

from __future__ import annotations

import json
import random
import secrets
import time
from typing import TYPE_CHECKING, Any

from ingest.parser.headers import HeaderError, parse_headers
from ingest.server.accounts.settings import HEADERS_SAMPLING, Latency
from log.timefmt import rfc3339

if TYPE_CHECKING:
    from ingest.server.accounts.registry import Account
    from ingest.server.accounts.sharing import Sharing
    from ingest.server.client import Client

LATENCY_TYPE = "io.nats.server.metric.v1.service_latency"


class LatencyReport:
    """Started when the request crosses into the exporter; sent when its answer crosses back."""

    __slots__ = ("_exporter", "_requestor", "_rtt", "_sharing", "_start_ns", "_subject", "_t0")

    def __init__(
        self, exporter: Account, subject: str, requestor: str, rtt: int, sharing: Sharing
    ) -> None:
        self._exporter = exporter
        self._subject = subject
        self._requestor = requestor
        self._rtt = rtt
        self._sharing = sharing
        self._start_ns = time.time_ns()
        self._t0 = time.monotonic_ns()

    def responded(self, responder: Client | None) -> None:
        service = time.monotonic_ns() - self._t0
        body = self.document(service, responder)
        data = json.dumps(body, separators=(",", ":")).encode()
        self._sharing.publish(self._exporter, self._subject.encode(), b"", None, data)

    def document(self, service: int, responder: Client | None) -> dict[str, Any]:
        """The reference's `ServiceLatency`: total is the service's time plus the
        requester's round trip (the one measure of the network on its side)."""
        return {
            "type": LATENCY_TYPE,
            "id": secrets.token_urlsafe(16)[:22],
            "timestamp": rfc3339(time.time_ns()),
            "status": 200,
            "requestor": {"acc": self._requestor, "rtt": self._rtt},
            "responder": _client_info(responder, self._exporter.name),
            "start": rfc3339(self._start_ns),
            "service": service,
            "system": 0,
            "total": service + self._rtt,
        }


def _client_info(client: Client | None, account: str) -> dict[str, Any]:
    """The responder as the reference describes a client; an answer from a peer's client
    names its account only."""
    if client is None:
        return {"acc": account}
    info: dict[str, Any] = {
        "start": rfc3339(round(client.start * 1e9)),
        "host": client.host,
        "id": client.cid,
        "acc": account,
        "user": client.grant.user,
        "lang": client.lang,
        "ver": client.version,
        "rtt": round(client.rtt * 1e9),
        "server": client.server.server_name,
        "kind": "Client",
        "client_type": "nats",
    }
    if client.name:
        info["name"] = client.name
    return {key: value for key, value in info.items() if value not in ("", None)}


def sampled(latency: Latency, hdr: bytes | None) -> bool:
    """Whether to report this request: a share of them, or (`sampling: headers`) those
    whose trace headers say the trace is sampled (W3C, Jaeger, Zipkin B3)."""
    if latency.sampling != HEADERS_SAMPLING:
        return random.randint(1, 100) <= latency.sampling
    if hdr is None:
        return False
    try:
        _, _, headers = parse_headers(hdr)
    except HeaderError:
        return False
    found = {name.lower(): values[0] for name, values in headers.items() if values}
    return _traced(found)


def _traced(headers: dict[str, str]) -> bool:
    parent = headers.get("traceparent", "").split("-")
    if len(parent) == 4:
        return _flag(parent[3])
    uber = headers.get("uber-trace-id", "").split(":")
    if len(uber) == 4:
        return _flag(uber[3])
    b3 = headers.get("b3")
    if b3 is not None:
        parts = b3.split("-")
        flag = parts[0] if len(parts) == 1 else parts[2] if len(parts) > 2 else "1"
        return flag in ("1", "d")
    if "x-b3-sampled" in headers:
        return headers["x-b3-sampled"] == "1"
    return headers.get("x-b3-flags") == "1" or "x-b3-traceid" in headers


def _flag(text: str) -> bool:
    try:
        return bool(int(text, 16) & 1)
    except ValueError:
        return False
