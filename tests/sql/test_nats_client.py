"""SQL over NATS's Python client against a server with no SQL service: the server's
no-responders status is the answer, at once, on both servers (not an empty result)."""

from __future__ import annotations

import time

import nats
import pytest
from nats.errors import NoRespondersError

from sql.nats_client import query
from tests.support.servers import ServerProcess


async def test_a_query_with_no_service_fails_at_once_with_no_responders(
    server: ServerProcess,
) -> None:
    nc = await nats.connect(server.url)
    try:
        started = time.monotonic()
        with pytest.raises(NoRespondersError):
            await query(nc, "SELECT 1", timeout=10.0)
        assert time.monotonic() - started < 5.0
    finally:
        await nc.close()
