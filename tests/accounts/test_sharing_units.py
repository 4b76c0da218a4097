"""Reply mappings without sockets: a singleton's reply subject takes one answer, a
stream's takes answers until its threshold passes, and expired ones are swept."""

from __future__ import annotations

from typing import Any

import pytest

from ingest.server.accounts import sharing as sharing_module
from ingest.server.accounts.registry import Account
from ingest.server.accounts.sharing import ReplyMap, Sharing
from ingest.server.sublist import Sublist


class FakeServer:
    """What `Sharing` uses of the server: subscriptions, announcements, routing."""

    def __init__(self) -> None:
        self.sender: Any = None
        self.routed = b""
        self.callbacks: dict[str, Any] = {}
        self.routes: list[tuple[str, bytes, bytes]] = []

    def subscribe(self, subject: str, callback: Any, *, account: Account) -> str:
        self.callbacks[subject] = callback
        return subject

    def announce(self, token: object) -> None:
        pass

    def route(self, sender: Any, subject: bytes, reply: bytes, *args: Any, **kw: Any) -> bool:
        self.routes.append((kw["account"].name, subject, reply))
        return True

    def answer(self, reply: bytes, data: bytes = b"x", back: str | None = None) -> None:
        """A responder publishing to a mapped reply subject."""
        self.routed = reply
        self.callbacks[reply.decode().rsplit(".", 1)[0] + ".>"](reply.decode(), back, None, data)


def account(name: str) -> Account:
    return Account(name, Sublist(), jetstream_enabled=False)


@pytest.fixture
def parts() -> tuple[FakeServer, ReplyMap, Account]:
    server = FakeServer()
    exporter, importer = account("A"), account("B")
    return server, ReplyMap(Sharing(server, ()), exporter), importer  # type: ignore[arg-type]


def test_a_singleton_reply_takes_one_answer(parts: tuple[FakeServer, ReplyMap, Account]) -> None:
    server, replies, importer = parts
    mapped = replies.add(importer, b"_INBOX.b.1", once=True, threshold=120)
    assert mapped.startswith(replies.prefix.encode()) and b"_INBOX" not in mapped
    server.answer(mapped, back="$JS.ACK.x")
    server.answer(mapped)
    assert server.routes == [("B", b"_INBOX.b.1", b"$JS.ACK.x")]
    assert len(replies) == 0


def test_a_stream_reply_lasts_until_its_threshold(
    parts: tuple[FakeServer, ReplyMap, Account], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, replies, importer = parts
    now = [1000.0]
    monkeypatch.setattr(sharing_module.time, "monotonic", lambda: now[0])
    mapped = replies.add(importer, b"_INBOX.b.2", once=False, threshold=5)
    server.answer(mapped)
    now[0] += 4  # each answer moves the threshold on
    server.answer(mapped)
    now[0] += 4
    server.answer(mapped)
    now[0] += 6
    server.answer(mapped)  # silent for longer than the threshold: gone
    assert len(server.routes) == 3 and len(replies) == 0


def test_expired_mappings_are_swept(
    parts: tuple[FakeServer, ReplyMap, Account], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, replies, importer = parts
    monkeypatch.setattr(sharing_module.time, "monotonic", lambda: 1000.0)
    replies.add(importer, b"_INBOX.b.3", once=True, threshold=10)
    kept = replies.add(importer, b"_INBOX.b.4", once=True, threshold=60)
    replies.sweep(1030.0)
    assert len(replies) == 1
    server.answer(kept)
    assert server.routes == [("B", b"_INBOX.b.4", b"")]
