"""The system account's requests about accounts and servers, jetlake against the reference.

Two routed servers per kind, with JetStream, an account APP (its user connected to S0
only) and the system account SYS. Every request is sent once to S0 and its answers
gathered from both servers: how many answer (one per server, or only the servers where
the account has connections), what errors say, and the shape of each answer (its keys
and their JSON types, recursively; values differ by nature) must be the reference's.
A user of APP reaches only its own account's CONNZ and STATZ, through the system
imports, and nothing else of `$SYS.REQ`.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import struct
from collections.abc import AsyncIterator, Iterator
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NATS

from tests.accounts.test_system_account_cli import tables
from tests.conftest import KIND_IDS
from tests.e2e.test_nats_cli import cli
from tests.support.cluster import start_js_mesh, stop_all
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess, enabled_kinds

CONFIG = """
accounts {
  APP {
    users [ {user: app, password: app} ]
    jetstream: enabled
    imports [
      {service: {account: EXP, subject: "svc.>"}}
      {stream: {account: EXP, subject: "ev.*.*"}, to: "got.$2.$1"}
    ]
  }
  EXP {
    users [ {user: exp, password: exp} ]
    exports [ {service: "svc.>", latency: {sampling: 100, subject: "lat.svc"}}, {stream: "ev.*.*"} ]
  }
  SYS { users [ {user: sys, password: sys} ] }
}
system_account: SYS
cluster { pool_size: -1 }
"""
NAMES = ["S0", "S1"]
SILENCE = 0.5  # how long a server that should not answer is listened to
# What the reference sends and jetlake does not, each on the compatibility page: the
# envelope's feature flags (nats-server's own protocol features) and its JetStream
# server limits block; jetlake's own defaults are not limits a server reports.
NOT_SENT = {"server.feature_flags", "statsz.jetstream.limits"}
# Told by role (the meta leader lists the replicas, a stream's leader says since when).
BY_ROLE = {"statsz.jetstream.meta", "data.stream_detail.cluster.leader_since"}
# Answers a server sends only for an account with connections on it; the rest come
# from every server.
ONLY_WHERE_CONNECTED = {"STATZ", "CONNS"}
ACCOUNT_KINDS = ["CONNZ", "SUBSZ", "LEAFZ", "JSZ", "INFO", "STATZ", "CONNS"]
SERVER_KINDS = [
    "IDZ",
    "STATSZ",
    "CONNZ",
    "JSZ",
    "LEAFZ",
    "GATEWAYZ",
    "RAFTZ",
    "ACCOUNTZ",
    "IPQUEUESZ",
]


def shape(value: Any, path: str = "") -> Any:
    """Keys and JSON types, recursively; a list's elements merged into one shape."""
    if isinstance(value, dict):
        return {
            k: shape(v, f"{path}.{k}")
            for k, v in value.items()
            if f"{path}.{k}"[1:] not in NOT_SENT | BY_ROLE
        }
    if isinstance(value, list):
        merged: dict[str, Any] = {}
        plain: set[str] = set()
        for item in value:
            found = shape(item, path)
            if isinstance(found, dict):
                merged.update(found)
            else:
                plain.add(str(found))
        return ["list", merged or sorted(plain)]
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "null" if value is None else type(value).__name__


class Pair:
    """One kind's two servers and a system user and an APP user connected to S0."""

    def __init__(self, servers: list[ServerProcess], sys_nc: NATS, app_nc: NATS) -> None:
        self.servers, self.sys, self.app = servers, sys_nc, app_nc


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[ServerProcess]]]:
    started: dict[str, list[ServerProcess]] = {}
    try:
        for kind in enabled_kinds():
            tmp = tmp_path_factory.mktemp(f"sysreq-{KIND_IDS[kind]}")
            started[kind] = start_js_mesh(kind, tmp, NAMES, config=CONFIG)
        yield started
    finally:
        for servers in started.values():
            stop_all(servers)


