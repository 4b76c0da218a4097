"""A config user's `allow_responses`, differentially: the same answers allowed and
refused as for a JWT user's `resp`, and the reference's errors for a bad value."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ingest.server.options import ConfigError, load_config
from tests.conftest import Connect, ServerPool
from tests.leafnode.test_config import refusal
from tests.support.raw import RawClient
from tests.support.responses import two_answers_within_a_second

CONFIG = """
authorization {
  users: [
    { user: asker, password: pw }
    { user: responder, password: pw, permissions: {
        subscribe: "req.>", allow_responses: { max: 2, expires: "1s" } } }
  ]
}
"""


async def test_a_responder_answers_twice_within_a_second(
    server_kind: str, server_pool: ServerPool, connect: Connect
) -> None:
    server = server_pool.get(server_kind, config=CONFIG)
    requester = await connect(server, user="asker", password="pw")
    async with await RawClient.connect(server.host, server.port) as client:
        await client.handshake(user="responder", **{"pass": "pw"})
        await two_answers_within_a_second(requester, client)


BAD = [
    ("{ max: 1, expires: 5 }", "error parsing expires, not a duration string"),
    ("{ max: 1, bogus: 1 }", 'Unknown field "bogus" parsing permissions'),
    ('"yes"', "error parsing response permissions, expected a boolean or a map"),
]


def _config(tmp_path: Path, value: str) -> Path:
    user = f"{{ user: a, password: b, permissions: {{ allow_responses: {value} }} }}"
    config = tmp_path / "server.conf"
    config.write_text(f"authorization {{ users: [ {user} ] }}\n")
    return config


@pytest.mark.soak  # a jetlake start refused costs 3 s; the words are checked below too
@pytest.mark.parametrize(("value", "error"), BAD[:1])
def test_a_bad_value_is_refused(server_kind: str, tmp_path: Path, value: str, error: str) -> None:
    assert refusal(server_kind, _config(tmp_path, value)) == error


@pytest.mark.parametrize(("value", "error"), BAD)
def test_bad_values_are_refused_as_the_reference_words_them(
    tmp_path: Path, value: str, error: str
) -> None:
    """The same refusals read without starting a server (the reference's words were taken
    from it, the first case is checked against it above)."""
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_config(str(_config(tmp_path, value)))


def test_allow_responses_read(tmp_path: Path) -> None:
    users = load_config(str(_config(tmp_path, '{ max: -1, ttl: "5s" }'))).users
    assert users[0].permissions is not None and users[0].permissions.responses == (-1, 5.0)
    users = load_config(str(_config(tmp_path, "false"))).users
    assert users[0].permissions is not None and users[0].permissions.responses is None
