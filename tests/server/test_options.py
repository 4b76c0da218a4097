"""`jetlake serve` options: flags, config keys, merging, validation, log lines."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.server.logs import TRACE, setup_logging
from ingest.server.options import (
    ConfigError,
    FlagError,
    JetStreamConfig,
    LakeConfig,
    Options,
    Permissions,
    SubjectPermission,
    TLSConfig,
    User,
    load_config,
    parse_duration,
    parse_serve_args,
    validate_options,
)

REFERENCE = Path(sys.executable).parent / "nats-server"


def write(tmp_path: Path, text: str, name: str = "server.conf") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_defaults_match_the_reference() -> None:
    opts = parse_serve_args([])
    assert (opts.host, opts.port, opts.http_port, opts.server_name) == ("0.0.0.0", 4222, None, None)
    assert opts.max_payload == 1048576 and opts.max_control_line == 4096
    assert opts.max_connections == 65536 and opts.max_pending == 64 * 1024 * 1024
    assert (opts.ping_interval, opts.ping_max, opts.write_deadline) == (120.0, 2, 10.0)
    assert (opts.lame_duck_duration, opts.lame_duck_grace_period) == (120.0, 10.0)
    assert opts.auth_timeout == 2.0 and opts.tls is None
    assert opts.jetstream == JetStreamConfig(
        enabled=False, max_memory_store=-1, max_file_store=-1, sync_interval_ns=10_000_000
    )


@pytest.mark.parametrize(
    "argv",
    [["-p", "5000"], ["-p=5000"], ["--port", "5000"], ["--port=5000"], ["-port", "0x1388"]],
)
def test_flag_spellings(argv: list[str]) -> None:
    assert parse_serve_args(argv).port == 5000


@pytest.mark.parametrize(
    ("argv", "debug", "trace"),
    [
        (["-D"], True, False),
        (["-V"], False, True),
        (["-DV"], True, True),
        (["--debug", "--trace=true"], True, True),
        (["-DV", "-D=false"], False, True),
        (["-D=0"], False, False),
    ],
)
def test_boolean_flags(argv: list[str], debug: bool, trace: bool) -> None:
    opts = parse_serve_args(argv)
    assert (opts.debug, opts.trace) == (debug, trace)


def test_flags_map_to_options(tmp_path: Path) -> None:
    opts = parse_serve_args(
        ["-a", "::1", "-m", "8222", "-n", "srv", "--user", "u", "--pass", "p", "-js", "-sd",
         str(tmp_path), "-l", "x.log", "-P", "x.pid", "--auth", "tok"]
    )  # fmt: skip
    assert (opts.host, opts.http_port, opts.server_name) == ("::1", 8222, "srv")
    assert (opts.username, opts.password, opts.auth_token) == ("u", "p", "tok")
    assert opts.jetstream.enabled and opts.jetstream.store_dir == str(tmp_path)
    assert (opts.logfile, opts.pid_file) == ("x.log", "x.pid")


@pytest.mark.parametrize(
    ("argv", "port", "http_port"),
    [([], 4222, None), (["-p", "-1"], 0, None), (["-m", "-1"], 4222, 0), (["-m", "0"], 4222, None)],
)
def test_random_and_disabled_ports(argv: list[str], port: int, http_port: int | None) -> None:
    opts = parse_serve_args(argv)
    assert (opts.port, opts.http_port) == (port, http_port)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--foo"], "flag provided but not defined: -foo"),
        (["-p"], "flag needs an argument: -p"),
        (["-p", "abc"], 'invalid value "abc" for flag -p: parse error'),
        (["-D=maybe"], 'invalid boolean value "maybe" for -D: parse error'),
        (["---p"], "bad flag syntax: ---p"),
        (["--busy_poll", "5"], 'invalid value "5" for flag -busy_poll: parse error'),
    ],
)
def test_flag_errors_use_the_reference_wording(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as caught:
        parse_serve_args(argv)
    assert str(caught.value) == message


def test_help_version_and_commands() -> None:
    assert parse_serve_args(["-h"]).show_help
    assert parse_serve_args(["--version"]).show_version
    assert parse_serve_args(["version"]).show_version
    assert parse_serve_args(["-D", "--", "help"]).show_help
    with pytest.raises(ConfigError, match='unrecognized command: "foo"'):
        parse_serve_args(["foo"])


def test_flags_override_the_config_file(tmp_path: Path) -> None:
    path = write(tmp_path, "port: 4333\nserver_name: file\ndebug: true\nhttp_port: 8000\n")
    opts = parse_serve_args(["-c", path, "-p", "5555", "-D=false"])
    assert (opts.port, opts.server_name, opts.debug, opts.http_port) == (5555, "file", False, 8000)
    assert opts.config_file == path


def test_tls_flags(tmp_path: Path) -> None:
    opts = parse_serve_args(["--tlscert", "c.pem", "--tlskey", "k.pem", "--tlsverify"])
    assert opts.tls == TLSConfig(cert_file="c.pem", key_file="k.pem", verify=True)
    assert opts.auth_timeout == 3.0  # TLS timeout plus one second, as the reference
    with pytest.raises(ConfigError, match="certificate must be present"):
        parse_serve_args(["--tls"])
    with pytest.raises(ConfigError, match="private key must be present"):
        parse_serve_args(["--tlscert", "c.pem"])
    path = write(tmp_path, "tls { cert_file: c.pem, key_file: k.pem }")
    assert parse_serve_args(["-c", path, "--tls=false"]).tls is None


def test_check_config_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape("must specify [-c, --config]")):
        parse_serve_args(["-t"])
    assert parse_serve_args(["-t", "-c", write(tmp_path, "port: 1")]).check_config
    with pytest.raises(ConfigError, match="should be converted to a duration"):
        parse_serve_args(["-t", "-c", write(tmp_path, "ping_interval: 5")])


def test_warnings_do_not_stop_a_normal_start(tmp_path: Path) -> None:
    opts = parse_serve_args(["-c", write(tmp_path, "ping_interval: 5\n")])
    assert opts.ping_interval == 5.0
    assert opts.warnings == (
        f'{tmp_path}/server.conf:1:1: invalid use of field "ping_interval": '
        "ping_interval should be converted to a duration",
    )


FULL = """
listen: 127.0.0.1:4333
http: "localhost:8333"
server_name: jl1
max_payload: 2MB
max_connections: 0
ping_interval: "30s"
write_deadline: "2s"
lame_duck_duration: "1m"
lame_duck_grace_period: "5s"
authorization {
  timeout: "1.5s"
  default_permissions { publish: "foo.>", subscribe { allow: ["a", "b q"], deny: "c" } }
  users: [
    {user: alice, password: secret}
    {user: bob, password: pw, permissions: {publish: {deny: ["x.*"]}}}
  ]
}
no_auth_user: alice
tls { cert_file: "c.pem", key_file: k.pem, ca_file: ca.pem, verify: true,
      handshake_first: "300ms", timeout: 1 }