@contextlib.asynccontextmanager
async def connected(servers: list[ServerProcess]) -> AsyncIterator[Pair]:
    """A system user and an APP user (one subscription) connected to S0."""
    s0 = servers[0]
    sys_nc = await nats.connect(f"nats://sys:sys@{s0.host}:{s0.port}", allow_reconnect=False)
    app_nc = await nats.connect(f"nats://app:app@{s0.host}:{s0.port}", allow_reconnect=False)
    await app_nc.subscribe("app.work")
    await app_nc.flush()
    try:
        yield Pair(servers, sys_nc, app_nc)
    finally:
        await app_nc.close()
        await sys_nc.close()


@pytest.fixture
async def pair(clusters: dict[str, list[ServerProcess]], server_kind: str) -> AsyncIterator[Pair]:
    async with connected(clusters[server_kind]) as found:
        yield found


async def gather(nc: NATS, subject: str, expect: int, body: bytes = b"") -> list[dict[str, Any]]:
    """The answers to one request: `expect` of them within a generous deadline; when fewer
    than every server should answer, then whatever else arrives in a short window (a
    server that should be silent is not)."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(subject, body, reply=inbox)
    answers: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while len(answers) < expect and loop.time() < deadline:
        try:
            msg = await sub.next_msg(max(deadline - loop.time(), 0.01))
        except nats.errors.TimeoutError:
            break
        answers.append(json.loads(msg.data))
    while len(answers) < len(NAMES):
        try:
            answers.append(json.loads((await sub.next_msg(SILENCE)).data))
        except nats.errors.TimeoutError:
            break
    await sub.unsubscribe()
    return answers


def answered_by(answers: list[dict[str, Any]]) -> list[str]:
    return sorted(str((a.get("server") or a)["name"]) for a in answers)


async def until_answered(
    nc: NATS, subject: str, expect: int, body: bytes = b""
) -> list[dict[str, Any]]:
    """A request to every server once the routes carry every server's interest (the
    reference's JetStream and the system subscriptions settle after the mesh)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        answers = await gather(nc, subject, expect, body)
        if len(answers) >= expect or loop.time() > deadline:
            return answers


@pytest.mark.parametrize("kind", ACCOUNT_KINDS)
async def test_an_accounts_request_is_answered_by_each_server_it_concerns(
    pair: Pair, kind: str
) -> None:
    expect = 1 if kind in ONLY_WHERE_CONNECTED else 2
    answers = await until_answered(pair.sys, f"$SYS.REQ.ACCOUNT.APP.{kind}", expect)
    assert answered_by(answers) == NAMES[:expect]
    for answer in answers:
        if kind == "CONNS":
            assert answer["type"] == "io.nats.server.advisory.v1.account_connections"
            assert (answer["acc"], answer["conns"]) == ("APP", 1)
        else:
            assert "error" not in answer, answer
            assert isinstance(answer["data"], dict)
    by_server = {a["server"]["name"]: a for a in answers}
    if kind == "CONNZ":
        assert by_server["S0"]["data"]["num_connections"] == 1
        assert by_server["S1"]["data"]["num_connections"] == 0
    if kind == "INFO":
        assert by_server["S0"]["data"]["client_connections"] == 1
        assert by_server["S0"]["data"]["jetstream_enabled"] is True


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("INFO", "Account NOPE does not exist"),
        ("JSZ", 'account "NOPE" not found'),
        ("CONNZ", None),
        ("SUBSZ", None),
        ("LEAFZ", None),
    ],
)
async def test_an_unknown_account(pair: Pair, kind: str, error: str | None) -> None:
    answers = await until_answered(pair.sys, f"$SYS.REQ.ACCOUNT.NOPE.{kind}", 2)
    assert answered_by(answers) == NAMES
    for answer in answers:
        if error is None:
            data = answer["data"]
            assert "error" not in answer and data.get("total", data.get("leafnodes")) == 0
        else:
            assert answer["data"] is None
            assert answer["error"] == {"code": 500, "description": error}


