"""JetStream per account: an engine for each account with `jetstream: enabled`, and the
reference's refusal for every other account while the server runs JetStream.

The global account's engine stays `Server.jetstream` (the one monitoring and MQTT
know); the others hang off their `Account`. Each engine keeps its streams under
`<store_dir>/jetstream/<account>/streams/`, the reference's layout, so a global
account's existing data is where it always was.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ingest.parser.subjects import subjects_overlap
from ingest.server.accounts.messaging import AccountMessaging
from ingest.server.accounts.registry import Account
from ingest.server.accounts.settings import AccountConfig

if TYPE_CHECKING:
    from ingest.server.jetstream import JetStream
    from ingest.server.server import Server

API_PREFIX = "$JS.API."
_TYPE = "io.nats.jetstream.api.v1."
NOT_ENABLED = {"code": 503, "err_code": 10039, "description": "JetStream not enabled for account"}
# Two-token endpoints whose response type names three tokens, or another verb.
_THREE_TOKEN = ("STREAM.MSG", "CONSUMER.DURABLE")
_PAGE = {"total": 0, "offset": 0, "limit": 0}
# What the reference adds to the error of these endpoints (its empty response fields).
_EXTRA: dict[str, dict[str, Any]] = {
    "STREAM.INFO": _PAGE,
    "STREAM.NAMES": {**_PAGE, "streams": None},
    "STREAM.LIST": {**_PAGE, "streams": []},
    "CONSUMER.NAMES": {**_PAGE, "consumers": []},
    "CONSUMER.LIST": {**_PAGE, "consumers": []},
}

EngineFactory = Callable[[Account, AccountMessaging], "JetStream"]


class AccountJetStreams:
    """Engines of the non-global accounts, and the responders of accounts without one."""

    def __init__(self, server: Server, build: EngineFactory) -> None:
        self._server = server
        self._build = build
        self._engines: list[JetStream] = []
        self._refusals: dict[str, object] = {}  # account name -> its refusal subscription
        self._starting: set[asyncio.Task[None]] = set()
        self._pending: set[str] = set()  # accounts whose engine is starting
        self._importers = _api_importers(server.opts.accounts)
        for account in server.accounts:
            if not account.jetstream_enabled:
                continue
            if account is server.accounts.global_account:
                account.jetstream = server.jetstream
                continue
            account.jetstream = build(account, AccountMessaging(server, account))
            account.jetstream.limits = account.limits.jetstream
            self._engines.append(account.jetstream)

    async def start(self) -> None:
        for engine in self._engines:
            await engine.start()
        self._server.accounts.every(self._refuse)  # operator mode's accounts come later

    def _refuse(self, account: Account) -> None:
        if account.jetstream is None and account.name not in self._importers:
            system = account is self._server.accounts.system_account
            refuse = _refuser(self._server, account, system=system)
            self._refusals[account.name] = self._server.subscribe(
                API_PREFIX + ">", refuse, account=account
            )

    def enable(self, account: Account) -> None:
        """Give a running server's account an engine (operator mode: a pushed account JWT
        that allows JetStream, or a reload); the refusal answers until the engine has
        started. In a cluster the engine joins it, and hosts what the meta group assigned
        here."""
        if account.jetstream is not None or account.name in self._pending:
            return
        self._pending.add(account.name)
        engine = self._build(account, AccountMessaging(self._server, account))
        engine.limits = account.limits.jetstream
        cluster = self._server.jetstream_cluster
        if cluster is not None:
            cluster.adopt(engine)
        account.jetstream_enabled = True
        task = asyncio.get_running_loop().create_task(self._start(account, engine))
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    def disable(self, account: Account) -> None:
        """A config reload took the account's JetStream away: its engine stops (its
        streams stay on disk for when it is enabled again) and the refusal answers."""
        engine = account.jetstream
        if engine is None or account is self._server.accounts.global_account:
            return
        account.jetstream, account.jetstream_enabled = None, False
        if engine in self._engines:
            self._engines.remove(engine)
        if self._server.jetstream_cluster is not None:
            self._server.jetstream_cluster.release(account.name)
        self._refuse(account)
        task = asyncio.get_running_loop().create_task(engine.stop())
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    async def _start(self, account: Account, engine: JetStream) -> None:
        try:
            await engine.start()
        finally:
            self._pending.discard(account.name)
        if not account.jetstream_enabled:  # switched off again meanwhile
            await engine.stop()
            return
        self._engines.append(engine)
        account.jetstream = engine
        refusal = self._refusals.pop(account.name, None)
        if refusal is not None:
            self._server.unsubscribe(refusal)
        if self._server.jetstream_cluster is not None:
            self._server.jetstream_cluster.host_assigned(account.name)

    async def stop(self) -> None:
        for token in self._refusals.values():
            self._server.unsubscribe(token)
        self._refusals = {}
        for engine in self._engines:
            await engine.stop()

    def engines(self) -> list[JetStream]:
        """Every running engine, the global account's first when it has one."""
        return [a.jetstream for a in self._server.accounts if a.jetstream is not None]


def _api_importers(configs: tuple[AccountConfig, ...]) -> set[str]:
    """Accounts that import another's JetStream API on their own `$JS.API.…` subjects:
    the import answers them, not the refusal."""
    return {
        config.name
        for config in configs
        for imp in config.imports
        if imp.service and subjects_overlap(imp.to or imp.subject, API_PREFIX + ">")
    }


def _refuser(
    server: Server, account: Account, *, system: bool
) -> Callable[[str, str | None, Any, bytes], None]:
    # Clustered, the system account's META and SERVER requests are the meta leader's.
    served = ("$JS.API.META.", "$JS.API.SERVER.") if system and server.cluster else ()

    def refuse(subject: str, reply: str | None, hdr: bytes | None, data: bytes) -> None:
        if reply and not subject.startswith(served):
            body = json.dumps(refusal(subject, system=system), separators=(",", ":")).encode()
            server.publish(reply, None, None, body, account=account)

    return refuse


def refusal(subject: str, *, system: bool = False) -> dict[str, Any]:
    """The reference's answer to an API request in an account without JetStream: the
    endpoint's response type with the 10039 error (and empty paging for the lists); the
    system account answers all but INFO as a `system_response`."""
    tokens = subject[len(API_PREFIX) :].split(".")
    head = ".".join(tokens[:2])
    if tokens == ["INFO"]:
        words = ["ACCOUNT", "INFO"]
    elif system:
        return {"type": _TYPE + "system_response", "error": NOT_ENABLED}
    elif head in _THREE_TOKEN and len(tokens) > 2:
        words = tokens[:3] if head == "STREAM.MSG" else [tokens[0], tokens[2]]
    elif tokens[0] in ("STREAM", "CONSUMER"):
        words = tokens[:2]
    else:
        words = tokens[:1]
    doc: dict[str, Any] = {
        "type": _TYPE + "_".join(w.lower() for w in words) + "_response",
        "error": NOT_ENABLED,
    }
    doc.update(_EXTRA.get(head, {}))
    return doc
