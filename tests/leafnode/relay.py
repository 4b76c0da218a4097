"""A TCP relay a test cuts and restores: a leafnode link through it goes down and comes
back at the test's command."""

from __future__ import annotations

import asyncio
import contextlib


class Relay:
    """A TCP relay to `target` on `port` that the test can cut and restore."""

    def __init__(self, port: int, target: int) -> None:
        self.port = port
        self.target = target
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._upstream: set[asyncio.StreamWriter] = set()  # the relay's ends toward `target`

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def cut(self, *, silently: bool = False) -> None:
        """Refuse new connections and abort the open ones; `silently` leaves the target's
        side open, as a network that went away without a word would."""
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        self._server = None
        for writer in list(self._writers):
            if not (silently and writer in self._upstream):
                writer.transport.abort()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        self._upstream.add(up_writer)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        if writer in self._writers:  # a silent cut leaves the other end hanging
            writer.transport.abort()
        self._writers.discard(writer)
        self._upstream.discard(writer)
