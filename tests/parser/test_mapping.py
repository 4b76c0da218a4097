"""The mapping engine alone: the reference's functions, errors and partition hash, no sockets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.parser.mapping import (
    MappingError,
    compile_transform,
    partition,
    tokenize_wildcards,
    validate_mapping,
)

token = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=12)


def mapped(src: str, dest: str, subject: str) -> str | None:
    transform = compile_transform(src, dest)
    assert transform is not None
    return transform.match(subject)


@pytest.mark.parametrize(
    ("dest", "subject", "expected"),
    [
        ("b.$2.$1", "a.x.y", "b.y.x"),
        ("b.{{wildcard(1)}}.{{ Wildcard( 2 ) }}", "a.x.y", "b.x.y"),
        ("b.{{splitFromLeft(1,2)}}.$2", "a.abcdef.y", "b.ab.cdef.y"),
        ("b.{{SplitFromRight(1,2)}}.$2", "a.abcdef.y", "b.abcd.ef.y"),
        ("b.{{SliceFromLeft(1,4)}}.$2", "a.abcdefghij.y", "b.abcd.efgh.ij.y"),
        ("b.{{SliceFromRight(1,4)}}.$2", "a.abcdefghij.y", "b.ab.cdef.ghij.y"),
        ("b.{{split(1,-)}}.$2", "a.-x--y-.z", "b.x.y.z"),
        ("b.{{left(1,2)}}.{{right(2,1)}}", "a.abc.xyz", "b.ab.z"),
        ("b.{{splitFromLeft(1,9)}}.$2", "a.abc.y", "b.abc.y"),  # too short: whole token
    ],
)
def test_functions(dest: str, subject: str, expected: str) -> None:
    assert mapped("a.*.*", dest, subject) == expected


def test_full_wildcard_keeps_the_tail_and_non_matches_are_none() -> None:
    assert mapped("a.*.>", "b.$1.>", "a.x.y.z") == "b.x.y.z"
    assert mapped("a.>", "b.>", "a.x") == "b.x"
    assert mapped("a.*", "b.$1", "c.x") is None
    assert mapped("a.*", "b.$1", "a.*") is None  # only literal subjects map


@pytest.mark.parametrize(
    ("src", "dest", "message"),
    [
        ("a.*", "b.{{nope(1)}}", "invalid mapping destination: unknown function in {{nope(1)}}"),
        (
            "a.*",
            "b.{{wildcard(2)}}",
            "invalid mapping destination: wildcard index out of range in {{wildcard(2)}}: [2]",
        ),
        ("a", "b.$1", "invalid mapping destination: wildcard index out of range in $1"),
        (
            "a.*",
            "b.{{wildcard(1,2)}}",
            "invalid mapping destination: too many arguments passed to the function"
            " in {{wildcard(1,2)}}",
        ),
        (
            "a.*",
            "b.{{split(1,a b)}}",
            "invalid mapping destination: function argument is invalid or in the wrong format"
            " in {{split(1,a b)}}",
        ),
        ("a.*", "b.*", "invalid subject"),
        ("a.>", "b", "invalid subject"),
    ],
)
def test_errors_read_like_the_reference(src: str, dest: str, message: str) -> None:
    with pytest.raises(MappingError) as refused:
        validate_mapping(src, dest)
    assert str(refused.value) == message


def test_validate_knows_every_function_and_checks_arguments() -> None:
    validate_mapping("a.*", "b.{{left(1,2)}}.{{right(1,2)}}.{{random(3)}}")
    with pytest.raises(MappingError, match="not enough arguments"):
        validate_mapping("a.*", "b.{{left(1)}}")


def test_partition_hash_is_fnv1a_32() -> None:
    # FNV-1a 32 test vectors: "" → 0x811c9dc5, "a" → 0xe40c292c, "foobar" → 0xbf9cf968
    assert partition(b"", 2**31 - 1) == 0x811C9DC5 % (2**31 - 1)
    assert partition(b"a", 1_000_000_007) == 0xE40C292C % 1_000_000_007
    assert partition(b"foobar", 1_000_000_007) == 0xBF9CF968 % 1_000_000_007
    assert partition(b"anything", 0) == 0


def test_random_uses_the_callers_source() -> None:
    transform = compile_transform("a", "b.{{random(10)}}", rand=lambda _: 1234)
    assert transform is not None and transform.match("a") == "b.4"


@given(st.lists(token, min_size=1, max_size=6))
def test_identity_mapping_of_wildcards_is_the_identity(tokens: list[str]) -> None:
    src = ".".join("*" for _ in tokens)
    assert mapped(src, tokenize_wildcards(src), ".".join(tokens)) == ".".join(tokens)


@given(token, token, st.integers(min_value=1, max_value=50))
def test_partition_is_stable_and_in_range(a: str, b: str, n: int) -> None:
    dest = f"p.{{{{partition({n},1,2)}}}}"
    first = mapped("k.*.*", dest, f"k.{a}.{b}")
    assert first == mapped("k.*.*", dest, f"k.{a}.{b}")
    assert first is not None and 0 <= int(first.split(".")[1]) < n


@given(token, st.integers(min_value=1, max_value=6))
def test_slices_and_splits_keep_every_character(tok: str, n: int) -> None:
    for fn in ("SliceFromLeft", "SliceFromRight", "SplitFromLeft", "SplitFromRight"):
        out = mapped("a.*", f"{{{{{fn}(1,{n})}}}}", f"a.{tok}")
        assert out is not None and out.replace(".", "") == tok
        assert all(out.split("."))


@given(st.text(min_size=1, max_size=30))
def test_compile_parses_or_raises_mapping_error(dest: str) -> None:
    """Any destination compiles or raises MappingError; a compiled one maps without raising."""
    try:
        transform = compile_transform("a.*.>", dest + ".>")
    except MappingError:
        return
    assert transform is not None
    assert isinstance(transform.match("a.bcdef.g.h"), str)
