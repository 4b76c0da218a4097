"""The SQL service's pure parts: its `lake { sql }` keys, SQL over NATS's chunking, headers and
which account a request is answered for."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import Row

from ingest.server.options import ConfigError, load_config
from ingest.server.settings import SqlConfig
from log.compactor.layout import qualified
from sql.nats_door.encoding import encode_arrow, encode_json
from sql.nats_door.service import NatsSql, QueryError, _positive, chunks
from sql.service import Endpoints, SharedViews, first_line, split_hostport


def lake_sql(tmp_path: Path, text: str) -> SqlConfig | None:
    path = tmp_path / "server.conf"
    path.write_text(f"jetstream: true\nlake {{ {text} }}\n")
    return load_config(str(path)).lake.sql


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("dir: /tmp/l", SqlConfig()),
        ("sql: off", None),
        ("sql: true", SqlConfig()),
        ('sql { listen: "0.0.0.0:15010" }', SqlConfig(listen="0.0.0.0:15010")),
        (
            'sql { jdbc: off, nats: "nats://a:4222" }',
            SqlConfig(jdbc=None, nats="nats://a:4222"),
        ),
        ('sql { jdbc: "[::1]:10001", nats: false }', SqlConfig(jdbc="[::1]:10001", nats=None)),
        ("sql { jdbc: true }", SqlConfig()),
        ("sql { max_rows: 10 }", SqlConfig(max_rows=10)),
        ("sql { max_result_size: 64MB }", SqlConfig(max_result_size=64 << 20)),
        ('sql { max_result_size: "2G" }', SqlConfig(max_result_size=2 << 30)),
        ("sql { max_result_size: 1000000 }", SqlConfig(max_result_size=1_000_000)),
        ('sql { catalog: "thrift://h:9083" }', SqlConfig(catalog="thrift://h:9083")),
        ("sql { user: svc, password: pw }", SqlConfig(user="svc", password="pw")),
        ('sql { token: t, creds: "/k/sql.creds" }', SqlConfig(token="t", creds="/k/sql.creds")),
    ],
)
def test_lake_sql_keys(tmp_path: Path, text: str, expected: SqlConfig | None) -> None:
    assert lake_sql(tmp_path, text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('sql { listen: "15002" }', "lake sql listen '15002' is not host:port"),
        ('sql { jdbc: "h:port" }', "lake sql jdbc 'h:port' is not host:port"),
        ("sql { listen: 15002 }", "listen"),
        ('sql { catalog: "hive" }', "lake sql catalog 'hive' is not thrift://host:port"),
        ("sql { max_rows: 0 }", "lake sql max_rows 0 is not positive"),
        ('sql { max_rows: "many" }', "max_rows"),
        ("sql { max_result_size: 0 }", "lake sql max_result_size 0 is not positive"),
        ('sql { max_result_size: "lots" }', "lake sql max_result_size sizes defined as strings"),
        ("sql { max_result_size: [1] }", "lake sql max_result_size must be int64 or string"),
    ],
)
def test_bad_lake_sql_keys_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        lake_sql(tmp_path, text)


def test_the_server_hands_its_service_a_login_in_the_environment_not_argv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ingest.server.sql_service import sql_service

    monkeypatch.delenv("JETLAKE_SQL", raising=False)
    config = SqlConfig(user="svc", password="pw", creds="/k/sql.creds", max_result_size=64 << 20)
    found = sql_service(
        config,
        store_dir=tmp_path,
        lake_root=str(tmp_path / "lake"),
        spark_master=None,
        client_url="nats://127.0.0.1:4222",
        env={},
        logins=True,
    )
    assert found is not None
    argv = found._argv
    assert "pw" not in argv and "svc" not in argv
    assert argv[argv.index("--nats_creds") + 1] == "/k/sql.creds"
    assert argv[argv.index("--logins") + 1] == "nats://127.0.0.1:4222"
    assert argv[argv.index("--max_result_size") + 1] == str(64 << 20)  # bytes, as Spark takes
    assert found._env["JETLAKE_SQL_NATS_USER"] == "svc"
    assert found._env["JETLAKE_SQL_NATS_PASSWORD"] == "pw"


def test_a_login_url_drops_the_services_own_user_and_a_jwt_login_reads_as_creds() -> None:
    from sql.logins import bare_url, creds_text

    assert bare_url("nats://sys:secret@127.0.0.1:4222") == "nats://127.0.0.1:4222"
    assert bare_url("tls://[::1]:4443") == "tls://[::1]:4443"
    assert bare_url("10.0.0.1:4222") == "nats://10.0.0.1:4222"
    text = creds_text("eyJhbGc.x.y", "SUAB")
    assert "-----BEGIN NATS USER JWT-----\neyJhbGc.x.y\n" in text
    assert "-----BEGIN USER NKEY SEED-----\nSUAB\n" in text


def test_jetlake_sql_names_loopback_localhost_when_it_sends_a_login(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sql.cli import TOKEN_ENV, login_url

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert login_url("sc://127.0.0.1:15002") == "sc://127.0.0.1:15002"
    monkeypatch.setenv(TOKEN_ENV, "a:secret")
    assert login_url("sc://127.0.0.1:15002") == "sc://localhost:15002"
    assert login_url("sc://db.example:15002") == "sc://db.example:15002"


def test_jetlake_sql_says_a_refused_call_by_its_status_and_spark_errors_by_their_message() -> None:
    import grpc

    from sql.cli import _said

    class Refused(grpc.RpcError):
        def __init__(self, code: grpc.StatusCode) -> None:
            self._code = code

        def code(self) -> grpc.StatusCode:
            return self._code

        def details(self) -> str:
            return "this SQL service takes a NATS login"

    def raised(code: grpc.StatusCode, text: str) -> Exception:
        try:
            try:
                raise Refused(code)
            except Refused:
                raise RuntimeError(text) from None
        except RuntimeError as exc:
            return exc

    said = _said(raised(grpc.StatusCode.UNAUTHENTICATED, "<rendezvous …>"))
    assert said == (
        "UNAUTHENTICATED: this SQL service takes a NATS login "
        "(set SPARK_CONNECT_AUTHENTICATE_TOKEN=user:password)"
    )
    spark = raised(grpc.StatusCode.INTERNAL, "[UNRESOLVED_COLUMN] `nope`; line 1;\n'Project")
    assert _said(spark) == "[UNRESOLVED_COLUMN] `nope`; line 1"


def test_split_hostport() -> None:
    assert split_hostport("[::1]:15002", "--listen") == ("::1", 15002)
    with pytest.raises(ValueError, match="--jdbc: 'x' is not host:port"):
        split_hostport("x", "--jdbc")


def test_endpoints_round_trip_and_a_torn_file_reads_as_none(tmp_path: Path) -> None:
    found = Endpoints(pid=1, connect="sc://127.0.0.1:1", jdbc=None, nats="nats://h:4222")
    found.write(tmp_path)
    assert Endpoints.read(tmp_path) == found
    (tmp_path / "jetlake-sql.json").write_text('{"pid": 1')
    assert Endpoints.read(tmp_path) is None


SCHEMA = pa.schema([("seq", pa.int64()), ("data", pa.binary())])
ROW = Row("seq", "data")


def test_chunks_stay_under_the_limit_and_keep_every_row_in_order() -> None:
    rows = [ROW(i, b"x" * 100) for i in range(500)]
    bodies = list(chunks(rows, lambda r: encode_arrow(r, SCHEMA), 8_000))
    assert len(bodies) > 1 and all(len(b) <= 8_000 for b in bodies)
    back = [pa.ipc.open_stream(b).read_all() for b in bodies]
    assert [r["seq"] for t in back for r in t.to_pylist()] == list(range(500))


def test_a_row_over_the_limit_is_an_error_naming_its_size() -> None:
    with pytest.raises(QueryError, match=r"a row of \d+ bytes exceeds max_payload 1000"):
        list(chunks([ROW(1, b"x" * 5000)], encode_json, 1000))


def test_json_rows_carry_text_as_text_and_other_bytes_as_base64() -> None:
    lines = encode_json([ROW(1, b"hi"), ROW(2, b"\xff\x00")]).splitlines()
    assert [json.loads(line) for line in lines] == [
        {"seq": 1, "data": "hi"},
        {"seq": 2, "data": "/wA="},
    ]


def test_first_line_drops_the_plan_and_the_jvm_stack() -> None:
    text = "[TABLE_OR_VIEW_NOT_FOUND] `NOPE` cannot be found.; line 1 pos 14;\n'Project [*]"
    assert first_line(Exception(text + "\n\nJVM stacktrace:\nat x")) == (
        "[TABLE_OR_VIEW_NOT_FOUND] `NOPE` cannot be found.; line 1 pos 14"
    )


def test_jetlake_sql_takes_the_service_only_while_its_process_and_port_live(
    tmp_path: Path,
) -> None:
    import socket
    import subprocess
    import sys

    from sql.cli import live_service

    assert live_service(tmp_path) is None  # no file
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"sc://127.0.0.1:{listener.getsockname()[1]}"
        Endpoints(pid=int(gone.stdout), connect=url).write(tmp_path)
        assert live_service(tmp_path) is None  # its process is gone
        Endpoints(pid=os.getpid(), connect=url).write(tmp_path)
        assert (found := live_service(tmp_path)) is not None and found.connect == url
    assert live_service(tmp_path) is None  # its port is closed


def test_sql_serve_refuses_a_taken_address_before_starting_a_jvm(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "jobs.cli", "sql", "serve", "--store", str(tmp_path),
             "--listen", f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 3  # the server does not start it again
    assert f"--listen 127.0.0.1:{port} is taken" in done.stderr


def _door(account: str, *, system: bool) -> NatsSql:
    door = NatsSql(None, "nats://unused")  # type: ignore[arg-type]  # no Spark: the checks only
    door._account, door._system = account, system
    return door


def test_a_request_is_answered_for_the_account_the_server_names() -> None:
    system = _door("SYS", system=True)
    assert system._asker({}) is None  # the system account's own: every account's streams
    assert system._asker({"Nats-Request-Info": '{"acc":"A","rtt":0}'}) == "A"
    own = _door("A", system=False)
    assert own._asker({}) == "A"
    assert own._asker({"Nats-Request-Info": '{"acc":"A"}'}) == "A"
    with pytest.raises(QueryError, match="answers account A only") as refused:
        own._asker({"Nats-Request-Info": '{"acc":"B"}'})
    assert refused.value.code == "403"
    with pytest.raises(QueryError, match="names no account"):
        system._asker({"Nats-Request-Info": "[]"})


def test_limits_in_headers_are_positive_numbers_named_when_not() -> None:
    assert _positive({}, "Jl-Sql-Timeout", None) is None
    assert _positive({"Jl-Sql-Timeout": "2.5"}, "Jl-Sql-Timeout", None) == 2.5
    assert _positive({"Jl-Sql-Window": "3"}, "Jl-Sql-Window", 8) == 3
    for name, value in (("Jl-Sql-Window", "0"), ("Jl-Sql-Window", "1.5"), ("Jl-Sql-Ack-Wait", "x")):
        with pytest.raises(QueryError, match=f"{name} must be a positive number, not '{value}'"):
            _positive({name: value}, name, 1)


def test_account_views_are_named_by_account_and_the_global_ones_bare() -> None:
    assert qualified("$G", "ORDERS") == "ORDERS"
    assert qualified("A", "ORDERS") == "A.ORDERS"


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("", {}),
        ("a:secret", {"user": "a", "password": "secret"}),
        ("a:with:colons", {"user": "a", "password": "with:colons"}),
        ("s3cret", {"token": "s3cret"}),
        (":s3cret", {"token": "s3cret"}),
    ],
)
def test_jetlake_sql_reads_a_nats_login_as_the_connect_door_does(
    token: str, expected: dict[str, str]
) -> None:
    from sql.cli import nats_login

    assert nats_login(token) == expected


def test_jetlake_sql_reads_a_jwt_and_seed_as_a_creds_login() -> None:
    from sql.cli import nats_login

    found = nats_login("eyJhbGciOi.jwt:SUAseed")
    assert list(found) == ["user_credentials"]


async def test_a_503_on_a_chunks_reply_subject_is_the_client_gone_not_an_ack() -> None:
    """The server answers a chunk or heartbeat nobody received with no responders."""
    from types import SimpleNamespace

    from sql.nats_door.service import _Acks

    acks = _Acks(1, 30.0, as_json=False)
    gone: list[bool] = []
    acks.on_gone = lambda: gone.append(True)
    chunk = "_INBOX.acks.0"  # a chunk's ack subject ends in its index, a heartbeat's in beat
    await acks.on_ack(SimpleNamespace(subject=chunk, headers={"Status": "503"}))  # type: ignore[arg-type]
    assert gone == [True] and acks.count == 0
    await acks.on_ack(SimpleNamespace(subject=chunk, headers=None))  # type: ignore[arg-type]
    assert gone == [True] and acks.count == 1
    await acks.on_ack(SimpleNamespace(subject="_INBOX.acks.beat", headers=None))  # type: ignore[arg-type]
    assert gone == [True] and acks.count == 1  # a heartbeat's answer is no chunk's ack


def test_a_refresh_called_back_from_the_rebuild_itself_returns_instead_of_hanging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The analyzer rule calls `refresh` over py4j on the thread inside the JVM: during a
    rebuild, that is the rebuilding thread, which holds the lock. The rebuild fails (the name
    is not registered yet) and the next refresh builds again."""
    views = SharedViews(None, tmp_path, None)  # type: ignore[arg-type]
    rebuilds: list[str] = []

    def rebuild() -> None:
        rebuilds.append("start")
        views.refresh()  # the rule's callback, on this thread
        if len(rebuilds) == 1:
            raise RuntimeError("[TABLE_OR_VIEW_NOT_FOUND] KV_config")

    monkeypatch.setattr(views, "_fingerprint", lambda: frozenset({("KV_config", 1, 1)}))
    monkeypatch.setattr(views, "_rebuild", rebuild)
    worker = threading.Thread(target=views.refresh, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "refresh hung on its own rebuild's callback"
    views.refresh()  # a query's: the store is still changed since the last good rebuild
    assert rebuilds == ["start", "start"]
    views.refresh()  # nothing changed since: no rebuild
    assert rebuilds == ["start", "start"]
