"""Accounts without sockets: the config section, who logs in where, which accounts get
JetStream, the refusal documents, and interest kept per account for routes."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.parser.routes import RouteCodec, RSub, RUnsub
from ingest.server.accounts.jetstream import refusal
from ingest.server.accounts.registry import Accounts
from ingest.server.auth.authenticator import Authenticator, AuthError
from ingest.server.cluster.interest import LocalInterest, RemoteInterestMap
from ingest.server.options import ConfigError, Options, load_config, validate_options
from ingest.server.sublist import Sublist

CONFIG = """
authorization { users [ {user: g, password: g} ] }
accounts {
  A { users [ {user: a, password: pa, permissions: {publish: "x.>"}} ], jetstream: enabled }
  B { users [ {user: b, password: pb} ] }
  SYS { users [ {user: sys, password: ps} ] }
}
system_account: SYS
no_auth_user: b
"""


def load(tmp_path: Path, text: str) -> Options:
    path = tmp_path / "server.conf"
    path.write_text(text)
    return load_config(str(path))


def test_accounts_section_is_read(tmp_path: Path) -> None:
    opts = load(tmp_path, CONFIG)
    assert [(a.name, a.jetstream, [u.user for u in a.users]) for a in opts.accounts] == [
        ("A", True, ["a"]),
        ("B", False, ["b"]),
        ("SYS", False, ["sys"]),
    ]
    assert opts.system_account == "SYS"
    perms = opts.accounts[0].users[0].permissions
    assert perms is not None and perms.publish is not None and perms.publish.allow == ("x.>",)
    validate_options(opts)  # no_auth_user may name an account's user


def test_an_array_names_accounts_without_users(tmp_path: Path) -> None:
    opts = load(tmp_path, "accounts [ A, B ]")
    assert [(a.name, a.users) for a in opts.accounts] == [("A", ()), ("B", ())]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "accounts { A { users [ {user: a, password: a} ] }, "
            "B { users [ {user: a, password: b} ] } }",
            'Duplicate user "a" detected',
        ),
        (
            "authorization { users [ {user: a, password: x} ] }\n"
            "accounts { A { users [ {user: a, password: a} ] } }",
            'Duplicate user "a" detected',
        ),
        ("accounts { A { users [ {user: a}, {user: a} ] } }", 'Duplicate user "a" detected'),
        ("accounts { $G { users [ {user: a} ] } }", '"$G" is a Reserved Account'),
        ("accounts { A: 3 }", "Expected map entries for accounts"),
        ("accounts { A { foo: 1 } }", 'unknown field "foo"'),
        ("accounts { A { users [ {password: a} ] } }", "User entry requires a user"),
        ("accounts { A { mappings: {} } }", "not supported by jetlake yet"),
    ],
)
def test_config_errors_name_the_place(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text)
    assert message in str(caught.value)
    assert str(caught.value).startswith(str(tmp_path))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("accounts { A { jetstream: maybe } }", "Expected 'enabled' or 'disabled'"),
        ("accounts { A { users: 1 } }", "Expected users field to be an array, got 1"),
    ],
)
def test_config_errors_without_a_place(tmp_path: Path, text: str, message: str) -> None:
    """The reference reports these two without a file position."""
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "accounts { A { users [ {user: a, password: a} ] } }\nsystem_account: NOPE",
            "error resolving system account: account missing",
        ),
        (
            "accounts { A { users [ {user: a, password: a} ] } }\nno_auth_user: zz",
            'no_auth_user: "zz" not present as user or nkey',
        ),
        (
            "accounts { A { users [ {user: a, password: a} ] } }\n"
            "authorization { users [ {user: a, password: x} ] }",
            'Duplicate user "a" detected',
        ),
    ],
)
def test_start_time_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_options(load(tmp_path, text))


def test_users_log_in_to_their_account(tmp_path: Path) -> None:
    auth = Authenticator(load(tmp_path, CONFIG))
    assert auth.authenticate({"user": "a", "pass": "pa"}).account == "A"
    assert auth.authenticate({"user": "a", "pass": "pa"}).pub_allow == ("x.>",)
    assert auth.authenticate({"user": "g", "pass": "g"}).account == "$G"
    assert auth.authenticate({}).account == "B"  # no_auth_user
    with pytest.raises(AuthError):
        auth.authenticate({"user": "a", "pass": "pb"})


def test_jetstream_goes_to_the_accounts_that_ask(tmp_path: Path) -> None:
    accounts = Accounts(load(tmp_path, CONFIG), Sublist(), jetstream=True)
    enabled = {a.name for a in accounts if a.jetstream_enabled}
    assert enabled == {"A"}
    assert accounts.system_account.name == "SYS"
    assert {a.name for a in accounts} == {"$G", "A", "B", "SYS"}
    assert len({id(a.sublist) for a in accounts}) == 4


def test_a_system_account_alone_leaves_jetstream_to_the_global_account(tmp_path: Path) -> None:
    text = "accounts { SYS { users [ {user: s, password: s} ] } }\nsystem_account: SYS"
    accounts = Accounts(load(tmp_path, text), Sublist(), jetstream=True)
    assert {a.name for a in accounts if a.jetstream_enabled} == {"$G"}


def test_without_accounts_the_global_account_has_jetstream_and_sys_exists() -> None:
    sublist: Sublist[object] = Sublist()
    accounts = Accounts(Options(), sublist, jetstream=True)
    assert accounts.global_account.jetstream_enabled
    assert accounts.global_account.sublist is sublist
    assert accounts.system_account.name == "$SYS"
    assert not Accounts(Options(), sublist, jetstream=False).global_account.jetstream_enabled


@pytest.mark.parametrize(
    ("subject", "kind"),
    [
        ("$JS.API.INFO", "account_info_response"),
        ("$JS.API.STREAM.CREATE.X", "stream_create_response"),
        ("$JS.API.STREAM.MSG.GET.X", "stream_msg_get_response"),
        ("$JS.API.CONSUMER.DURABLE.CREATE.X.D", "consumer_create_response"),
        ("$JS.API.CONSUMER.INFO.X.D", "consumer_info_response"),
    ],
)
def test_refusal_names_the_endpoint(subject: str, kind: str) -> None:
    assert refusal(subject) == {
        "type": "io.nats.jetstream.api.v1." + kind,
        "error": {
            "code": 503,
            "err_code": 10039,
            "description": "JetStream not enabled for account",
        },
    }


@pytest.mark.parametrize(
    ("subject", "extra"),
    [
        ("$JS.API.STREAM.INFO.S", {}),
        ("$JS.API.STREAM.NAMES", {"streams": None}),
        ("$JS.API.STREAM.LIST", {"streams": []}),
        ("$JS.API.CONSUMER.NAMES.S", {"consumers": []}),
    ],
)
def test_refusal_of_a_list_carries_empty_paging(subject: str, extra: dict[str, object]) -> None:
    doc = refusal(subject)
    assert {k: v for k, v in doc.items() if k not in ("type", "error")} == {
        "total": 0,
        "offset": 0,
        "limit": 0,
        **extra,
    }


def test_the_system_account_refuses_with_a_system_response() -> None:
    assert refusal("$JS.API.STREAM.LIST", system=True)["type"].endswith(".system_response")
    info = refusal("$JS.API.INFO", system=True)
    assert info["type"].endswith(".account_info_response")


def lines(data: bytes | None) -> list[object]:
    return RouteCodec().receive(data) if data else []


def test_local_interest_is_announced_in_its_account() -> None:
    local = LocalInterest()
    assert lines(local.added("foo", None, "A")) == [RSub("A", "foo", None, 0)]
    assert lines(local.added("foo", None, "B")) == [RSub("B", "foo", None, 0)]
    assert lines(local.removed("foo", None, "A")) == [RUnsub("A", "foo", None)]
    assert lines(local.snapshot()) == [RSub("B", "foo", None, 0)]


def test_remote_interest_routes_only_within_its_account() -> None:
    remote: RemoteInterestMap[str] = RemoteInterestMap()
    remote.add("P1", "foo", None, 0, "A")
    remote.add("P2", "foo", None, 0, "B")
    decision = remote.forwarding(b"foo", "A")
    assert decision is not None and decision.targets() == {"P1": []}
    assert remote.forwarding(b"foo", "C") is None
    assert remote.forwarding(b"foo") is None  # nothing in $G
    remote.drop("P1")
    assert remote.forwarding(b"foo", "A") is None
    assert remote.count("P2") == 1 and remote.subjects("P2") == ["foo"]
