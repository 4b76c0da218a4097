"""Sourcing and mirroring: messages of origin streams copied into the streams that name
them in `sources` or `mirror`.

Every link reads its origin as the reference's durable sourcing does, through a
sourcing consumer on the origin asked for over the JetStream API
(`ingest.server.jetstream.sourcing`): on an interest or work-queue origin a
listed durable whose acknowledgements the origin waits for, so each mirror and
source gets every message; on a limits origin an unlisted reader. Going
through subjects is what lets a link reach an origin in another account (an
`external` API prefix). On (re)linking it resumes after the sourcing stream's
recorded progress (the `Nats-Stream-Source` header of its newest copy) or from
the configured start. A link waits for a local origin that does not exist yet
and is dropped when either stream goes.

A mirror's link is the same but for where a copy goes: `Stream.copy_mirrored`
stores it at the origin's seq and timestamp with its headers as they were, so
the mirror's own last seq is its progress.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from ingest.parser.headers import header_value
from ingest.parser.subjects import subject_matches
from ingest.server.jetstream.port import Messaging
from ingest.server.jetstream.sourcing import ConsumerFeed
from log import sourcing
from log.config import StreamConfig
from log.errors import ApiError
from log.segments.api import StoredMsg
from log.sources import (
    SOURCE_HEADER,
    StreamSource,
    check_cycle,
    origins,
    parse_source_header,
    stream_identity,
)
from log.streams.stream import Stream
from log.timefmt import now_ns

HeaderReader = Callable[[bytes], Mapping[str, list[str]]]
_HEADER = SOURCE_HEADER.encode()
_REFUSED = b'{"error"'


class _Link:
    """One source of one sourcing stream."""

    def __init__(
        self,
        target: Stream,
        source: StreamSource,
        read_headers: HeaderReader,
        on_caught_up: Callable[[_Link], None],
    ) -> None:
        self.target = target
        self.source = source
        self.mirror = source is target.config.mirror
        self.announced = False  # a mirror's first catch-up was reported (`Sources`)
        self.feed: ConsumerFeed | None = None  # the reader through the origin's API
        self.seen = 0  # origin seq of the newest copy: `seq` in the source's info
        self.last_active = 0
        self._read_headers = read_headers
        self._on_caught_up = on_caught_up
        self._rules = source.compile()
        self.ident = ""  # the origin's identity: on each copy, and told to the origin
        self.error: dict[str, Any] | None = None  # the origin's last refusal

    def resumed(self, origin: Stream | None, progress: tuple[int, str]) -> int:
        """The origin seq to resume after. Progress recorded against another identity came
        from an origin since deleted and recreated: its sequences started over, so copying
        does too. An origin not seen here is told the identity of the newest copy, and
        says (`10225`) if it is another."""
        if origin is None:
            self.ident = progress[1]
            return progress[0]
        self.ident = stream_identity(origin.created_ns)
        return progress[0] if progress[1] in ("", self.ident) else 0

    def read_through(self, feed: ConsumerFeed, after: int) -> None:
        """Read through a sourcing consumer from after origin seq `after`."""
        self.feed = feed
        self.seen = after
        feed.start(after, first_time=not after)

    def detach(self) -> None:
        if self.feed is not None:
            self.feed.stop()
            self.feed = None

    def caught_up(self) -> None:
        """The origin has nothing more for now (the feed says so once per catch-up)."""
        if self.mirror and not self.announced:
            self.announced = True
            self._on_caught_up(self)

    def copy(self, msg: StoredMsg) -> None:
        """Copy one origin message if the filters take it."""
        subject = self._subject(msg.subject)
        self.last_active = now_ns()
        if subject is None:
            return
        self.seen = msg.seq
        if self.mirror:
            self.target.copy_mirrored(msg.seq, subject, msg.hdr, msg.data, msg.ts)
            return
        value = self.source.header(msg.seq, msg.subject, self.ident)
        stamp = f"{SOURCE_HEADER}: {value}\r\n\r\n".encode()
        base = _copied_headers(msg.hdr) if msg.hdr else b"NATS/1.0\r\n\r\n"
        hdr = base[:-2] + stamp
        self.target.publish(subject, hdr, msg.data, self._read_headers(hdr), self._stored)

    def _stored(self, ack: bytes) -> None:
        """A copy's PubAck: a refused one must not be acknowledged to the origin."""
        if ack.startswith(_REFUSED) and self.feed is not None:
            self.feed.refused()

    def _subject(self, subject: str) -> str | None:
        for pattern, transform in self._rules:
            if transform is None:
                if pattern == ">" or subject_matches(pattern, subject):
                    return subject
                continue
            mapped = transform.match(subject)
            if mapped is not None:
                return mapped
        return None

    def _active(self) -> int:
        """Nanoseconds since the origin was last heard from (a copy or a heartbeat, at least
        every second while it lives); -1: never."""
        if not self.last_active:
            return -1
        return now_ns() - self.last_active

    def state(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.source.name}
        if self.source.external is not None:
            out["external"] = self.source.external.to_json()
        out["lag"] = self.feed.lag if self.feed is not None else 0
        if self.seen and not self.mirror:  # the reference's (2.15) last origin seq copied
            out["seq"] = self.seen
        out["active"] = self._active()
        if self.error is not None:
            out["error"] = self.error
        if self.source.filter_subject:
            out["filter_subject"] = self.source.filter_subject
        if self.source.subject_transforms:
            out["subject_transforms"] = [
                {"src": t.src, "dest": t.dest} for t in self.source.subject_transforms
            ]
        return out