jetstream { store_dir: /tmp/js, max_mem: 1G, max_file: "10G", sync_interval: always }
lake { dir: "/tmp/lake", spark_master: "local[2]", seal_interval: "500ms", compact_interval: 3 }
"""


def test_full_config(tmp_path: Path) -> None:
    opts = load_config(write(tmp_path, FULL))
    assert (opts.host, opts.port, opts.http_host, opts.http_port) == (
        "127.0.0.1", 4333, "localhost", 8333,
    )  # fmt: skip
    assert opts.max_payload == 2 * 1024 * 1024 and opts.max_connections == -1
    assert (opts.ping_interval, opts.write_deadline) == (30.0, 2.0)
    assert (opts.lame_duck_duration, opts.lame_duck_grace_period, opts.auth_timeout) == (
        60.0, 5.0, 1.5,
    )  # fmt: skip
    defaults = Permissions(
        publish=SubjectPermission(allow=("foo.>",)),
        subscribe=SubjectPermission(allow=("a", "b q"), deny=("c",)),
    )
    assert opts.users == (
        User(user="alice", password="secret", permissions=defaults),
        User(user="bob", password="pw",
             permissions=Permissions(publish=SubjectPermission(deny=("x.*",)))),
    )  # fmt: skip
    assert opts.tls == TLSConfig(
        cert_file="c.pem", key_file="k.pem", ca_file="ca.pem", verify=True,
        handshake_first=True, handshake_first_fallback=0.3, timeout=1.0,
    )  # fmt: skip
    assert opts.jetstream == JetStreamConfig(
        enabled=True, store_dir="/tmp/js", max_memory_store=10**9,
        max_file_store=10 * 2**30, sync_interval_ns=None,
    )  # fmt: skip
    assert opts.lake == LakeConfig(
        enabled=True, dir="/tmp/lake", spark_master="local[2]", seal_interval=0.5,
        compact_interval=3.0,
    )  # fmt: skip
    assert opts.warnings == ()
    validate_options(opts)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("port: 1\nfoo: 1\n", '2:1: unknown field "foo"'),
        ('port: "abc"', 'expected an integer for "port", got string'),
        ("port: true", 'expected an integer for "port", got boolean'),
        ('debug: "true"', "expected a boolean"),
        ('server_name: "a b"', "server name cannot contain spaces"),
        ("max_control_line: 3GB", "max_control_line value is too big"),
        ("lame_duck_duration: 10s", "invalid lame_duck_duration of 10s, minimum is 30 seconds"),
        ('lame_duck_grace_period: "-1s"', "needs to be positive"),
        ('ping_interval: "soon"', 'error parsing ping_interval: time: invalid duration "soon"'),
        ('listen: "localhost"', 'could not parse address string "localhost"'),
        ('cluster { listen: "::1:6222" }', 'could not parse address string "::1:6222"'),
        ("jetstream: maybe", "Expected 'enabled' or 'disabled'"),
        ('jetstream { max_mem: "1KB" }', "max_mem_store"),
        ("jetstream { bogus: 1 }", '1:13: unknown field "bogus"'),
        ("store_dir: /a\njetstream { store_dir: /b }", "Duplicate 'store_dir' configuration"),
        ("authorization { token: a, user: b }", "Cannot have a user/pass and token"),
        ("authorization { user: a, users: [] }", "single user/pass and a users array"),
        ("authorization { token: a, users: [] }", "token and a users array"),
        ("authorization { users: [ {user: a}, {user: a} ] }", 'Duplicate user "a" detected'),
        ("authorization { users: [ {password: x} ] }", "User entry requires a user"),
        ("authorization { users: [ 1 ] }", "Expected user entry to be a map/struct"),
        ('authorization { users: [ "x" ] }', "Expected user entry to be a map/struct, got x"),
        ("authorization { users: 5 }", "Expected users field to be an array, got 5"),
        ("authorization { permissions { pub: 1 } }", "cannot be cast to string"),
        ('authorization { permissions { pub: "a..b" } }', 'subject "a..b" is not a valid'),
        ("authorization { permissions { pub { allow: a, x: b } } }", "only 'allow' or 'deny'"),
        ("authorization { permissions { what: a } }", 'Unknown field "what" parsing permissions'),
        ("authorization { timeout: [1] }", "a number of seconds or a duration"),
        ("tls { foo: 1 }", 'error parsing tls config, unknown field "foo"'),
        ("tls { verify: 1 }", "expected 'verify' to be a boolean"),
        ('tls { handshake_first: "x" }', 'value "x" is invalid'),
    ],
)
def test_config_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    assert message in str(caught.value)
    assert str(caught.value).startswith(str(tmp_path))


def test_keys_used_as_variables_are_not_unknown(tmp_path: Path) -> None:
    opts = load_config(
        write(tmp_path, "base = 4333\nport: $base\nauthorization { t = x, token: $t }")
    )
    assert (opts.port, opts.auth_token) == (4333, "x")


def test_keys_are_case_insensitive_and_aliases_work(tmp_path: Path) -> None:
    text = "PORT: 5\nnet: 10.0.0.1\nmonitor_port: 9\nlog_file: a\npidfile: b\nmax_conn: 7"
    opts = load_config(write(tmp_path, text))
    assert (opts.port, opts.host, opts.http_port) == (5, "10.0.0.1", 9)
    assert (opts.logfile, opts.pid_file, opts.max_connections) == ("a", "b", 7)


@pytest.mark.parametrize(
    ("value", "ns"),
    [("always", None), ('"2m"', 120 * 10**9), ("0", 10**7), ('"0s"', 10**7), ('"1ms"', 10**6)],
)
def test_sync_interval(tmp_path: Path, value: str, ns: int | None) -> None:
    """0, as on the reference, means the server's default (jetlake's: 10 ms)."""
    opts = load_config(write(tmp_path, f"jetstream {{ sync_interval: {value} }}"))
    assert opts.jetstream.sync_interval_ns == ns


def test_empty_config_is_a_warning(tmp_path: Path) -> None:
    assert "config has no values or is empty" in load_config(write(tmp_path, "")).warnings[0]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0.0), ("2m", 120.0), ("1h30m", 5400.0), ("100ms", 0.1), ("-1.5s", -1.5), ("1us", 1e-6)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "s", "1x", "--1s", "1.s.", "1 s"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        (Options(host="1.2.3.4.5"), 'invalid host address "1.2.3.4.5"'),
        (Options(host="bad host"), "invalid host address"),
        (Options(port=70000), "invalid port 70000"),
        (Options(lame_duck_duration=30.0, lame_duck_grace_period=30.0), "strictly lower"),
        (Options(max_payload=10, max_pending=5), "max_payload (10) cannot be higher"),
        (Options(no_auth_user="x"), 'no_auth_user: "x" present, but users/nkeys'),
        (Options(no_auth_user="x", users=(User(user="y"),)), "not present as user"),
        (Options(server_name="a b"), "server name cannot contain spaces"),
    ],
)
def test_start_time_validation(opts: Options, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_options(opts)
    assert message in str(caught.value)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "::1", "localhost", "nats.example.com", "a-b"])
def test_valid_hosts(host: str) -> None:
    validate_options(Options(host=host))


def test_bad_address_fails_at_start() -> None:
    with pytest.raises(ConfigError, match="invalid host address"):
        parse_serve_args(["-a", "no such host"])


# -- differential: the reference's `-t` and our loader agree ------------------------

GOOD = [
    "port: 4222\nhost = 127.0.0.1\nmax_payload 2MB\n",
    '{ "port": 4222, "debug": true, "authorization": {"users": [{"user": "a", "password": "b"}]} }',
    "x = 4333\nport: $x\n",
    "authorization\n{\n  token: abc\n  timeout: 3\n}\n",
    "jetstream: enabled\nstore_dir: /tmp/jl-js\n",
    'jetstream { max_mem: 1G, max_file: "10G", store_dir: "/tmp/x", sync_interval: always }',
    "debug: yes\ntrace: off\nlogfile: /tmp/x.log\npid_file: /tmp/x.pid\n",
    "listen: 127.0.0.1:4333; http: localhost:8222, server_name: n1\n",
    "max_connections: 100\nmax_control_line: 8KB\nmax_pending: 128MB\nping_max: 3\n"
    'write_deadline: "5s"\nlame_duck_duration: "1m"\nlame_duck_grace_period: "5s"\n',
    'authorization { users: [ {user: a, password: b, permissions: {publish: ["a.>"], '
    'subscribe: {allow: "x", deny: ["y"]}}} ] }\nno_auth_user: a\n',
    "include inc.conf\n",
    "server_name =",
]

BAD = [
    "foo: 1\n",
    "port: [1,,2]\n",
    "port: $JETLAKE_SURELY_UNSET_VARIABLE\n",
    "ping_interval: 2m\n",
    "lame_duck_duration: 10s\n",
    'port: "abc"\n',
    "max_control_line: 3GB\n",
    "jetstream: maybe\n",
    'listen: "localhost"\n',
    'server_name: "a b"\n',
    "authorization { token: a, user: b }\n",
    "authorization { users: [ {user: a}, {user: a} ] }\n",
    "authorization { users: [ {password: x} ] }\n",
    "include ./nope.conf\n",
    "",
    "tls { foo: 1 }\n",
    'jetstream { max_mem: "1KB" }\n',
    'authorization { permissions { publish: { allow: ["a..b"] } } }\n',
    "store_dir: /a\njetstream { store_dir: /b }\n",
    'debug: "true"\n',
    "port\n",
    "port =\n4222\n",
    'a: "\\q"\n',
    "server_name = # a comment is not a value\n",
]


def reference_accepts(path: str) -> bool:
    done = subprocess.run(
        [str(REFERENCE), "-c", path, "-t"], capture_output=True, text=True, timeout=30
    )
    return done.returncode == 0


def jetlake_accepts(path: str) -> bool:
    try:
        return not load_config(path).warnings
    except ConfigError:
        return False


@pytest.mark.parametrize(("text", "good"), [(t, True) for t in GOOD] + [(t, False) for t in BAD])
def test_reference_and_jetlake_agree(tmp_path: Path, text: str, good: bool) -> None:
    (tmp_path / "inc.conf").write_text("server_name: included\n")
    path = write(tmp_path, text)
    assert reference_accepts(path) is good
    assert jetlake_accepts(path) is good


# -- log lines ------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _release_log_files() -> Iterator[None]:
    """setup_logging owns the process-wide `jetlake` logger; give it back clean."""
    yield
    logger = logging.getLogger("jetlake")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()


LINE = re.compile(r"\[(\d+)\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} \[(\w{3})\] (.*)")


def logged(tmp_path: Path, **flags: bool) -> list[tuple[str, str]]:
    path = tmp_path / "jl.log"
    logger = setup_logging(Options(logfile=str(path), **flags))
    logger.log(TRACE, "t")
    logger.debug("d")
    logger.info("i")
    logger.warning("w")
    logger.error("e")
    logger.critical("f")
    for handler in logger.handlers:
        handler.flush()
    lines = [LINE.fullmatch(line) for line in path.read_text().splitlines()]
    assert all(lines)
    return [(m.group(2), m.group(3)) for m in lines if m]


def test_log_format_and_levels(tmp_path: Path) -> None:
    assert logged(tmp_path) == [("INF", "i"), ("WRN", "w"), ("ERR", "e"), ("FTL", "f")]


@pytest.mark.parametrize(
    ("flags", "extra"),
    [({"debug": True}, ["DBG"]), ({"trace": True}, ["TRC"]), ({"debug": True, "trace": True},
     ["TRC", "DBG"])],
)  # fmt: skip
def test_debug_and_trace_are_independent(tmp_path: Path, flags: dict[str, bool],
                                         extra: list[str]) -> None:  # fmt: skip
    labels = [label for label, _ in logged(tmp_path, **flags)]
    assert labels == [*extra, "INF", "WRN", "ERR", "FTL"]


def test_log_line_carries_the_pid(tmp_path: Path) -> None:
    logger = setup_logging(Options(logfile=str(tmp_path / "p.log"), logtime=False))
    logger.info("ready")
    logger.handlers[0].flush()
    assert (tmp_path / "p.log").read_text() == f"[{os.getpid()}] [INF] ready\n"


def test_lake_flags_and_section(tmp_path: Path) -> None:
    """The lake is off by default; `--lake_dir` or `--spark_master` or `lake {}` turn it on."""
    assert parse_serve_args(["-js"]).lake == LakeConfig()
    assert parse_serve_args(["-js", "--lake"]).lake.enabled
    opts = parse_serve_args(["-js", "--lake_dir", "/l", "--spark_master=local[2]"])
    assert opts.lake == LakeConfig(enabled=True, dir="/l", spark_master="local[2]")
    assert load_config(write(tmp_path, "lake: true\n")).lake.enabled
    assert not load_config(write(tmp_path, "lake { enabled: false }\n")).lake.enabled
    with pytest.raises(ConfigError, match="unknown field"):
        load_config(write(tmp_path, "lake { warehouse: x }\n"))
    with pytest.raises(ConfigError, match="negative"):
        load_config(write(tmp_path, 'lake { seal_interval: "-1s" }\n'))


def test_busy_poll_flag_and_key(tmp_path: Path) -> None:
    """jetlake's own: a Go duration from the flag or the file, the flag winning; 0 turns it off."""
    assert parse_serve_args([]).busy_poll == 200e-6
    assert parse_serve_args(["--busy_poll=50us"]).busy_poll == pytest.approx(50e-6)
    assert parse_serve_args(["--busy_poll", "0"]).busy_poll == 0.0
    conf = write(tmp_path, 'busy_poll: "1ms"\n')
    assert load_config(conf).busy_poll == pytest.approx(1e-3)
    assert parse_serve_args(["-c", conf, "--busy_poll", "2ms"]).busy_poll == pytest.approx(2e-3)
    with pytest.raises(ConfigError, match=r"busy_poll \(-1ms\) cannot be negative"):
        validate_options(parse_serve_args(["--busy_poll=-1ms"]))
