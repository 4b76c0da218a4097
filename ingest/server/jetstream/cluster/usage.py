"""An account's JetStream bytes across a cluster, exchanged as the reference exchanges
them: each server publishes what the account stores on it to
`$JSC.ARU.<account>.<server>` in the system account, whenever it changed (at most every
250 ms) and every 1.5 s, and keeps the latest figures of every other server. A
publish is then checked against the account's bytes in the whole cluster, every
replica counted (`js_limits.limited`), and `$JS.API.INFO` reports those, so a client
sees the same `storage`/`memory` and the same `10002` point whichever server it uses.

The payload is the reference's binary record: little-endian memory and storage
bytes, the API requests this server answered for the account and how many of them
failed (what an observer of `$JSC.ARU` reads per server), then one record per tier
(`""` for an account without tiers, `R<n>` for an account JWT's tiers).
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingest.server.jetstream.engine import JetStream
    from ingest.server.server import Server

SUBJECT = "$JSC.ARU.{}.{}"
_CHANGED_EVERY = 0.25  # the reference's minUsageUpdateWindow
_ALWAYS_EVERY = 1.5  # its usageTick

Tiers = dict[str, tuple[int, int]]  # tier name -> (memory, storage)


def encode(tiers: Tiers, api_total: int = 0, api_errors: int = 0) -> bytes:
    """The reference's record: the first tier with the API counts, then the others."""
    out = bytearray()
    for index, (name, (memory, storage)) in enumerate(tiers.items()):
        raw = name.encode()
        if index == 0:
            out += struct.pack("<qqQQIQ", memory, storage, api_total, api_errors,
                               len(tiers) - 1, len(raw))  # fmt: skip
        else:
            out += struct.pack("<qqQ", memory, storage, len(raw))
        out += raw
    return bytes(out)


def decode(data: bytes) -> Tiers | None:
    """The tiers of a record; None when it is malformed. A bare 32-byte record (no tier
    part, as older servers send) is the untiered figure."""
    if len(data) < 32:
        return None
    memory, storage = struct.unpack_from("<qq", data, 0)
    if len(data) < 44:
        return {"": (memory, storage)}
    extra, size = struct.unpack_from("<IQ", data, 32)
    at = 44 + size
    if at > len(data):
        return None
    tiers = {data[44:at].decode("utf-8", "replace"): (memory, storage)}
    for _ in range(extra):
        if at + 24 > len(data):
            return None
        memory, storage, size = struct.unpack_from("<qqQ", data, at)
        name = data[at + 24 : at + 24 + size]
        if len(name) != size:
            return None
        tiers[name.decode("utf-8", "replace")] = (memory, storage)
        at += 24 + size
    return tiers


def tier_name(replicas: int) -> str:
    """The key of a tier: `R<n>`, or `""` (0) for an account without tiers."""
    return f"R{replicas}" if replicas else ""


class UsageExchange:
    """This server's side: its accounts' bytes out, the other servers' in."""

    def __init__(self, server: Server) -> None:
        self._server = server
        self._node = server.server_id
        self._remote: dict[str, dict[str, Tiers]] = {}  # account -> server -> tiers
        self._sent: dict[str, tuple[Tiers, tuple[int, int], float]] = {}  # with API counts
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        server = self._server
        system = server.accounts.system_account
        sub = server.subscribe(SUBJECT.format("*", "*"), self._on_update, account=system)
        server.announce(sub)
        self._timer = asyncio.get_running_loop().call_later(_CHANGED_EVERY, self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _engines(self) -> list[JetStream]:
        return [
            account.jetstream
            for account in self._server.accounts
            if account.jetstream is not None and account.jetstream.cluster is not None
        ]

    def _tick(self) -> None:
        now = time.monotonic()
        for engine in self._engines():
            self._watch(engine)
            tiers = _local(engine)
            api = (engine.api.total, engine.api.errors)
            sent = self._sent.get(engine.account)
            if sent is None or sent[:2] != (tiers, api) or now - sent[2] >= _ALWAYS_EVERY:
                self._sent[engine.account] = (tiers, api, now)
                subject = SUBJECT.format(engine.account, self._node)
                system = self._server.accounts.system_account
                record = encode(tiers, *api)
                self._server.publish(subject, None, None, record, account=system)
        self._timer = asyncio.get_running_loop().call_later(_CHANGED_EVERY, self._tick)

    def _watch(self, engine: JetStream) -> None:
        """Let the engine count the other servers' bytes in its usage."""
        if engine.elsewhere is None:
            account = engine.account
            engine.elsewhere = lambda replicas: self.elsewhere(account, replicas)

    def elsewhere(self, account: str, replicas: int) -> tuple[int, int]:
        """The account's (memory, storage) on the other servers, of one tier (0: all)."""
        memory = storage = 0
        for tiers in self._remote.get(account, {}).values():
            for name, (mem, store) in tiers.items():
                if not replicas or name == tier_name(replicas):
                    memory, storage = memory + mem, storage + store
        return memory, storage

    def _on_update(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        tokens = subject.split(".")
        if len(tokens) != 4 or tokens[3] == self._node:
            return
        tiers = decode(data)
        if tiers is not None:
            self._remote.setdefault(tokens[2], {})[tokens[3]] = tiers


def _local(engine: JetStream) -> Tiers:
    """The account's bytes on this server, by tier."""
    limits = engine.limits
    counts = [replicas for replicas, _ in limits.tiers] if limits and limits.tiers else [0]
    out: Tiers = {}
    for replicas in counts:
        used = engine.local_usage(replicas)
        out[tier_name(replicas)] = (used["memory"], used["storage"])
    return out