_DROPPED = (_HEADER.lower() + b":", b"nats-expected-", b"nats-batch-")


def _copied_headers(hdr: bytes) -> bytes:
    """The origin's headers less what must not act twice, as in the reference: a copy of a
    copy names only its nearest origin, and expectations were met in the origin already."""
    lines = hdr.split(b"\r\n")
    return b"\r\n".join(ln for ln in lines if not ln.lower().startswith(_DROPPED))


class Sources:
    """Every link of one JetStream engine, kept in step with its stream registry."""

    def __init__(
        self,
        streams: Mapping[str, Stream],
        read_headers: HeaderReader,
        messaging: Messaging,
        account: str,
        on_caught_up: Callable[[Stream], None] = lambda mirror: None,
        *,
        clustered: Callable[[], bool] = lambda: False,
    ) -> None:
        """`on_caught_up` hears of a mirror whose first catch-up committed (once per link):
        only then may it answer its origin's direct gets, as in the reference."""
        self._streams = streams
        self._read_headers = read_headers
        self._messaging = messaging
        self._account = account
        self._is_clustered = clustered
        self._on_caught_up = on_caught_up
        self._links: dict[str, list[_Link]] = {}  # by sourcing stream

    def checked(self, config: StreamConfig) -> StreamConfig:
        """What the reference checks against the origins it can see here, in its order:
        message sizes, then cycles. A mirror of a stream seen here inherits its direct
        gets (`mirror_direct` follows the origin's `allow_direct`)."""
        for link in origins(config):
            origin = self._streams.get(link.name) if link.external is None else None
            if origin is None:
                continue
            theirs, ours = origin.config.max_msg_size, config.max_msg_size
            if 0 < ours < theirs:
                if link is config.mirror:
                    raise ApiError(400, 10030, "stream mirror must have max message size >= source")
                raise ApiError(400, 10046, "stream source must have max message size >= target")
            if link is config.mirror:
                config = dataclasses.replace(config, mirror_direct=origin.config.allow_direct)
        others = {n: s.config for n, s in self._streams.items() if n != config.name}
        check_cycle(config.name, origins(config), others)
        return config

    def open(self, target: Stream) -> None:
        """(Re)link a stream's sources or mirror after it is opened or updated."""
        self.close(target.name)
        links = origins(target.config)
        if links:
            self._links[target.name] = [
                _Link(target, source, self._read_headers, self._announce) for source in links
            ]
        # Linking waits for the loop's next turn, so the create or update answers first
        # and shows the link as not yet active (-1), as the reference's does.
        asyncio.get_running_loop().call_soon(self.refresh)

    def close(self, name: str) -> None:
        """A stream goes: its own links, and links that read from it."""
        for link in self._links.pop(name, []):
            link.detach()
        for links in self._links.values():
            for link in links:
                if link.source.external is None and link.source.name == name:
                    link.detach()  # the local origin went: its reader with it

    def retire(self, name: str, kept: StreamConfig | None) -> None:
        """A stream goes (`kept` None) or is updated to `kept`: the readers of the origins
        it no longer copies from are deleted on those origins."""
        stay = {s.index_name for s in origins(kept)} if kept is not None else set()
        for link in self._links.get(name, []):
            if link.feed is not None and link.source.index_name not in stay:
                link.feed.delete_consumer()

    @property
    def _clustered(self) -> bool:
        """Clustered, an origin may live on other servers only: it is asked for anyway."""
        return self._is_clustered()

    def follow(self, name: str) -> None:
        """A replicated stream's leadership went elsewhere: its new leader reads now."""
        for link in self._links.get(name, []):
            link.detach()

    def refresh(self) -> None:
        """Attach the links of streams led here whose origin is known: a local stream
        that exists now, or one elsewhere (behind an API prefix, or in the cluster)."""
        for name, links in self._links.items():
            target = self._streams[name]
            waiting = [link for link in links if link.feed is None]
            if not waiting or not target.accepting:
                continue
            if waiting[0].mirror:  # a mirror's numbering is its origin's: its last seq
                progress = {waiting[0].source.index_name: (target.last_seq, "")}
            else:
                progress = self._progress(target)
            for link in waiting:
                origin = self._streams.get(link.source.name) if not link.source.external else None
                if origin is None and link.source.external is None and not self._clustered:
                    continue
                done = progress.get(link.source.index_name, (0, ""))
                link.read_through(self._feed(target, link), link.resumed(origin, done))

    def _announce(self, link: _Link) -> None:
        """A mirror caught up: once its copies commit, tell the engine."""
        flushed = asyncio.ensure_future(link.target.flush())
        flushed.add_done_callback(partial(self._caught_up, link))

    def _feed(self, target: Stream, link: _Link) -> ConsumerFeed:
        kind = "mirror" if link.mirror else "src"
        name = sourcing.consumer_name(
            target.name, self._account, link.source, target.config.sources, mirror=link.mirror
        )
        metadata = {f"_nats.{kind}.stream": target.name, f"_nats.{kind}.acc": self._account}
        return ConsumerFeed(link, self._messaging, name, metadata)

    def _caught_up(self, link: _Link, flushed: asyncio.Future[None]) -> None:
        if flushed.cancelled() or flushed.exception() is not None:
            return  # the mirror closed meanwhile
        if link in self._links.get(link.target.name, ()):  # not replaced or dropped since
            self._on_caught_up(link.target)

    def _progress(self, target: Stream) -> dict[str, tuple[int, str]]:
        """(origin seq, origin identity) of the newest copy per source, from the copies."""
        found: dict[str, tuple[int, str]] = {}
        for msg in target.store.with_header(SOURCE_HEADER):  # in seq order: the newest wins
            value = header_value(msg.hdr, _HEADER) if msg.hdr else None
            parsed = parse_source_header(value.decode()) if value else None
            if parsed is not None:
                found[parsed[0]] = (parsed[1], parsed[2])
        return found

    def state(self, name: str) -> dict[str, Any]:
        """The `sources` or `mirror` block of a stream's info (empty: neither)."""
        links = self._links.get(name, [])
        if links and links[0].mirror:
            return {"mirror": links[0].state()}
        return {"sources": [link.state() for link in links]} if links else {}
