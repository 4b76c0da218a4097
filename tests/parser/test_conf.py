"""The NATS config language: syntax variants, values, variables, includes, errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.parser.conf import ConfigError, Position, Table, parse, parse_file, read_relative


def files_loader(files: dict[str, str]):
    """A loader over an in-memory folder, recording what was asked for."""

    def load(name: str, including: str | None) -> tuple[str, str]:
        if name not in files:
            raise ConfigError(f"error opening config file: no file {name}")
        return name, files[name]

    return load


@pytest.mark.parametrize(
    "text",
    [
        "port = 4222",
        "port: 4222",
        "port 4222",
        "port:4222",
        "port=4222;",
        "port: 4222 # trailing comment",
        "port: 4222 // trailing comment",
        "# leading\n\nport: 4222\n",
        '"port": 4222',
        "'port' = 4222",
        "port\n4222",
        '{ "port": 4222 }',
        "port: 4222\r\n",
    ],
)
def test_key_value_separators(text: str) -> None:
    assert parse(text) == {"port": 4222}


@pytest.mark.parametrize(
    "text",
    [
        "auth { token: abc }",
        "auth {\n  token: abc\n}",
        "auth\n{\n  token = abc\n}\n",
        "auth: { token: abc, }",
        "auth = {token: abc; }",
        "auth{token:abc}",
        "auth {\n  # note\n  token: abc // why\n}",
    ],
)
def test_blocks(text: str) -> None:
    assert parse(text) == {"auth": {"token": "abc"}}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: [1, 2, 3]", [1, 2, 3]),
        ("a: [1,2,3]", [1, 2, 3]),
        ("a: [\n  1\n  2\n]", [1, 2]),
        ("a: [1, 2, ]", [1, 2]),
        ("a: []", []),
        ("a: [ 'x', \"y\", z ]", ["x", "y", "z"]),
        ("a: [ {b: 1}, {c: [2]} ]", [{"b": 1}, {"c": [2]}]),
        ("a: [ # c\n 1 // d\n]", [1]),
    ],
)
def test_arrays(text: str, expected: list[object]) -> None:
    assert parse(text)["a"] == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("42", 42),
        ("-1", -1),
        ("1.5", 1.5),
        ("1K", 1000),
        ("1k", 1000),
        ("1KB", 1024),
        ("1Ki", 1024),
        ("1KiB", 1024),
        ("64MB", 64 * 1024 * 1024),
        ("2m", 2_000_000),  # unquoted 2m is a size to the reference, not minutes
        ("2GB", 2 * 1024**3),
        ("1G", 10**9),
        ("1T", 10**12),
        ("-1K", -1000),
        ("true", True),
        ("Yes", True),
        ("on", True),
        ("FALSE", False),
        ("no", False),
        ("off", False),
        ('"true"', "true"),
        ('"2m"', "2m"),
        ("10s", "10s"),
        ("1h30m", "1h30m"),
        ("100ms", "100ms"),
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.1:4222", "127.0.0.1:4222"),
        ("localhost:4222", "localhost:4222"),
        ("nats://a:b@host:4222", "nats://a:b@host:4222"),
        ("bar#baz", "bar#baz"),
        ("'a\\qb'", "a\\qb"),
        ('"a\\tb\\x41\\"\\\\"', 'a\tbA"\\'),
        ("2020-01-02T03:04:05Z", datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("$2a$11$abc", "$2a$11$abc"),
    ],
)
def test_values(value: str, expected: object) -> None:
    result = parse(f"v: {value}\n")["v"]
    assert result == expected and type(result) is type(expected)


def test_key_with_separator_then_end_of_file_is_an_empty_string() -> None:
    assert parse("server_name =") == {"server_name": ""}


def test_block_string() -> None:
    assert parse("text (\nline one\nline two\n)\nport: 1\n") == {
        "text": "\nline one\nline two\n",  # everything between the parentheses
        "port": 1,
    }


def test_later_key_wins() -> None:
    assert parse("port: 1\nport: 2") == {"port": 2}


def test_variables_are_scoped_and_marked_used() -> None:
    conf = parse("x = 1\nblock { y: $x, z = 2, w: $z }\nv: $x\n")
    assert conf["block"] == {"y": 1, "z": 2, "w": 2}
    assert conf["v"] == 1
    assert conf.variables == {"x"}
    assert conf["block"].variables == {"z"}


def test_variables_come_from_the_environment_parsed_as_config() -> None:
    conf = parse("a: $NUM\nb: $STR\nc: $LIST", env={"NUM": "4222", "STR": "hi", "LIST": "[1, 2]"})
    assert conf == {"a": 4222, "b": "hi", "c": [1, 2]}


def test_environment_variable_cycle_is_an_error() -> None:
    with pytest.raises(ConfigError, match="cycle"):
        parse("a: $A", env={"A": "$B", "B": "$A"})


def test_undefined_variable_names_line_and_column() -> None:
    with pytest.raises(ConfigError) as caught:
        parse("port: 1\nhost: $NOPE\n", file="x.conf", env={})
    assert caught.value.position == Position("x.conf", 2, 7)
    assert str(caught.value) == "x.conf:2:7: variable reference for 'NOPE' can not be found"


def test_a_later_definition_is_not_visible_earlier() -> None:
    with pytest.raises(ConfigError):
        parse("a: $b\nb: 1", env={})


def test_positions_are_recorded_per_key() -> None:
    conf = parse("a: 1\n  b {\n    c: 2\n  }\n", file="f.conf")
    assert conf.position("a") == Position("f.conf", 1, 1)
    assert conf.position("b") == Position("f.conf", 2, 3)
    assert conf["b"].position("c") == Position("f.conf", 3, 5)


def test_include_merges_into_the_current_block() -> None:
    loader = files_loader({"auth.conf": "token: abc\n", "main.conf": "port: 1"})
    conf = parse("include auth.conf\nblock {\n  include 'auth.conf'\n}\n", loader=loader)
    assert conf == {"token": "abc", "block": {"token": "abc"}}
    assert conf.position("token") == Position("auth.conf", 1, 1)


def test_include_errors_name_the_include_line() -> None:
    with pytest.raises(ConfigError) as caught:
        parse("port: 1\ninclude missing.conf\n", file="m.conf", loader=files_loader({}))
    assert caught.value.line == 2
    assert "missing.conf" in str(caught.value)


def test_include_cycle_is_an_error() -> None:
    loader = files_loader({"a.conf": "include b.conf", "b.conf": "include a.conf"})
    with pytest.raises(ConfigError, match="cycle"):
        parse("include a.conf", file="main.conf", loader=loader)


def test_included_files_do_not_see_the_includers_variables() -> None:
    loader = files_loader({"inc.conf": "b: $a"})
    with pytest.raises(ConfigError, match="'a'"):
        parse("a: 1\ninclude inc.conf", loader=loader, env={})


def test_default_loader_reads_beside_the_including_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "inner.conf").write_text("include ../leaf.conf\n")
    (tmp_path / "leaf.conf").write_text("port: 7\n")
    (tmp_path / "main.conf").write_text("include sub/inner.conf\n")
    assert parse_file(str(tmp_path / "main.conf")) == {"port": 7}


def test_default_loader_joins_absolute_names_like_the_reference(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "x.conf").write_text("port: 1\n")
    path, text = read_relative("/etc/x.conf", str(tmp_path / "main.conf"))
    assert Path(path) == tmp_path / "etc" / "x.conf" and text == "port: 1\n"


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="error opening config file"):
        parse_file("/nonexistent/jetlake.conf")


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("port: [1,,2]", 1, 10),
        ("port =\n4222", 1, 7),
        ('a: 1\nb: "abc', 2, 8),
        ("a: 'abc", 1, 8),
        ('a: "\\q"', 1, 6),
        ("a: {b: 1", 1, 9),
        ("a: [1 2]", 1, 7),
        ("port", 1, 1),
        ("a: 1 b: 2", 1, 6),
        ("a: .5", 1, 4),
        ("a: -x", 1, 4),
        ("a: 1kbb", 1, 4),
        ("a: 99999999999999999999", 1, 4),
        ("a: 2020-13-01T00:00:00Z", 1, 4),
        ("a: 2020-1-1", 1, 4),
        ("}", 1, 1),
        ("a: (\nno end", 1, 5),
        ("[" * 500, 1, 1),
    ],
)
def test_syntax_errors_carry_a_position(text: str, line: int, column: int) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(text, file="bad.conf", env={})
    assert caught.value.file == "bad.conf"
    assert caught.value.line == line
    if text != "[" * 500:
        assert caught.value.column == column
    assert str(caught.value).startswith(f"bad.conf:{line}:")


def test_error_without_position_reads_as_its_reason() -> None:
    assert str(ConfigError("plain")) == "plain"


def test_tables_are_dicts() -> None:
    conf = parse("a { b: 1 }")
    assert isinstance(conf, Table) and isinstance(conf["a"], dict)
    assert json.loads(json.dumps(conf)) == {"a": {"b": 1}}


_json_scalars = (
    st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.booleans()
    | st.text(st.characters(categories=("L", "N"), exclude_characters='\\"'), max_size=8)
)
_json_keys = st.text(st.characters(categories=("L",)), min_size=1, max_size=8)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_json_keys, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300)
@given(st.dictionaries(_json_keys, _json_values, min_size=1, max_size=5))
def test_json_documents_parse_to_the_same_values(document: dict[str, object]) -> None:
    # Keys that read as `include` directives are not data in NATS configs.
    document = {k: v for k, v in document.items() if k.lower() != "include"}
    assert parse(json.dumps(document, ensure_ascii=False), env={}) == document


@settings(max_examples=500)
@given(st.text(alphabet=st.sampled_from(list("ab1$-.:=;,{}[]()'\"\\#/ \n\tkKmMxX0e")), max_size=60))
def test_any_text_parses_or_raises_config_error(text: str) -> None:
    try:
        result = parse(text, env={"A": "1", "B": "$A"}, loader=files_loader({}))
    except ConfigError:
        return
    assert isinstance(result, Table)


@settings(max_examples=200)
@given(st.text(max_size=80))
def test_any_unicode_parses_or_raises_config_error(text: str) -> None:
    try:
        result = parse(text, env={}, loader=files_loader({}))
    except ConfigError:
        return
    assert isinstance(result, Table)