async def test_silence_where_an_account_has_no_connections(pair: Pair) -> None:
    for subject in ("$SYS.REQ.ACCOUNT.NOPE.STATZ", "$SYS.REQ.ACCOUNT.NOPE.CONNS"):
        assert await gather(pair.sys, subject, 0) == []
    answers = await gather(pair.sys, "$SYS.REQ.ACCOUNT.SYS.JSZ", 2)
    assert [a["error"]["description"] for a in answers] == [
        'account "SYS" not jetstream enabled'
    ] * 2
    # Unused accounts are listed when asked for.
    answers = await until_answered(pair.sys, "$SYS.REQ.ACCOUNT.PING.STATZ", 1)
    listed = {a["server"]["name"]: {s["acc"] for s in a["data"]["account_statz"]} for a in answers}
    assert listed == {"S0": {"APP", "SYS"}}
    unused = await gather(pair.sys, "$SYS.REQ.ACCOUNT.PING.STATZ", 2, b'{"include_unused":true}')
    assert answered_by(unused) == NAMES


@pytest.mark.parametrize("kind", SERVER_KINDS)
async def test_a_server_ping_is_answered_by_every_server(pair: Pair, kind: str) -> None:
    answers = await until_answered(pair.sys, f"$SYS.REQ.SERVER.PING.{kind}", 2)
    assert answered_by(answers) == NAMES
    if kind == "IDZ":
        assert all(sorted(a) == ["host", "id", "name"] for a in answers)
    if kind == "STATSZ":  # the meta group as each server sees it
        metas = [a["statsz"]["jetstream"]["meta"] for a in answers]
        assert all(m["cluster_size"] == 2 for m in metas), metas


async def test_malformed_options_are_refused_by_every_server(pair: Pair) -> None:
    answers = await until_answered(pair.sys, "$SYS.REQ.SERVER.PING.CONNZ", 2, b"nonsense")
    assert answered_by(answers) == NAMES
    assert all(a["error"]["code"] == 400 and "data" not in a for a in answers), answers
    answers = await gather(pair.sys, "$SYS.REQ.SERVER.PING.ACCOUNTZ", 2, b'{"account":"NOPE"}')
    assert [a["error"] for a in answers] == [
        {"code": 500, "description": "Account NOPE does not exist"}
    ] * 2


async def test_a_client_is_told_of_lame_duck_or_kicked_by_id(pair: Pair) -> None:
    """`$SYS.REQ.SERVER.<id>.LDM` and `.KICK` with `{"cid": …}`: an answer without data
    when done, the reference's error for an unknown id; a kicked client's reason."""
    s0 = pair.servers[0]
    closed = asyncio.Event()

    async def on_closed() -> None:
        closed.set()

    async def quiet(error: Exception) -> None:
        pass

    victim = await nats.connect(
        f"nats://app:app@{s0.host}:{s0.port}", name="victim", allow_reconnect=False,
        closed_cb=on_closed, error_cb=quiet,
    )  # fmt: skip
    try:
        ids = await until_answered(pair.sys, "$SYS.REQ.SERVER.PING.IDZ", 2)  # takes no filter
        idz = next(a for a in ids if a["name"] == "S0")
        connz = await until_answered(pair.sys, "$SYS.REQ.ACCOUNT.APP.CONNZ", 2)
        (cid,) = [
            c["cid"] for a in connz for c in a["data"]["connections"] if c.get("name") == "victim"
        ]
        subject = "$SYS.REQ.SERVER." + idz["id"] + ".{}"
        answers = {}
        for kind, asked in (("LDM", cid), ("LDM", 999999), ("KICK", 999999), ("KICK", cid)):
            body = json.dumps({"cid": asked}).encode()
            reply = json.loads(
                (await pair.sys.request(subject.format(kind), body, timeout=10)).data
            )
            answers[(kind, asked == cid)] = {k: v for k, v in reply.items() if k != "server"}
        assert answers == {
            ("LDM", True): {},
            ("LDM", False): {"error": {"code": 500, "description": "no such client id"}},
            ("KICK", False): {
                "error": {"code": 500, "description": "no such client or leafnode id"}
            },
            ("KICK", True): {},
        }
        await asyncio.wait_for(closed.wait(), 20)
        closed_conns = await until_answered(
            pair.sys, "$SYS.REQ.ACCOUNT.APP.CONNZ", 2, b'{"state":1}'
        )
        reasons = [
            c["reason"]
            for a in closed_conns
            for c in a["data"]["connections"] or ()
            if c.get("name") == "victim"
        ]
        assert reasons == ["Kicked"]
    finally:
        await victim.close()


