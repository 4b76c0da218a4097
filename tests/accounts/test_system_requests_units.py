"""The system account's per-account answers without sockets: the imports every account
gets, who is silent for STATZ, the errors for unknown accounts, and what an INFO lists."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace
from typing import Any, cast

import pytest

from ingest.server.accounts.registry import Accounts
from ingest.server.accounts.requests import AccountRequests
from ingest.server.accounts.settings import AccountConfig, Export, Import, Latency
from ingest.server.accounts.system_imports import EXPORTS, imports
from ingest.server.cluster.ports import RequestError, Skip
from ingest.server.cluster.system_account import SystemAccount
from ingest.server.jwt.claims import Claims
from ingest.server.sublist import Sublist

CONFIGS = (
    AccountConfig(
        name="APP",
        imports=(Import(service=True, account="EXP", subject="svc.>"),
                 Import(service=False, account="EXP", subject="ev.*.*", to="got.$2.$1")),
    ),
    AccountConfig(
        name="EXP",
        exports=(Export(service=True, subject="svc.>",
                        latency=Latency(sampling=100, subject="lat.svc")),
                 Export(service=False, subject="ev.*.*")),
    ),
    AccountConfig(name="SYS"),
)  # fmt: skip


def test_every_account_imports_its_own_connz_and_statz() -> None:
    found = {(imp.to, imp.subject): export for imp, export in imports("APP", "SYS")}
    assert list(found) == [
        ("$SYS.REQ.ACCOUNT.PING.CONNZ", "$SYS.REQ.ACCOUNT.APP.CONNZ"),
        ("$SYS.REQ.SERVER.PING.CONNZ", "$SYS.REQ.ACCOUNT.APP.CONNZ"),
        ("$SYS.REQ.ACCOUNT.PING.STATZ", "$SYS.REQ.ACCOUNT.APP.STATZ"),
        ("$SYS.REQ.USER.INFO", "$SYS.REQ.USER.APP.INFO"),
    ]
    for (_, subject), export in found.items():
        assert export in EXPORTS
        # The system exports take only the importer's own name in the account token.
        assert export.allows("APP", subject)
        assert not export.allows("OTHER", subject) or "USER" in subject
    assert [(i.to, i.subject) for i, _ in imports("SYS", "SYS")] == [
        ("$SYS.REQ.USER.INFO", "$SYS.REQ.USER.SYS.INFO")
    ]


class Counts:
    def statz(self, account: Any) -> dict[str, Any]:
        return {"acc": account.name, "conns": len(account.clients)}

    def leafnodes(self, account: Any) -> int:
        return 0


def requests(resolver: Any = None) -> tuple[AccountRequests, Accounts]:
    opts = SimpleNamespace(accounts=CONFIGS, system_account="SYS")
    accounts = Accounts(cast(Any, opts), Sublist(), jetstream=False)
    server = SimpleNamespace(
        accounts=accounts, server_id="ME", opts=opts, start_time=0.0, resolver=resolver
    )
    return AccountRequests(cast(Any, server), cast(Any, None), cast(Any, Counts())), accounts


async def test_statz_is_silent_where_the_account_has_no_connections() -> None:
    answers, accounts = requests()
    with pytest.raises(Skip):
        answers.statz(["APP"], include_unused=False)
    listed = answers.statz(["APP", "NOPE"], include_unused=True)["account_statz"]
    assert listed == [{"acc": "APP", "conns": 0}]
    accounts["APP"].clients.add(object())
    assert [s["acc"] for s in answers.statz(None, include_unused=False)["account_statz"]] == ["APP"]
    with pytest.raises(Skip):  # the ping's own subject matches `$SYS.REQ.ACCOUNT.*.STATZ`
        await answers.document("STATZ", "PING", {})


async def test_unknown_accounts_are_refused_with_the_references_words() -> None:
    answers, _ = requests()
    with pytest.raises(RequestError, match=r"^Account NOPE does not exist$"):
        await answers.document("INFO", "NOPE", {})
    with pytest.raises(RequestError, match=r"^jetstream not enabled$"):
        await answers.document("JSZ", "NOPE", {})
    with pytest.raises(RequestError, match=r"^Account NOPE does not exist$"):
        answers.accountz({"account": "NOPE"})
    assert answers.accountz({})["accounts"] == ["$G", "APP", "EXP", "SYS"]


def test_info_lists_exports_and_imports_as_the_reference() -> None:
    answers, accounts = requests()
    app = answers.info(accounts["APP"])
    assert "is_system" not in app and "exports" not in app
    service, stream = app["imports"][:2]
    assert service["latency"] == {"sampling": 100, "results": "lat.svc"}
    assert (service["to"], service["local_subject"]) == ("svc.>", "svc.>")
    assert stream["local_subject"] == "got.*.*" and "to" not in stream
    assert [i["local_subject"] for i in app["imports"][2:]] == [
        "$SYS.REQ.ACCOUNT.PING.CONNZ",
        "$SYS.REQ.SERVER.PING.CONNZ",
        "$SYS.REQ.ACCOUNT.PING.STATZ",
        "$SYS.REQ.USER.INFO",
    ]
    exp = answers.info(accounts["EXP"])
    assert exp["exports"][0]["service_latency"] == {"sampling": 100, "results": "lat.svc"}
    system = answers.info(accounts["SYS"])
    assert system["is_system"] is True
    assert [(e["subject"], e["response_type"]) for e in system["exports"]] == [
        ("$SYS.REQ.ACCOUNT.*.CONNZ", "Streamed"),
        ("$SYS.REQ.ACCOUNT.*.STATZ", "Streamed"),
        ("$SYS.REQ.USER.*.INFO", "Singleton"),
    ]


def test_info_in_operator_mode_carries_the_accounts_jwt() -> None:
    payload = {"jti": "J", "iat": 1, "iss": "OPKEY", "name": "Orders", "sub": "APP",
               "nats": {"type": "account", "version": 2, "tags": ["team:a"]}}  # fmt: skip
    body = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")
    token = f"eyJhbGciOiJlZDI1NTE5LW5rZXkifQ.{body}.c2ln"
    claims = Claims(token=token, kind="account", issuer="OPKEY", subject="APP", name="Orders",
                    issued_at=1, expires=0, not_before=0, nats=payload["nats"])  # fmt: skip
    store = SimpleNamespace(get=lambda name: claims if name == "APP" else None)
    answers, accounts = requests(SimpleNamespace(store=store))
    info = answers.info(accounts["APP"])
    assert (info["jwt"], info["issuer_key"], info["name_tag"]) == (token, "OPKEY", "Orders")
    assert info["decoded_jwt"] == payload and info["tags"] == ["team:a"]
    assert info["expired"] is False
    assert "jwt" not in answers.info(accounts["EXP"])


async def test_reload_answers_why_the_old_configuration_stays() -> None:
    """`$SYS.REQ.SERVER.<id>.RELOAD`: SIGHUP's reload; its refusal is the answer's error."""
    sent: list[dict[str, Any]] = []
    outcome: list[str | None] = ["config file not found"]
    server = SimpleNamespace(
        server_id="ME", server_name="S0", opts=SimpleNamespace(host="127.0.0.1"),
        accounts=SimpleNamespace(system_account="SYS"),
        publish=lambda subject, reply, hdr, data, account: sent.append(json.loads(data)),
    )  # fmt: skip
    envelope = SimpleNamespace(envelope=lambda: {"name": "S0"})
    system = SystemAccount(
        cast(Any, server), cast(Any, envelope), cast(Any, None), cast(Any, None),
        lambda: outcome[0],
    )  # fmt: skip
    await system._answer("RELOAD", "$SYS.REQ.SERVER.ME.RELOAD", "inbox", {})
    outcome[0] = None
    await system._answer("RELOAD", "$SYS.REQ.SERVER.ME.RELOAD", "inbox", {})
    assert sent == [
        {"server": {"name": "S0"}, "error": {"code": 500, "description": "config file not found"}},
        {"server": {"name": "S0"}},
    ]
