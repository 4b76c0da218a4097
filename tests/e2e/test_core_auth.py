"""Authentication and permissions, seen by nats-py and on the wire.

Bad credentials end the connection with ``-ERR 'Authorization Violation'``;
permission violations are reported with ``-ERR 'Permissions Violation for
...'`` and the connection is KEPT (nats-py hands them to the error callback
and stays connected). Exact texts observed on nats-server 2.15.1.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from nats.errors import AuthorizationError
from nats.errors import Error as NatsError

from tests.conftest import Connect, MakeServer
from tests.support.clients import barrier, drain_pending, sync
from tests.support.raw import Outcome, RawClient
from tests.support.servers import ServerProcess

AUTH_VIOLATION = b"-ERR 'Authorization Violation'"

USERS_CONFIG = """
authorization {
  users = [
    {user: a, password: b, permissions: {
      publish: {allow: ["foo.>"]}, subscribe: {deny: ["secret"]}
    }}
    {user: pub, password: p}
  ]
}
no_auth_user: pub
"""


async def raw_outcome(server: ServerProcess, script: bytes) -> tuple[dict, Outcome]:
    """INFO of a fresh connection and the outcome of ``script`` on it."""
    async with await RawClient.connect(server.host, server.port) as c:
        return c.info, await c.outcome(script)


async def expect_auth_failure(server: ServerProcess, **options: object) -> None:
    """nats-py must refuse to connect, naming the authorization violation."""
    import nats

    with pytest.raises(NatsError) as failure:
        await nats.connect(
            server.url, allow_reconnect=False, connect_timeout=2, error_cb=_ignore, **options
        )
    err = failure.value
    assert isinstance(err, AuthorizationError) or "Authorization Violation" in str(err), err


async def _ignore(exc: Exception) -> None:
    """nats-py reports the refusal through the callback as well as by raising."""


async def test_token(make_server: MakeServer, connect: Connect) -> None:
    """--auth: the right token connects, a wrong or missing one is refused."""
    server = make_server("--auth", "s3cret")
    nc = await connect(server, token="s3cret")
    assert nc.is_connected
    await expect_auth_failure(server, token="wrong")
    await expect_auth_failure(server)
    info, got = await raw_outcome(server, b'CONNECT {"verbose":false,"auth_token":"bad"}\r\n')
    assert info["auth_required"] is True
    assert got == Outcome((AUTH_VIOLATION,), closed=True)
    # Anything but CONNECT first is an authorization violation too.
    _, got = await raw_outcome(server, b"PUB foo 1\r\na\r\n")
    assert got == Outcome((AUTH_VIOLATION,), closed=True)


async def test_user_password(make_server: MakeServer, connect: Connect) -> None:
    """--user/--pass: right credentials connect (also in the URL), wrong are refused."""
    server = make_server("--user", "u", "--pass", "p")
    nc = await connect(server, user="u", password="p")
    assert nc.is_connected
    nc2 = await connect(f"nats://u:p@{server.host}:{server.port}")
    assert nc2.is_connected
    await expect_auth_failure(server, user="u", password="nope")
    _, got = await raw_outcome(server, b'CONNECT {"verbose":false,"user":"u","pass":"x"}\r\n')
    assert got == Outcome((AUTH_VIOLATION,), closed=True)


async def test_users_config_auth(make_server: MakeServer, connect: Connect) -> None:
    """Users from the config file; an unknown user is refused; no_auth_user applies."""
    server = make_server(config=USERS_CONFIG)
    nc = await connect(server, user="a", password="b")
    assert nc.is_connected
    await expect_auth_failure(server, user="a", password="wrong")
    await expect_auth_failure(server, user="zz", password="b")
    anonymous = await connect(server)  # becomes "pub" through no_auth_user
    await anonymous.publish("anything", b"ok")
    await sync(anonymous)


async def test_permission_violations_are_reported_and_kept(
    make_server: MakeServer, connect: Connect
) -> None:
    """Denied publish/subscribe: the error callback gets the exact text; the client stays."""
    server = make_server(config=USERS_CONFIG)
    errors: asyncio.Queue[Exception] = asyncio.Queue()

    async def on_error(exc: Exception) -> None:
        errors.put_nowait(exc)

    nc = await connect(server, user="a", password="b", error_cb=on_error)
    await nc.publish("x", b"denied")
    err = await asyncio.wait_for(errors.get(), 5)
    # nats-py lower-cases the server's text before handing it on.
    assert str(err) == 'nats: permissions violation for publish to "x"'
    await nc.subscribe("secret")
    err = await asyncio.wait_for(errors.get(), 5)
    assert str(err) == 'nats: permissions violation for subscription to "secret"'
    # Still connected and working.
    sub = await nc.subscribe("foo.ok")
    await nc.publish("foo.ok", b"allowed")
    msg = await sub.next_msg(timeout=5)
    assert msg.data == b"allowed"
    assert nc.is_connected and errors.empty()


async def test_permission_violation_wire_text(make_server: MakeServer) -> None:
    """Exact -ERR lines; the connection survives every one of them."""
    server = make_server(config=USERS_CONFIG)
    login = b'CONNECT {"verbose":false,"user":"a","pass":"b"}\r\n'
    cases = {
        b"PUB x 1\r\na\r\n": b"-ERR 'Permissions Violation for Publish to \"x\"'",
        b"SUB secret 1\r\n": b"-ERR 'Permissions Violation for Subscription to \"secret\"'",
        b"SUB secret q 1\r\n": (
            b'-ERR \'Permissions Violation for Subscription to "secret" using queue "q"\''
        ),
        b"PUB foo.x 1\r\na\r\n": None,
        b"SUB > 1\r\n": None,
    }
    for script, err in cases.items():
        _, got = await raw_outcome(server, login + script)
        assert got == Outcome((err,) if err else (), closed=False), script


async def test_subscribe_deny_filters_wildcard_delivery(
    make_server: MakeServer, connect: Connect
) -> None:
    """A wildcard subscription is allowed but denied subjects are not delivered on it."""
    server = make_server(config=USERS_CONFIG)
    a = await connect(server, user="a", password="b")
    publisher = await connect(server, user="pub", password="p")
    everything = await a.subscribe(">")
    await sync(a)
    for subject in ("secret", "foo.y", "secret.z"):
        await publisher.publish(subject, b"1")
    await barrier(publisher, a)
    assert [m.subject for m in await drain_pending(everything)] == ["foo.y", "secret.z"]


async def test_user_info_names_the_requester(
    make_server: MakeServer, connect: Connect, server_kind: str
) -> None:
    """`$SYS.REQ.USER.INFO` (what `nats account info` asks) answers about the connection
    that sent it: its user, the global account, and the permissions that restrict it."""
    config = USERS_CONFIG.replace('allow: ["foo.>"]', 'allow: ["foo.>", "$SYS.REQ.USER.INFO"]')
    answers, envelopes = [], []
    for kind in (server_kind, "nats-server"):
        server = make_server(config=config, kind=kind)
        for credentials in ({}, {"user": "a", "password": "b"}):
            nc = await connect(server, **credentials)
            reply = await nc.request("$SYS.REQ.USER.INFO", b"", timeout=5)
            doc = json.loads(reply.data)
            for lists in doc["data"].get("permissions", {}).values():
                for name in lists:  # the reference lists them in its map order, at random
                    lists[name].sort()
            answers.append(doc["data"])
            envelopes.append({k: type(v).__name__ for k, v in doc["server"].items()})
    mine, ref = answers[:2], answers[2:]
    assert mine == ref
    assert envelopes[0].items() <= envelopes[2].items()  # the reference adds feature_flags
    assert ref[0] == {"user": "pub", "account": "$G", "account_name": "$G"}
    assert ref[1]["permissions"]["subscribe"] == {"deny": ["secret"]}
