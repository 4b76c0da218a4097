"""Sourcing inside one server: committed messages of origin streams copied into the streams
that name them in `sources`.

Origins are local streams (no `external`), so instead of the reference's
internal consumer and flow control, a link listens to the origin's commits
and copies each message as it commits; on linking it first catches up from
the sourcing stream's recorded progress (the `Nats-Stream-Source` header of
its newest copy) or from the configured start. A link waits for an origin
that does not exist yet and is dropped when either stream goes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ingest.parser.headers import header_value
from ingest.parser.subjects import subject_matches
from log.config import StreamConfig
from log.segments.api import StoredMsg
from log.sources import (
    SOURCE_HEADER,
    StreamSource,
    check_cycle,
    parse_source_header,
    stream_identity,
)
from log.stream import Stream
from log.timefmt import now_ns

HeaderReader = Callable[[bytes], Mapping[str, list[str]]]
_HEADER = SOURCE_HEADER.encode()


class _Link:
    """One source of one sourcing stream."""

    def __init__(self, target: Stream, source: StreamSource, read_headers: HeaderReader) -> None:
        self.target = target
        self.source = source
        self.origin: Stream | None = None
        self.copied = 0  # origin seq of the newest copy
        self.last_active = 0
        self._read_headers = read_headers
        self._rules = source.compile()
        self._ident = ""

    def attach(self, origin: Stream, progress: tuple[int, str]) -> None:
        """Catch up from progress (or the configured start), then follow commits.

        Progress recorded against another identity came from an origin since deleted
        and recreated: its sequences started over, so copying does too."""
        self.origin = origin
        self._ident = stream_identity(origin.created_ns)
        self.copied = progress[0] if progress[1] in ("", self._ident) else 0
        start = self.copied + 1 if self.copied else self._start(origin)
        msg = origin.store.load_next(start)
        while msg is not None and msg.seq <= origin.committed_seq:
            self._copy(msg)
            msg = origin.store.load_next(msg.seq + 1)
        self.copied = max(self.copied, min(origin.committed_seq, origin.last_seq))
        origin.add_commit_listener(self._on_commit)

    def detach(self) -> None:
        if self.origin is not None:
            self.origin.remove_commit_listener(self._on_commit)
            self.origin = None

    def _start(self, origin: Stream) -> int:
        if self.source.opt_start_seq:
            return self.source.opt_start_seq
        if self.source.opt_start_time:
            msg = origin.store.load_next(0)
            while msg is not None and msg.ts < self.source.opt_start_time:
                msg = origin.store.load_next(msg.seq + 1)
            return msg.seq if msg is not None else origin.last_seq + 1
        return 1

    def _on_commit(self, seq: int, subject: str) -> None:
        if seq <= self.copied or self.origin is None:
            return
        msg = self.origin.store.load(seq)
        if msg is not None:
            self._copy(msg)
        self.copied = seq

    def _copy(self, msg: StoredMsg) -> None:
        subject = self._subject(msg.subject)
        self.copied = msg.seq
        self.last_active = now_ns()
        if subject is None:
            return
        value = self.source.header(msg.seq, msg.subject, self._ident)
        stamp = f"{SOURCE_HEADER}: {value}\r\n\r\n".encode()
        base = _copied_headers(msg.hdr) if msg.hdr else b"NATS/1.0\r\n\r\n"
        hdr = base[:-2] + stamp
        self.target.publish(subject, hdr, msg.data, self._read_headers(hdr), None)

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

    def state(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.source.name}
        lag = (self.origin.last_seq - self.copied) if self.origin is not None else 0
        out["lag"] = max(lag, 0)
        out["active"] = now_ns() - self.last_active if self.last_active else -1
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

    def __init__(self, streams: Mapping[str, Stream], read_headers: HeaderReader) -> None:
        self._streams = streams
        self._read_headers = read_headers
        self._links: dict[str, list[_Link]] = {}  # by sourcing stream

    def check_cycle(self, config: StreamConfig) -> None:
        others = {n: s.config for n, s in self._streams.items() if n != config.name}
        check_cycle(config.name, config.sources, others)

    def open(self, target: Stream) -> None:
        """(Re)link a stream's sources after it is opened or updated."""
        self.close(target.name)
        if target.config.sources:
            self._links[target.name] = [
                _Link(target, source, self._read_headers) for source in target.config.sources
            ]
        self.refresh()

    def close(self, name: str) -> None:
        """A stream goes: its own links, and links that read from it."""
        for link in self._links.pop(name, []):
            link.detach()
        for links in self._links.values():
            for link in links:
                if link.origin is not None and link.origin.name == name:
                    link.detach()

    def refresh(self) -> None:
        """Attach links whose origin exists now."""
        for name, links in self._links.items():
            waiting = [link for link in links if link.origin is None]
            if not waiting:
                continue
            progress = self._progress(self._streams[name])
            for link in waiting:
                origin = self._streams.get(link.source.name)
                if origin is not None:
                    link.attach(origin, progress.get(link.source.index_name, (0, "")))

    def _progress(self, target: Stream) -> dict[str, tuple[int, str]]:
        """(origin seq, origin identity) of the newest copy per source, from the copies."""
        found: dict[str, tuple[int, str]] = {}
        for msg in target.store.with_header(SOURCE_HEADER):  # in seq order: the newest wins
            value = header_value(msg.hdr, _HEADER) if msg.hdr else None
            parsed = parse_source_header(value.decode()) if value else None
            if parsed is not None:
                found[parsed[0]] = (parsed[1], parsed[2])
        return found

    def state(self, name: str) -> list[dict[str, Any]]:
        return [link.state() for link in self._links.get(name, [])]
