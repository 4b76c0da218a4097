"""Subject mapping: the reference's transform language, shared by streams and config mappings.

A transform rewrites a literal subject that matches `src` into `dest`, where
`dest` tokens may be `$n` or `{{function(args)}}`. Streams use it for
`subject_transform` and republish, the server for `mappings {}`. Partitions
must land where nats-server puts them (clients pick partitions by the same
hash), so the hash is FNV-1a 32 over the same bytes, and tokens are sliced as
bytes as Go does. Randomness is the caller's (`rand`), so tests can pin it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from ingest.parser.subjects import subject_matches

_WS = "[\t\n\f\r ]"  # Go's \s, narrower than Python's
_COMMA = re.compile(f",{_WS}*")
_FUNCTIONS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(r"\{\{" + _WS + "*" + pattern + _WS + r"*\((.*)\)" + _WS + r"*\}\}"))
    for kind, pattern in (
        ("wildcard", "[wW]ildcard"),
        ("partition", "[pP]artition"),
        ("split_from_left", "[sS]plit[fF]rom[lL]eft"),
        ("split_from_right", "[sS]plit[fF]rom[rR]ight"),
        ("slice_from_left", "[sS]lice[fF]rom[lL]eft"),
        ("slice_from_right", "[sS]lice[fF]rom[rR]ight"),
        ("right", "[rR]ight"),
        ("left", "[lL]eft"),
        ("split", "[sS]plit"),
        ("random", "[rR]andom"),
    )
)
_INDEX_INT = frozenset(
    ("split_from_left", "split_from_right", "slice_from_left", "slice_from_right", "right", "left")
)
_GO_INT = re.compile(r"[+-]?[0-9]+")
_MAX_INT32 = 2**31 - 1
_MAX_INT64 = 2**63 - 1

BAD_SUBJECT = "invalid subject"
NOT_USING_ALL = "not using all of the token wildcard(s)"
UNKNOWN_FUNCTION = "unknown function"
INDEX_OUT_OF_RANGE = "wildcard index out of range"
NOT_ENOUGH_ARGS = "not enough arguments passed to the function"
INVALID_ARG = "function argument is invalid or in the wrong format"
TOO_MANY_ARGS = "too many arguments passed to the function"
INVALID_TRANSFORM = "invalid transform"


class MappingError(ValueError):
    """A source or destination the reference refuses, worded as its errors print."""

    def __init__(self, reason: str, token: str = "") -> None:
        self.reason = reason
        self.token = token
        if reason == BAD_SUBJECT:
            text = reason
        else:
            text = f"invalid mapping destination: {reason}"
            if token:
                text = f"{text} in {token}"
        super().__init__(text)


@dataclass(frozen=True, slots=True)
class _Step:
    """One destination token: a literal (kind "") or a function of source tokens."""

    kind: str
    literal: bytes = b""
    indexes: tuple[int, ...] = ()  # positions in the source subject's tokens
    number: int = -1
    text: bytes = b""


def _atoi(text: str, *, limit: int = _MAX_INT64) -> int | None:
    """Go's strconv.Atoi on a space-trimmed argument: None where Go returns an error."""
    text = text.strip(" ")
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if -limit - 1 <= value <= limit else None


def _parse_token(token: str) -> tuple[str, list[int], int, str]:
    """(kind, wildcard indexes, int argument, string argument) of one destination token."""
    if len(token) > 1 and token[0] == "$":
        index = _atoi(token[1:])
        return ("wildcard", [index], -1, "") if index is not None else ("", [], -1, "")
    if not (len(token) > 4 and token.startswith("{{") and token.endswith("}}")):
        return "", [], -1, ""
    for kind, pattern in _FUNCTIONS:
        found = pattern.search(token)
        if found:
            return _parse_function(kind, _COMMA.split(found.group(1)), token)
    raise MappingError(UNKNOWN_FUNCTION, token)


