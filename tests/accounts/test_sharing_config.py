"""Exports, imports and limits as the config file writes them: what is read, and the
reference's refusals, word for word (each checked against nats-server 2.15.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.server.accounts.latency import sampled
from ingest.server.accounts.settings import (
    CHUNKED,
    HEADERS_SAMPLING,
    SINGLETON,
    STREAM,
    AccountLimits,
    Export,
    Import,
    JetStreamLimits,
    Latency,
)
from ingest.server.options import ConfigError, Options, load_config

EXPORTER = 'A { exports [ {stream: "a.>"}, {service: "svc.>", accounts: [B]} ] }\n'
TOKEN_EXPORTER = (
    'A { exports [ {stream: "orders.*", account_token_position: 2}\n'
    '              {service: "q.*.x", account_token_position: 2} ] }\n'
)


def load(tmp_path: Path, text: str) -> Options:
    path = tmp_path / "server.conf"
    path.write_text(text)
    return load_config(str(path))


def test_exports_and_imports_are_read(tmp_path: Path) -> None:
    opts = load(
        tmp_path,
        """accounts {
          A { exports [
                {stream: "a.>"},
                {service: "svc.>", accounts: [B], response_type: stream},
                {service: "c.>", response: chunked, response_threshold: "5s"},
                {service: "one", latency: {sampling: 50%, subject: "lat.one"}},
                {service: "two", latency: "lat.two"}
                {service: "three", latency: {sampling: headers, subject: "lat.three"}} ] }
          B { imports [
                {stream: {account: A, subject: "a.>"}, prefix: "p"},
                {stream: {account: A, subject: "a.x"}, to: "x"},
                {service: {account: A, subject: "svc.x"}, to: "local.x"} ] }
        }""",
    )
    exports, imports = opts.accounts[0].exports, opts.accounts[1].imports
    assert exports == (
        Export(service=False, subject="a.>"),
        Export(service=True, subject="svc.>", accounts=("B",), response_type=STREAM),
        Export(service=True, subject="c.>", response_type=CHUNKED, response_threshold=5.0),
        Export(service=True, subject="one", latency=Latency(sampling=50, subject="lat.one")),
        Export(service=True, subject="two", latency=Latency(sampling=100, subject="lat.two")),
        Export(
            service=True,
            subject="three",
            latency=Latency(sampling=HEADERS_SAMPLING, subject="lat.three"),
        ),
    )
    assert exports[1].response_type != SINGLETON and exports[0].allows("anyone", "a.b")
    assert not exports[1].allows("C", "svc.x")
    assert imports == (
        Import(service=False, account="A", subject="a.>", prefix="p"),
        Import(service=False, account="A", subject="a.x", to="x"),
        Import(service=True, account="A", subject="svc.x", to="local.x"),
    )


def test_limits_are_read(tmp_path: Path) -> None:
    opts = load(
        tmp_path,
        "accounts { A { limits { max_conn: 2, max_subs: 3, max_payload: 100, "
        "max_leafnodes: 1 }, jetstream { max_mem: 1MB, max_file: 2048, max_streams: 1, "
        "max_consumers: 2 } } }",
    )
    account = opts.accounts[0]
    assert account.jetstream
    assert account.limits == AccountLimits(
        max_connections=2,
        max_subscriptions=3,
        max_payload=100,
        max_leafnodes=1,
        jetstream=JetStreamLimits(
            max_memory=1 << 20, max_file=2048, max_streams=1, max_consumers=2
        ),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'A { exports [ {stream: "a.>", accounts: [C]} ] }\n'
            'B { imports [ {stream: {account: A, subject: "a.>"}} ] }\nC {}',
            'Error adding stream import "a.>": stream import not authorized',
        ),
        (
            EXPORTER + 'C { imports [ {service: {account: A, subject: "svc.x"}} ] }',
            'Error adding service import "svc.x": service import not authorized',
        ),
        (
            'B { imports [ {service: {account: Z, subject: "q"}} ] }',
            '"Z" account not defined for service import',
        ),
        (
            EXPORTER + 'B { imports [ {stream: {account: A, subject: "b.>"}} ] }',
            'Error adding stream import "b.>": stream import not authorized',
        ),
        (
            EXPORTER + 'B { imports [ {service: {account: A, subject: "svc.>"}, to: "b.*"} ] }',
            'Error adding service import "svc.>": failed to create mapping transform for '
            'service import subject from "b.*" to "svc.>": invalid subject',
        ),
        (
            'A { exports [ {stream: "a.>", response_type: singleton} ] }',
            "Detected response directive on non-service",
        ),
        (
            'A { exports [ {service: "a.>", response_type: bogus} ] }',
            'Unknown response type: "bogus"',
        ),
        (
            'A { exports [ {service: "a", latency: {sampling: 200, subject: "l"}} ] }',
            "bad sampling percentage, should be 1-100",
        ),
        (
            'A { exports [ {service: "a", latency: {sampling: 50}} ] }',
            "Latency subject required, but missing",
        ),
        ('A { exports [ {stream: "a.>", bogus: 1} ] }', 'unknown field "bogus"'),
        ('A { exports [ "x" ] }', "Export Items should be a map with type entry, got string"),
        ("A { exports [ 1.5 ] }", "Export Items should be a map with type entry, got float64"),
        ("A { limits { max_conn: 1.5 } }", "interface {} is float64, not int64"),
        (
            'A { exports [ {stream: "a", service: "b"} ] }',
            'Detected service "b" but already saw a stream',
        ),
        ("B { imports [ {stream: {account: A}} ] }", "Expect an account name and a subject"),
        ("B { imports [ {foo: 1} ] }", 'unknown field "foo"'),
        ("A { limits { bogus: 1 } }", 'Unknown field "bogus" parsing account limits'),
        ("A { limits: 1 }", "Expected account limits to be a map/struct, got 1"),
        ("A { jetstream { bogus: 1 } }", 'unknown field "bogus"'),
        (
            'A { exports [ {service: "a", latency: {sampling: "x", subject: "l"}} ] }',
            'Failed to parse latency sample: strconv.Atoi: parsing "x": invalid syntax',
        ),
        # account_token_position: the export's token there must be `*`, and an importer
        # may take only the subjects with its own name there.
        (
            'A { exports [ {stream: "orders.x", account_token_position: 2} ] }',
            'Error adding stream export "orders.x": sublist: invalid subject',
        ),
        (
            'A { exports [ {service: "q.*", account_token_position: 3} ] }',
            'Error adding service export "q.*": sublist: invalid subject',
        ),
        (
            'A { exports [ {stream: "orders.*", account_token_position: "x"} ] }',
            "interface conversion: interface {} is string, not int64",
        ),
        (
            TOKEN_EXPORTER + 'C { imports [ {stream: {account: A, subject: "orders.B"}} ] }',
            'Error adding stream import "orders.B": stream import not authorized',
        ),
        (
            TOKEN_EXPORTER + 'B { imports [ {stream: {account: A, subject: "orders.*"}} ] }',
            'Error adding stream import "orders.*": stream import not authorized',
        ),
        (
            TOKEN_EXPORTER + 'C { imports [ {service: {account: A, subject: "q.B.x"}} ] }',
            'Error adding service import "q.B.x": service import not authorized',
        ),
    ],
)
def test_refusals(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, "accounts {\n" + text + "\n}\n")
    assert message in str(caught.value)
    assert str(caught.value).startswith(str(tmp_path))


def test_an_importer_takes_the_subjects_with_its_name_at_the_token_position(
    tmp_path: Path,
) -> None:
    opts = load(
        tmp_path,
        "accounts {\n" + TOKEN_EXPORTER + "B { imports [ {stream: {account: A, subject: "
        '"orders.B"}}, {service: {account: A, subject: "q.B.x"}} ] }\n}\n',
    )
    assert opts.accounts[0].exports[0] == Export(
        service=False, subject="orders.*", account_token_position=2
    )
    assert [imp.subject for imp in opts.accounts[1].imports] == ["orders.B", "q.B.x"]


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", True),
        ("traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", False),
        ("Uber-Trace-Id: 7f1b:5a9c:0:1", True),
        ("Uber-Trace-Id: 7f1b:5a9c:0:0", False),
        ("X-B3-Sampled: 1", True),
        ("X-B3-Sampled: 0", False),
        ("X-B3-TraceId: 80f198ee56343ba864fe8b2a57d3eff7", True),
        ("b3: 80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1", True),
        ("b3: 0", False),
        ("Other: 1", False),
    ],
)
def test_latency_sampled_by_trace_headers(header: str, expected: bool) -> None:
    by_headers = Latency(sampling=HEADERS_SAMPLING, subject="lat")
    assert sampled(by_headers, f"NATS/1.0\r\n{header}\r\n\r\n".encode()) is expected
    assert sampled(by_headers, None) is False
    assert sampled(Latency(sampling=100, subject="lat"), None) is True
