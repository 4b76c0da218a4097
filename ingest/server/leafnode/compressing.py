"""A leafnode link's S2 compression: the level each side writes at, as the reference
settles it.

The mode is negotiated before CONNECT: the hub's INFO says its mode; a leaf that wants
compression answers with an INFO of its own and from then on reads and writes S2
streams; the hub, on that INFO, switches too and repeats its INFO compressed. An
`s2_auto` link picks its level from the round trip and picks again on each PONG; a
config reload changes the level of a link that runs compressed, or closes a link it
cannot change so that it is made again.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from ingest.parser import leafnodes as proto
from ingest.parser import s2
from ingest.server.compression import (
    ACCEPT,
    NOT_SUPPORTED,
    OFF,
    S2_AUTO,
    S2_UNCOMPRESSED,
    Compression,
    auto_level,
    info_mode,
    needs_compression,
    select,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from ingest.server.leafnode.manager import Leafnodes
    from ingest.server.leafnode.settings import RemoteLeaf

log = logging.getLogger("jetlake")


class LeafCompression:
    """Mixed into `LeafConnection` (before `PeerLink`, whose round-trip hook it fills),
    which owns the state named below."""

    if TYPE_CHECKING:
        leafnodes: Leafnodes
        remote: RemoteLeaf | None
        solicited: bool
        nonce: str
        cid: int
        rtt: float
        start: float
        compression: str
        _negotiated: bool
        _inflate: s2.Reader | None
        _deflate: Callable[[bytes], bytes] | None

        @property
        def where(self) -> str: ...
        def queue(self, data: bytes) -> None: ...
        def close(self, reason: str, *, flush: bool = False, abort: bool = False) -> None: ...
        def compress_output(self, deflate: Callable[[bytes], bytes]) -> None: ...

    @property
    def compression_config(self) -> Compression:
        remote = self.remote
        return remote.compression if remote is not None else self.leafnodes.config.compression

    def _negotiate(self, info: dict[str, Any]) -> bool:
        """Settle the level this side writes at from the remote's INFO `compression`;
        True when the link switched to S2 (or closed over a mode it cannot use)."""
        self._negotiated = True
        config = self.compression_config
        theirs = info.get("compression")
        theirs = theirs if isinstance(theirs, str) else ""
        if not needs_compression(config.mode):
            old = not theirs or config.mode == NOT_SUPPORTED
            self.compression = NOT_SUPPORTED if old else OFF
            return False
        try:
            chosen = select(config.mode, theirs)
        except ValueError as exc:
            log.error("%s - %s", self.where, exc)
            self.queue(proto.encode_err(str(exc)))
            self.close("Protocol Violation", flush=True)
            return True
        if chosen == S2_AUTO:  # the round trip so far: the time the INFO took
            rtt = self.rtt or time.time() - self.start
            chosen = auto_level(rtt, config.rtt_thresholds)
        self.compression = chosen
        if not needs_compression(chosen):
            return False
        info = self.leafnodes.info(self.cid, info_mode(config, chosen))
        if self.nonce:  # the INFO the leaf answers with its CONNECT: the nonce it signs
            info["nonce"] = self.nonce
        writer = s2.writer(chosen != S2_UNCOMPRESSED)
        if self.solicited:  # ours goes plain, the hub's answer comes compressed
            self.queue(proto.encode_info(info))
            self.compress_output(writer)
        else:
            self.compress_output(writer)
            self.queue(proto.encode_info(info))
        self._inflate = s2.reader()
        log.debug("%s - Leafnode compression: %s", self.where, chosen)
        return True

    def _rtt_measured(self) -> None:
        config = self.compression_config
        if config.mode != S2_AUTO or self._deflate is None:
            return
        level = auto_level(self.rtt, config.rtt_thresholds)
        if level != self.compression:
            self.compression = level
            self._deflate = s2.writer(level != S2_UNCOMPRESSED)

    def recompress(self) -> None:
        """A reload changed the mode this link was configured with. As the reference: a
        link that ran plain, or a new mode of `off` or `accept` (both negotiated), is
        closed to be made again; otherwise the writer switches to the new level."""
        config = self.compression_config
        current = self.compression
        if current in ("", NOT_SUPPORTED) or current == config.mode:
            return
        if current == OFF or config.mode in (OFF, ACCEPT):
            self.close("Client Closed", flush=True)
            return
        if config.mode == S2_AUTO:
            level = auto_level(self.rtt or time.time() - self.start, config.rtt_thresholds)
        else:
            level = config.mode
        if level != current and self._deflate is not None:
            self.compression = level
            self._deflate = s2.writer(level != S2_UNCOMPRESSED)
