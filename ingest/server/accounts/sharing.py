"""Exports and imports at run time: messages that cross from one account into another.

A stream import is a subscription in the exporting account on the imported
subject; each message it takes is published again in the importing account
under the import's prefix or `to` subject. The subscription is this server's
alone (never announced to peers): the server a message is published on copies
it, and the importing account's interest across routes takes the copy to its
subscribers anywhere, one member of each queue group in the whole cluster.

A service import is a subscription in the importing account on the import's
local subject; a request it takes is published in the exporting account on the
exported subject with its reply replaced by `_R_.<prefix>.<token>`. The
exporting account's `ReplyMap` takes what is published to that subject and
publishes it in the importer on the original reply: responders never see the
requester's subjects, and nothing but the answer crosses back. A response's own
reply subject (a JetStream message's ack subject) crosses as it is, as on the
reference: the importer reaches it only if it imports that subject too.
"""

from __future__ import annotations

import json
import secrets
import string
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ingest.parser.headers import remove_header, set_header
from ingest.parser.mapping import Transform, compile_transform, tokenize_wildcards
from ingest.server.accounts.config_sharing import find_export
from ingest.server.accounts.latency import LatencyReport, sampled
from ingest.server.accounts.registry import Account
from ingest.server.accounts.settings import SINGLETON, AccountConfig, Export, Import

if TYPE_CHECKING:
    from ingest.server.server import Server

_ALPHABET = string.ascii_letters + string.digits
_SWEEP_EVERY = 1024  # mappings added between two sweeps of the expired ones
_MAX_DEPTH = 8  # imports feeding imports: deeper than this is a cycle
NO_RESPONDERS = b"NATS/1.0 503\r\n\r\n"
REQUEST_INFO = b"Nats-Request-Info"


def _token(size: int) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(size))


@dataclass(slots=True)
class _Pending:
    """Where a response to one mapped reply goes, and until when."""

    account: Account
    subject: bytes
    once: bool
    threshold: float
    expires: float
    latency: LatencyReport | None = None