async def test_another_accounts_user_sees_its_own_account_only(pair: Pair) -> None:
    for subject in ("$SYS.REQ.SERVER.PING.CONNZ", "$SYS.REQ.ACCOUNT.PING.CONNZ"):
        answers = await until_answered(pair.app, subject, 2)
        assert answered_by(answers) == NAMES
        counts = {a["server"]["name"]: a["data"]["num_connections"] for a in answers}
        assert counts == {"S0": 1, "S1": 0}  # APP's connection, not SYS's
    # Options naming another account do not widen it.
    body = b'{"acc":"SYS","account":"SYS","auth":true}'
    answers = await until_answered(pair.app, "$SYS.REQ.SERVER.PING.CONNZ", 2, body)
    seen = [c["account"] for a in answers for c in a["data"]["connections"]]
    assert seen == ["APP"]
    answers = await until_answered(pair.app, "$SYS.REQ.ACCOUNT.PING.STATZ", 1)
    assert [[s["acc"] for s in a["data"]["account_statz"]] for a in answers] == [["APP"]]
    body = b'{"accounts":["SYS"],"include_unused":true}'
    answers = await until_answered(pair.app, "$SYS.REQ.ACCOUNT.PING.STATZ", 2, body)
    assert {s["acc"] for a in answers for s in a["data"]["account_statz"]} == {"APP"}
    for subject in (
        "$SYS.REQ.ACCOUNT.APP.CONNZ",
        "$SYS.REQ.ACCOUNT.APP.INFO",
        "$SYS.REQ.SERVER.PING",
        "$SYS.REQ.SERVER.PING.IDZ",
    ):
        with pytest.raises(nats.errors.NoRespondersError):
            await pair.app.request(subject, b"", timeout=5)


async def usage_stream(app: NATS) -> None:
    """APP's stream USAGE (R2), once the meta group answers (a loaded machine elects
    late); asked again, with the same config, it is already there."""
    config = json.dumps({"name": "USAGE", "subjects": ["usage.>"], "num_replicas": 2}).encode()

    async def create() -> dict[str, Any]:
        reply = await app.request("$JS.API.STREAM.CREATE.USAGE", config, timeout=10)
        return dict(json.loads(reply.data))

    await poll_async(
        create,
        "APP's stream USAGE created",
        60,
        until=lambda answer: "error" not in answer,
        retry=(nats.errors.TimeoutError, nats.errors.NoRespondersError),
    )


async def test_the_usage_records_count_the_accounts_api_requests(pair: Pair) -> None:
    """`$JSC.ARU.<account>.<server>`: a server's record of an account that stores
    something carries the API requests it answered (little-endian, after the memory and
    storage bytes)."""
    records = await pair.sys.subscribe("$JSC.ARU.APP.*")
    await pair.sys.flush()
    await usage_stream(pair.app)
    await pair.app.request("usage.1", b"stored", timeout=10)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    total = 0
    while total == 0:
        record = (await records.next_msg(max(deadline - loop.time(), 0.01))).data
        total = struct.unpack_from("<qqQQ", record)[2]


# ---- the shapes, the reference's against jetlake's ---------------------------------------

