"""A Python client of SQL over NATS (`sql.nats_door.service`): one query, its result as Arrow.

    table = await query(nc, "SELECT subject, count(*) FROM ORDERS GROUP BY 1")

Any NATS client can do what this does: publish the SQL to `$JL.SQL.query` with a
reply inbox, answer each chunk (an empty publish to its reply subject, which is
the flow control), read each chunk as an Arrow IPC stream, and stop at the message
with `Jl-Sql-Rows`, or at an error's `Nats-Service-Error`. With no service on the
subject, the server answers the request with a status 503 (no responders) at once. A
query given up on (a timeout, a cancelled task: Ctrl-C) is called off, so the service
stops its Spark jobs (`sql.nats_door.cancel`); it asks for heartbeats and answers each, so a
client that died without calling off (killed, its connection lost) has its query stopped
too, at the service's next heartbeat (a few, from another account through an import).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import TYPE_CHECKING

import pyarrow as pa
from nats.errors import NoRespondersError

from sql.nats_door.cancel import HEARTBEAT, QUERY_ID, cancel_subject

ENGINE = "Jl-Sql-Engine"  # spark (the default) or duckdb (`sql.nats_door.duck_engine`)

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg

SUBJECT = "$JL.SQL.query"
BEAT = 1.0  # seconds between the service's heartbeats: its watch of this client


class SqlError(Exception):
    """The service refused or failed the query; `code` is its Nats-Service-Error-Code."""

    def __init__(self, code: str, text: str) -> None:
        super().__init__(f"{code}: {text}")
        self.code = code
        self.text = text


async def query(
    nc: Client,
    sql: str,
    *,
    timeout: float | None = 60.0,
    headers: dict[str, str] | None = None,
) -> pa.Table:
    """The whole result of `sql`; SqlError when the service answers with an error,
    NoRespondersError when no service listens, TimeoutError when it has not finished
    within `timeout` seconds (None: no limit); given up on, the query is cancelled."""
    chunks: list[pa.Table] = []
    done: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()

    async def on_msg(msg: Msg) -> None:
        found = msg.headers or {}
        if HEARTBEAT in found:  # the query still runs; answered, so the service sees us stay
            if msg.reply:
                await msg.respond(b"")
            return
        if "Jl-Sql-Chunk" in found:
            chunks.append(pa.ipc.open_stream(msg.data).read_all())
            await msg.respond(b"")
        elif not done.done():
            done.set_result(msg)

    called = uuid.uuid4().hex
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=on_msg)
    try:
        await nc.publish(
            SUBJECT,
            sql.encode(),
            reply=inbox,
            headers={HEARTBEAT: f"{BEAT:g}", **(headers or {}), QUERY_ID: called},
        )
        end = await asyncio.wait_for(done, timeout)
    except BaseException:  # given up on (TimeoutError, CancelledError): the service stops it
        with contextlib.suppress(Exception):
            await nc.publish(cancel_subject(called), b"")
            await nc.flush(timeout=2)
        raise
    finally:
        await sub.unsubscribe()
    found = end.headers or {}
    if found.get("Status") == "503":
        raise NoRespondersError
    if "Nats-Service-Error" in found:
        raise SqlError(found.get("Nats-Service-Error-Code", ""), found["Nats-Service-Error"])
    return pa.concat_tables(chunks) if chunks else pa.table({})