def _parse_function(kind: str, args: list[str], token: str) -> tuple[str, list[int], int, str]:
    if kind == "wildcard":
        if len(args) == 1 and args[0] == "":
            raise MappingError(NOT_ENOUGH_ARGS, token)
        if len(args) > 1:
            raise MappingError(TOO_MANY_ARGS, token)
        return kind, [_int_arg(args[0], token)], -1, ""
    if kind in ("partition", "random"):
        if kind == "random" and len(args) != 1:
            raise MappingError(NOT_ENOUGH_ARGS, token)
        count = _atoi(args[0])
        if count is None or count > _MAX_INT32:
            raise MappingError(INVALID_ARG, token)
        return kind, [_int_arg(a, token) for a in args[1:]], _int32(count), ""
    if len(args) < 2:
        raise MappingError(NOT_ENOUGH_ARGS, token)
    if len(args) > 2:
        raise MappingError(TOO_MANY_ARGS, token)
    index = _int_arg(args[0], token)
    if kind == "split":
        if " " in args[1] or "." in args[1]:
            raise MappingError(INVALID_ARG, token)
        return kind, [index], -1, args[1]
    number = _atoi(args[1], limit=_MAX_INT32)
    if number is None:
        raise MappingError(INVALID_ARG, token)
    return kind, [index], number, ""


def _int_arg(text: str, token: str) -> int:
    value = _atoi(text)
    if value is None:
        raise MappingError(INVALID_ARG, token)
    return value


def _int32(value: int) -> int:
    """Go's int32() conversion of an int that may exceed it below."""
    return (value + 2**31) % 2**32 - 2**31


def _subject_info(subject: str) -> tuple[bool, list[str], int, bool]:
    """(valid, tokens, partial wildcards, has full wildcard), as the reference reads subjects."""
    if not subject:
        return False, [], 0, False
    tokens = subject.split(".")
    pwcs, fwc = 0, False
    for tok in tokens:
        if not tok or fwc:
            return False, [], 0, False
        if tok == ">":
            fwc = True
        elif tok == "*":
            pwcs += 1
    return True, tokens, pwcs, fwc