class ReplyMap:
    """The `_R_.<prefix>.*` subjects of one account on this server: each token stands for
    a reply subject in another account. The prefix is this server's own, so a response
    published on any server is routed here, where the mapping is."""

    def __init__(self, sharing: Sharing, account: Account) -> None:
        self._sharing = sharing
        self._server = sharing.server
        self.account = account
        self.prefix = f"_R_.{_token(6)}."
        self._pending: dict[str, _Pending] = {}
        self._added = 0
        sub = self._server.subscribe(self.prefix + ">", self._on_response, account=account)
        self._server.announce(sub)
        self._sub = sub

    def add(
        self,
        target: Account,
        subject: bytes,
        *,
        once: bool,
        threshold: float,
        latency: LatencyReport | None = None,
    ) -> bytes:
        """A new reply subject in this account that answers `subject` in `target`."""
        self._added += 1
        if self._added % _SWEEP_EVERY == 0:
            self.sweep(time.monotonic())
        token = _token(6)
        while token in self._pending:
            token = _token(6)
        now = time.monotonic()
        self._pending[token] = _Pending(target, subject, once, threshold, now + threshold, latency)
        return (self.prefix + token).encode()

    def sweep(self, now: float) -> None:
        """Forget mappings past their threshold (requests nobody answered, ended streams)."""
        for token in [t for t, p in self._pending.items() if p.expires <= now]:
            del self._pending[token]

    def __len__(self) -> int:
        return len(self._pending)

    def _on_response(self, subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        # A JetStream delivery is shown under its stored subject: the token is in the
        # subject it was routed on.
        routed = self._server.routed.decode("utf-8", "surrogateescape")
        token = routed[len(self.prefix) :]
        pending = self._pending.get(token)
        if pending is None:
            return
        now = time.monotonic()
        if pending.once or pending.expires <= now:
            del self._pending[token]
            if pending.expires <= now:  # past its threshold, not yet swept
                return
        else:
            pending.expires = now + pending.threshold
        responder = self._server.sender
        back = reply.encode("utf-8", "surrogateescape") if reply else b""
        self._sharing.publish(pending.account, pending.subject, back, hdr, data)
        if pending.latency is not None:
            pending.latency.responded(responder)


class Sharing:
    """The imports of every account on this server, and the reply maps they need."""

    def __init__(self, server: Server, configs: tuple[AccountConfig, ...]) -> None:
        self.server = server
        self._configs = {config.name: config for config in configs}
        self._replies: dict[str, ReplyMap] = {}
        self._subs: list[object] = []
        self._by_importer: dict[str, list[object]] = {}  # imports set at run time
        self._depth = 0

    def start(self) -> None:
        accounts = self.server.accounts
        for config in self._configs.values():
            importer = accounts[config.name]
            for imp in config.imports:
                exporter_config = self._configs[imp.account]
                export = find_export(exporter_config, imp, config.name)
                assert export is not None  # checked when the config was read
                self._subs.append(self._import(importer, accounts[imp.account], imp, export))

    def set_imports(self, importer: Account, found: list[tuple[Account, Import, Export]]) -> None:
        """Replace the imports of `importer` set before (an account JWT's, when a new one
        of the importer or of an exporter arrives) with `found`: (exporter, import, the
        export that allows it)."""
        for sub in self._by_importer.pop(importer.name, []):
            self.server.unsubscribe(sub)
        subs = [self._import(importer, exporter, imp, export) for exporter, imp, export in found]
        if subs:
            self._by_importer[importer.name] = subs

    def add(self, importer: Account, exporter: Account, imp: Import, export: Export) -> None:
        """One more import, kept until `stop` (the system account's, into every account)."""
        self._subs.append(self._import(importer, exporter, imp, export))

    def stop(self) -> None:
        for sub in self._subs + [s for subs in self._by_importer.values() for s in subs]:
            self.server.unsubscribe(sub)
        self._subs = []
        self._by_importer = {}

    def _import(self, importer: Account, exporter: Account, imp: Import, export: Export) -> object:
        if imp.service:
            return self._import_service(importer, exporter, imp, export)
        return self._import_stream(importer, exporter, imp)

    def replies(self, account: Account) -> ReplyMap:
        found = self._replies.get(account.name)
        if found is None:
            found = self._replies[account.name] = ReplyMap(self, account)
            self._subs.append(found._sub)
        return found

    def publish(
        self,
        account: Account,
        subject: bytes,
        reply: bytes,
        hdr: bytes | None,
        data: bytes,
        *,
        shown: bytes | None = None,
    ) -> bool:
        """Publish in `account` as the server; False when nobody took it (or a cycle of
        imports was cut)."""
        if self._depth >= _MAX_DEPTH:
            return False
        self._depth += 1
        # Routed from inside another message's delivery: that one's later receivers still
        # read its sender and routed subject.
        server = self.server
        sender, routed = server.sender, server.routed
        try:
            size = len(data) + (len(hdr) if hdr else 0)
            return server.route(
                None, subject, reply, hdr, data, size,
                account=account, internal=True, shown=shown,
            )  # fmt: skip
        finally:
            self._depth -= 1
            server.sender, server.routed = sender, routed

    def _import_stream(self, importer: Account, exporter: Account, imp: Import) -> object:
        rename = _stream_rename(imp)

        def carry(subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
            # A JetStream delivery (a push consumer's, a source's) is routed on its deliver
            # subject and shown under the stored one: it crosses the same way.
            routed = self.server.routed.decode("utf-8", "surrogateescape")
            shown = subject.encode("utf-8", "surrogateescape") if routed != subject else None
            local = rename(routed).encode("utf-8", "surrogateescape")
            back = reply.encode("utf-8", "surrogateescape") if reply else b""
            self.publish(importer, local, back, hdr, data, shown=shown)

        return self.server.subscribe(imp.subject, carry, account=exporter)

    def _import_service(
        self, importer: Account, exporter: Account, imp: Import, export: Export
    ) -> object:
        local_subject = imp.to or imp.subject
        transform = _service_transform(imp)
        once = export.response_type == SINGLETON
        latency = export.latency

        def request(subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
            sender = self.server.sender
            remote = transform(subject)
            rtt = round(sender.rtt * 1e9) if sender is not None else 0
            info = json.dumps({"acc": importer.name, "rtt": rtt}, separators=(",", ":"))
            # Every line a client sent under this name goes: an exporter trusts the one it gets.
            hdr = set_header(hdr and remove_header(hdr, REQUEST_INFO), REQUEST_INFO, info.encode())
            mapped = b""
            if reply:
                report = None
                if once and latency is not None and sampled(latency, hdr):
                    report = LatencyReport(exporter, latency.subject, importer.name, rtt, self)
                mapped = self.replies(exporter).add(
                    importer, reply.encode("utf-8", "surrogateescape"), once=once,
                    threshold=export.response_threshold, latency=report,
                )  # fmt: skip
            taken = self.publish(exporter, remote.encode(), mapped, hdr, data)
            if not taken and reply and sender is not None and sender.no_responders:
                self.publish(importer, reply.encode(), b"", NO_RESPONDERS, b"")

        return self.server.subscribe(local_subject, request, account=importer)


def _stream_rename(imp: Import) -> Callable[[str], str]:
    """The subject importers see for an exported one: under the prefix, or `to`."""
    if imp.prefix:
        prefix = imp.prefix.rstrip(".") + "."
        return lambda subject: prefix + subject
    if imp.to:
        transform = compile_transform(imp.subject, tokenize_wildcards(imp.to))
        assert transform is not None
        return _applied(transform)
    return lambda subject: subject


def _service_transform(imp: Import) -> Callable[[str], str]:
    """The exported subject a request on the import's local subject goes to."""
    if not imp.to or imp.to == imp.subject:
        return lambda subject: subject
    transform = compile_transform(imp.to, tokenize_wildcards(imp.subject))
    assert transform is not None
    return _applied(transform)


def _applied(transform: Transform) -> Callable[[str], str]:
    """The subscription already matched the subject: tokens are rewritten as they are,
    wildcards too (a consumer's filter travels in its create request's subject)."""
    return lambda subject: transform.apply(subject.split("."))