CASES = [
    *(
        ("sys", f"$SYS.REQ.ACCOUNT.APP.{kind}", kind in ONLY_WHERE_CONNECTED, b"")
        for kind in ACCOUNT_KINDS
    ),
    ("sys", "$SYS.REQ.ACCOUNT.APP.JSZ", False, b'{"streams":true}'),
    ("sys", "$SYS.REQ.ACCOUNT.SYS.INFO", False, b""),
    ("sys", "$SYS.REQ.ACCOUNT.EXP.INFO", False, b""),
    ("sys", "$SYS.REQ.ACCOUNT.NOPE.CONNZ", False, b""),
    ("sys", "$SYS.REQ.ACCOUNT.NOPE.INFO", False, b""),
    ("sys", "$SYS.REQ.ACCOUNT.PING.STATZ", True, b""),
    ("sys", "$SYS.REQ.SERVER.PING.IDZ", False, b""),
    ("sys", "$SYS.REQ.SERVER.PING.STATSZ", False, b""),
    ("sys", "$SYS.REQ.SERVER.PING.ACCOUNTZ", False, b""),
    ("sys", "$SYS.REQ.SERVER.PING.ACCOUNTZ", False, b'{"account":"APP"}'),
    ("sys", "$SYS.REQ.SERVER.PING.CONNZ", False, b'{"subscriptions":true,"auth":true,"state":0}'),
    ("sys", "$SYS.REQ.SERVER.PING.LEAFZ", False, b""),
    ("app", "$SYS.REQ.SERVER.PING.CONNZ", False, b""),
    ("app", "$SYS.REQ.ACCOUNT.PING.STATZ", True, b""),
]


async def test_every_answer_has_the_references_shape(
    clusters: dict[str, list[ServerProcess]],
) -> None:
    if len(clusters) < 2:
        pytest.skip("compares both kinds (JETLAKE_TEST_SERVERS names one)")
    shapes: dict[str, dict[str, Any]] = {}
    for kind, servers in clusters.items():
        async with connected(servers) as found:
            await usage_stream(found.app)  # JSZ's stream_detail, whichever test ran before
            seen = shapes[kind] = {}
            for user, subject, one, body in CASES:
                nc = found.sys if user == "sys" else found.app
                answers = await until_answered(nc, subject, 1 if one else 2, body)
                first = min(answers, key=lambda a: str((a.get("server") or a)["name"]))
                seen[f"{user} {subject} {body.decode()}"] = shape(first)
    reference, ours = shapes["nats-server"], shapes["jetlake"]
    for case in reference:
        theirs, mine = (
            json.dumps(s[case], indent=1, sort_keys=True).splitlines() for s in (reference, ours)
        )
        assert mine == theirs, "\n".join([case, *difflib.unified_diff(theirs, mine, lineterm="")])


# ---- natscli's reports, the reference's against jetlake's --------------------------------

# Report -> (title's words, compared columns): counts and names, not traffic or times.
REPORTS = {
    "connections": ("Connections out of", ["Server", "Cluster", "Account", "Subs"]),
    "accounts": ("Accounts Overview", ["Account", "Connections", "Subs"]),
}


def rows(out: str, title: str, columns: list[str]) -> list[list[str]]:
    found = [table for name, table in tables(out).items() if title in name]
    assert len(found) == 1, out
    header, body, _ = found[0]
    return sorted([row[header.index(c)] for c in columns] for row in body)


def labels(out: str) -> list[str]:
    return [line.split(":")[0].strip() for line in out.splitlines() if ":" in line]


async def test_the_clis_reports_and_account_info(clusters: dict[str, list[ServerProcess]]) -> None:
    """`nats server report connections|accounts` as a system user, `nats account info` as
    APP's, `nats server info` of a server: what the reference prints, bar values that
    differ by nature."""
    if len(clusters) < 2:
        pytest.skip("compares both kinds (JETLAKE_TEST_SERVERS names one)")
    seen: dict[str, dict[str, Any]] = {}
    for kind, servers in clusters.items():
        s0 = servers[0]
        sys_url = f"nats://sys:sys@{s0.host}:{s0.port}"
        async with connected(servers):
            seen[kind] = {}
            for report, (title, columns) in REPORTS.items():
                code, out = await cli(sys_url, "server", "report", report)
                assert code == 0, out
                seen[kind][report] = rows(out, title, columns)
            code, out = await cli(f"nats://app:app@{s0.host}:{s0.port}", "account", "info")
            assert code == 0, out
            seen[kind]["account info"] = labels(out)
            code, out = await cli(sys_url, "server", "info", "S1")
            assert code == 0 and out.startswith("Server information for S1"), out
    assert seen["jetlake"] == seen["nats-server"]
    assert ["S0", "C", "APP", "1"] in seen["jetlake"]["connections"]