def _b(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


@dataclass(frozen=True, slots=True)
class Transform:
    """A compiled src → dest mapping; `match` rewrites a subject or says it does not apply."""

    src: str
    dest: str
    steps: tuple[_Step, ...]
    src_len: int
    rand: Callable[[int], int]

    @property
    def uses_source_tokens(self) -> bool:
        return any(step.indexes for step in self.steps)

    def match(self, subject: str) -> str | None:
        """The mapped subject, or None when the subject is not under `src` (or not literal)."""
        if self.src in ("", ">") and self.dest in ("", ">"):
            return subject
        tokens = subject.split(".")
        if any(not t or t in ("*", ">") for t in tokens):
            return None
        if self.src not in ("", ">") and not subject_matches(self.src, subject):
            return None
        return self.apply(tokens)

    def apply(self, tokens: list[str]) -> str:
        """Rewrite an already matched subject's tokens."""
        if not self.steps:
            return self.dest
        raw = [_b(t) for t in tokens]
        out: list[bytes] = []
        for step in self.steps:
            if step.kind == "" and step.literal == b">":
                out.append(b".".join(raw[self.src_len - 1 :]))
                break
            out.append(self._step(step, raw))
        return b".".join(out).decode("utf-8", "surrogateescape")

    def _step(self, step: _Step, raw: list[bytes]) -> bytes:
        kind = step.kind
        if kind == "":
            return step.literal
        if kind == "partition":
            key = b"".join(raw[i] for i in step.indexes) if step.indexes else b".".join(raw)
            return b"%d" % partition(key, step.number)
        if kind == "random":
            return b"%d" % (self.rand(2**31) % abs(step.number)) if step.number else b"0"
        if kind == "wildcard":
            index = step.indexes[0]
            return raw[index] if index < len(raw) else b""
        return _token_function(kind, raw[step.indexes[0]], step.number, step.text)


def _token_function(kind: str, tok: bytes, n: int, delim: bytes) -> bytes:
    """The functions of one source token; sizes out of range leave the token whole."""
    size = len(tok)
    if kind == "split":
        parts = tok.split(delim) if delim else [tok[i : i + 1] for i in range(size)]
        pieces: list[bytes] = []
        for j, part in enumerate(parts):
            pieces.append(part)
            if j < len(parts) - 1 and parts[j + 1] and not (j == 0 and not part):
                pieces.append(b".")
        return b"".join(pieces)
    if not 0 < n < size:
        return tok
    if kind == "split_from_left":
        return tok[:n] + b"." + tok[n:]
    if kind == "split_from_right":
        return tok[: size - n] + b"." + tok[size - n :]
    if kind == "left":
        return tok[:n]
    if kind == "right":
        return tok[size - n :]
    if kind == "slice_from_left":
        return b".".join(tok[i : i + n] for i in range(0, size, n))
    rest = size % n  # slice_from_right
    head = [tok[:rest]] if rest else []
    return b".".join(head + [tok[i : i + n] for i in range(rest, size, n)])


def partition(key: bytes, buckets: int) -> int:
    """FNV-1a 32 of key modulo buckets (as uint32), the reference's partition number."""
    if buckets == 0:
        return 0
    h = 0x811C9DC5
    for byte in key:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h % (buckets & 0xFFFFFFFF)


def compile_transform(
    src: str, dest: str, *, rand: Callable[[int], int] = random.randrange
) -> Transform | None:
    """Compile as NewSubjectTransform does; None for an empty dest (no transform)."""
    if not dest:
        return None
    src = src or ">"
    src_ok, src_tokens, pwcs, src_fwc = _subject_info(src)
    dest_ok, dest_tokens, dest_pwcs, dest_fwc = _subject_info(dest)
    if not src_ok or not dest_ok or dest_pwcs > 0 or src_fwc != dest_fwc:
        raise MappingError(BAD_SUBJECT)
    # The n-th `*` of the source (1-based) sits at this token position; others read token 0.
    positions = [i for i, tok in enumerate(src_tokens) if tok == "*"]
    steps: list[_Step] = []
    for token in dest_tokens:
        kind, indexes, number, text = _parse_token(token)
        if kind == "":
            steps.append(_Step("", literal=_b(token)))
        elif kind == "random" or (kind == "partition" and not (pwcs or src_fwc)):
            steps.append(_Step(kind, number=number))
        elif not (pwcs or src_fwc):
            raise MappingError(INDEX_OUT_OF_RANGE, token)
        else:
            for index in indexes:
                if index > pwcs:
                    raise MappingError(INDEX_OUT_OF_RANGE, f"{token}: [{index}]")
            mapped = tuple(positions[i - 1] if i >= 1 else 0 for i in indexes)
            steps.append(_Step(kind, indexes=mapped, number=number, text=_b(text)))
    return Transform(src, dest, tuple(steps), len(src_tokens), rand)


def validate_mapping(src: str, dest: str) -> None:
    """The reference's ValidateMapping: destination syntax first, then compilation."""
    if not dest:
        return
    fwc = False
    for token in dest.split("."):
        if not token or fwc:
            raise MappingError(INVALID_TRANSFORM, token)
        if len(token) > 4 and token.startswith("{{") and token.endswith("}}"):
            if not any(p.search(token) for _, p in _FUNCTIONS):
                raise MappingError(UNKNOWN_FUNCTION, token)
            continue
        if token == ">":
            fwc = True
        elif any(ch in token for ch in "\t\n\f\r "):
            raise MappingError(INVALID_TRANSFORM)
    compile_transform(src, dest)


def tokenize_wildcards(subject: str) -> str:
    """`a.*.*` → `a.$1.$2`: the identity mapping of a wildcard source."""
    count = 0
    out: list[str] = []
    for token in subject.split("."):
        if token == "*":
            count += 1
            out.append(f"${count}")
        else:
            out.append(token)
    return ".".join(out)
