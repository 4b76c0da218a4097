"""The sans-IO parts of fetching an account at a login: how the cluster's answers are
counted, what a CONNECT names, and the reference's words for HTTP failures."""

from __future__ import annotations

import pytest

from ingest.server.auth import account_fetch
from ingest.server.auth.account_fetch import FetchError, _Lookup
from tests.support.cluster import free_port


async def test_the_first_jwt_wins_and_all_empty_means_not_found() -> None:
    lookup = _Lookup(3)
    lookup.answer(b"")
    lookup.answer(b"")
    assert not lookup.done.done()
    lookup.answer(b"JWT")
    assert lookup.done.result() == b"JWT"
    lookup.answer(b"LATER")  # a late answer changes nothing
    assert lookup.done.result() == b"JWT"
    nobody = _Lookup(2)
    nobody.answer(b"")
    nobody.answer(b"")
    assert nobody.done.result() == b""


def test_a_connect_names_its_account_only_with_a_readable_jwt() -> None:
    assert account_fetch.account_of({}) is None
    assert account_fetch.account_of({"jwt": "garbage"}) is None


def test_the_password_of_an_account_server_is_not_logged() -> None:
    assert account_fetch.redact("http://u:p@h:1/x/") == "http://u:xxxxx@h:1/x/"
    assert account_fetch.redact("http://h:1/x/") == "http://h:1/x/"


def test_an_account_server_not_listening_is_named() -> None:
    url = f"http://127.0.0.1:{free_port()}/jwt/v1/accounts/"
    message = f'could not fetch <"{url}">: Get "{url}": dial tcp 127.0.0.1:'
    with pytest.raises(FetchError, match=message.replace(".", r"\.").replace("?", r"\?")):
        account_fetch.get(url)
