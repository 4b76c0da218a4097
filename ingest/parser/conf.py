"""The NATS configuration language, parsed without touching the file system.

nats-server's format is a forgiving blend of its own syntax and JSON: `=`, `:` or
plain whitespace between key and value, optional commas and semicolons, bare
strings, `#` and `//` comments, size suffixes, `$variables` and `include`. A
drop-in server must accept the same files, so this module follows the reference
lexer's decisions (what ends a bare word, which suffixes mean 1000 and which 1024,
that `2m` unquoted is the integer two million), and departs from it only where
the reference silently loses data or rejects obviously meant input (`[1,2]`).

The parser is sans-IO: `include` asks a loader callable for the text, so tests
and callers decide where files come from. The result is plain Python values;
each block is a `Table` (a dict) that also remembers where its keys were written
and which of them served as variables, because the options layer must name
`file:line:col` in its errors and must not call a variable an unknown field.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "ConfigError",
    "Loader",
    "Position",
    "Table",
    "parse",
    "parse_file",
    "read_relative",
]

# Nesting deeper than this is surely garbage; refusing it keeps the recursive
# descent away from Python's own recursion limit.
_MAX_DEPTH = 128
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# Suffix multipliers of the reference: a bare letter is decimal, a letter
# followed by B, I or IB is binary.
_SIZE_POWERS = {"k": 1, "m": 2, "g": 3, "t": 4, "p": 5, "e": 6}
_NUMBER = re.compile(r"-?\d+")
_SIZED = re.compile(r"(-?\d+)([kmgtpe])([bi]*)", re.IGNORECASE)
_FLOAT = re.compile(r"-?\d+\.\d+")
_ADDRESS = re.compile(r"\d+\.\d+\.[\d.:-]*")
_DATETIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
_BOOLS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}
# bcrypt hashes start with `$2a$`; the reference reads them as strings, not variables.
_BCRYPT_PREFIX = "2a$"

_SPACE = " \t"
_NEWLINE = "\r\n"
_KEY_END = frozenset(" \t\r\n\f\v=:{")
_BARE_END = frozenset(" \t\r\n;,]}")
_INCLUDE_END = frozenset(" \t\r\n;}")


@dataclass(frozen=True, slots=True)
class Position:
    """Where a key was written; columns count from 1 like an editor's."""

    file: str | None
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file or '<string>'}:{self.line}:{self.column}"


class ConfigError(Exception):
    """A configuration that cannot be used, with the place to fix it."""

    def __init__(self, reason: str, position: Position | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.position = position

    @property
    def file(self) -> str | None:
        return self.position.file if self.position else None

    @property
    def line(self) -> int | None:
        return self.position.line if self.position else None

    @property
    def column(self) -> int | None:
        return self.position.column if self.position else None

    def __str__(self) -> str:
        return f"{self.position}: {self.reason}" if self.position else self.reason


class Table(dict[str, Any]):
    """A block of the configuration: a dict plus where each key came from."""

    __slots__ = ("positions", "variables")

    def __init__(self) -> None:
        super().__init__()
        self.positions: dict[str, Position] = {}
        # Keys read through `$name`: the reference tolerates them even when the
        # options layer does not know them, since they exist to be referenced.
        self.variables: set[str] = set()

    def position(self, key: str) -> Position | None:
        return self.positions.get(key)


Loader = Callable[[str, str | None], tuple[str, str]]
"""(name written after `include`, including file or None) -> (file name, text)."""


def read_relative(name: str, including: str | None) -> tuple[str, str]:
    """Read an include next to the file that includes it.

    The reference joins the including folder and the name even when the name is
    absolute (`include /etc/x.conf` from `/srv/a.conf` opens `/srv/etc/x.conf`);
    configs written for it must resolve identically here.
    """
    folder = os.path.dirname(including) if including else ""
    path = os.path.normpath(os.path.join(folder or ".", name.lstrip("/")))
    try:
        with open(path, encoding="utf-8") as handle:
            return path, handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"error opening config file: {exc}") from exc


def parse_file(path: str, *, loader: Loader | None = None) -> Table:
    """Parse the configuration file at `path` (its includes resolve beside it)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"error opening config file: {exc}") from exc
    return parse(text, file=path, loader=loader)


def parse(
    text: str,
    *,
    file: str | None = None,
    loader: Loader | None = None,
    env: Mapping[str, str] | None = None,
) -> Table:
    """Parse configuration text; `file` names it in errors and anchors includes."""
    parser = _Parser(text, file, loader or read_relative, os.environ if env is None else env)
    return parser.document()


class _Parser:
    """Recursive descent over the text; one instance per file."""

    def __init__(
        self,
        text: str,
        file: str | None,
        loader: Loader,
        env: Mapping[str, str],
        *,
        chain: tuple[str, ...] = (),
        resolving: frozenset[str] = frozenset(),
    ) -> None:
        self.text = text
        self.file = file
        self.loader = loader
        self.env = env
        self.i = 0
        self.line = 1
        self.line_start = 0
        self.scopes: list[Table] = []
        self.chain = chain  # files that include this one, to refuse cycles
        self.resolving = resolving  # environment variables being expanded

    # -- position and errors -------------------------------------------------

    def here(self) -> Position:
        return Position(self.file, self.line, self.i - self.line_start + 1)

    def fail(self, reason: str, position: Position | None = None) -> ConfigError:
        return ConfigError(reason, position or self.here())

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""

    def advance(self) -> str:
        ch = self.text[self.i]
        self.i += 1
        if ch == "\n":
            self.line += 1
            self.line_start = self.i
        return ch

    # -- whitespace and comments ---------------------------------------------

    def at_comment(self) -> bool:
        return self.peek() == "#" or self.text.startswith("//", self.i)

    def skip_comment(self) -> None:
        while self.peek() and self.peek() not in _NEWLINE:
            self.advance()

    def skip_blank(self, *, newlines: bool) -> None:
        """Skip spaces and comments, and line breaks too when `newlines`."""
        while True:
            ch = self.peek()
            if ch and (ch in _SPACE or (newlines and ch.isspace())):
                self.advance()
            elif ch and self.at_comment():
                self.skip_comment()
            else:
                return

    # -- structure -----------------------------------------------------------

    def document(self) -> Table:
        table = Table()
        self.scopes.append(table)
        self.entries(table, closer="")
        return table

    def entries(self, table: Table, *, closer: str) -> None:
        """Read `key value` entries into `table` until `closer` (or end of text)."""
        while True:
            self.skip_blank(newlines=True)
            ch = self.peek()
            if ch in ";," and ch:
                self.advance()
                continue
            if not ch:
                if closer:
                    raise self.fail(f"unexpected end of file, expected {closer!r}")
                return
            if ch == closer:
                self.advance()
                return
            if ch == "{" and not closer:
                # A top-level brace wraps the document, as in JSON.
                self.advance()
                self.nested(lambda: self.entries(table, closer="}"))
                continue
            if ch in "}]":
                raise self.fail(f"unexpected {ch!r}")
            self.entry(table)
            self.value_end(closer)

    def entry(self, table: Table) -> None:
        where = self.here()
        key = self.key()
        if key.lower() == "include" and self.peek() in _SPACE and self.peek():
            self.include(table, where)
            return
        self.skip_blank_before_value()
        if self.peek() in "=:" and self.peek():
            self.advance()
            self.skip_blank(newlines=False)
            if self.peek() and self.peek() in _NEWLINE:
                raise self.fail("expected a value but found a new line")
        elif not self.peek():
            raise self.fail(f"key {key!r} has no value", where)
        table[key] = self.value()
        table.positions[key] = where

    def skip_blank_before_value(self) -> None:
        # The reference lets a value (or a block's brace) follow its key on the next line.
        while self.peek() and self.peek().isspace():
            self.advance()

    def key(self) -> str:
        quote = self.peek()
        if quote in "\"'":
            self.advance()
            start = self.i
            while self.peek() != quote:
                if not self.peek() or self.peek() in _NEWLINE:
                    raise self.fail("unterminated quoted key")
                self.advance()
            key = self.text[start : self.i]
            self.advance()
            return key
        start = self.i
        while self.peek() and self.peek() not in _KEY_END:
            self.advance()
        if self.i == start:
            raise self.fail(f"expected a key but found {self.peek()!r}")
        return self.text[start : self.i]

    def value_end(self, closer: str) -> None:
        """After a value: a line break, `;`, `,`, a comment, the block's end or EOF."""
        self.skip_blank(newlines=False)
        ch = self.peek()
        if not ch or ch in "\r\n;,":
            if ch:
                self.advance()
            return
        if ch == "}" and closer == "}":
            return
        raise self.fail(f"expected a new line, ';' or ',' after a value, but found {ch!r}")

    def nested(self, body: Callable[[], Any]) -> Any:
        if len(self.scopes) > _MAX_DEPTH:
            raise self.fail("configuration nested too deeply")
        self.scopes.append(Table())  # placeholder keeps depth; replaced by callers
        try:
            return body()
        finally:
            self.scopes.pop()

    # -- values --------------------------------------------------------------

    def value(self) -> Any:
        ch = self.peek()
        if ch == "[":
            self.advance()
            return self.nested(self.array)
        if ch == "{":
            self.advance()
            return self.nested(self.table)
        if ch == '"':
            self.advance()
            return self.quoted()
        if ch == "'":
            self.advance()
            return self.raw_quoted()
        if ch == "(":
            self.advance()
            return self.block_string()
        if ch == "-" or ch.isdigit():
            return self.number()
        if ch == ".":
            raise self.fail("floats must start with a digit")
        if not ch:
            return ""  # `key =` at the very end: the reference reads an empty string
        return self.bare()

    def table(self) -> Table:
        table = Table()
        self.scopes[-1] = table
        self.entries(table, closer="}")
        return table

    def array(self) -> list[Any]:
        items: list[Any] = []
        while True:
            self.skip_blank(newlines=True)
            ch = self.peek()
            if ch == "]":
                self.advance()
                return items
            if not ch:
                raise self.fail("unexpected end of file in an array")
            if ch == ",":
                raise self.fail("unexpected ',' in an array")
            items.append(self.value())
            self.skip_blank(newlines=False)
            ch = self.peek()
            if ch == "]":
                continue
            if ch and ch in ",\r\n":
                self.advance()
                continue
            raise self.fail(f"expected ',' or ']' in an array, but found {ch!r}")

    def escape(self) -> str:
        """Decode one backslash escape; the backslash is already consumed."""
        ch = self.peek()
        if ch == "x":
            self.advance()
            digits = self.text[self.i : self.i + 2]
            if len(digits) != 2 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise self.fail(f"expected two hexadecimal digits after '\\x', got {digits!r}")
            self.advance()
            self.advance()
            return chr(int(digits, 16))
        if ch in _ESCAPES and ch:
            self.advance()
            return _ESCAPES[ch]
        raise self.fail(
            f'invalid escape character {ch!r}; allowed: \\xXX, \\t, \\n, \\r, \\", \\\\'
        )

    def quoted(self) -> str:
        parts: list[str] = []
        while True:
            ch = self.peek()
            if not ch:
                raise self.fail("unterminated string")
            self.advance()
            if ch == '"':
                return "".join(parts)
            parts.append(self.escape() if ch == "\\" else ch)

    def raw_quoted(self) -> str:
        start = self.i
        while self.peek() != "'":
            if not self.peek():
                raise self.fail("unterminated string")
            self.advance()
        text = self.text[start : self.i]
        self.advance()
        return text

    def block_string(self) -> str:
        """`( ... )` spanning lines; it ends at a `)` alone at the start of a line."""
        start = self.i
        while True:
            end = self.text.find("\n)", self.i)
            if end < 0:
                raise self.fail("unterminated block string")
            after = self.text[end + 2 : end + 3]
            while self.i < end + 2:
                self.advance()
            if after in ("", "\n", "\r"):
                return self.text[start : end + 1]

    def word(self, ends: frozenset[str]) -> tuple[str, bool]:
        """A bare run of characters, with escapes decoded; says if any were."""
        parts: list[str] = []
        escaped = False
        while self.peek() and self.peek() not in ends:
            ch = self.advance()
            if ch == "\\":
                parts.append(self.escape())
                escaped = True
            else:
                parts.append(ch)
        return "".join(parts), escaped

    def number(self) -> Any:
        where = self.here()
        text, _ = self.word(_BARE_END)
        lowered = text.lower()
        if _NUMBER.fullmatch(text):
            return self.int64(text, 1, where)
        if sized := _SIZED.fullmatch(text):
            return self.int64(sized.group(1), self.multiplier(sized, where), where)
        if _FLOAT.fullmatch(text):
            number = float(text)
            if math.isinf(number):
                raise self.fail(f"float {text!r} is out of range", where)
            return number
        if text.startswith("-"):
            raise self.fail(f"expected a number but got {text!r}", where)
        if _DATETIME.fullmatch(text):
            try:
                return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
            except ValueError as exc:
                raise self.fail(f"invalid date {text!r}: {exc}", where) from exc
        if "-" in lowered and not _ADDRESS.fullmatch(text):
            raise self.fail(f"dates must be in full Zulu form, got {text!r}", where)
        return text  # `10s`, `1h30m`, `127.0.0.1:4222`: strings for the options layer

    def multiplier(self, match: re.Match[str], where: Position) -> int:
        _, letter, tail = match.groups()
        tail = tail.lower()
        if tail not in ("", "b", "i", "ib"):
            raise self.fail(f"unknown size suffix in {match.group(0)!r}", where)
        base = 1024 if tail else 1000
        return base ** _SIZE_POWERS[letter.lower()]

    def int64(self, digits: str, multiplier: int, where: Position) -> int:
        # The length check keeps int() clear of Python's limit on digit strings.
        number = int(digits) * multiplier if len(digits) <= 20 else _INT64_MAX + 1
        if not _INT64_MIN <= number <= _INT64_MAX:
            raise self.fail(f"integer {digits!r} is out of the 64-bit range", where)
        return number

    def bare(self) -> Any:
        where = self.here()
        text, escaped = self.word(_BARE_END)
        if escaped:
            return text
        if text.lower() in _BOOLS:
            return _BOOLS[text.lower()]
        if text.startswith("$"):
            return self.variable(text[1:], where)
        return text

    # -- variables and includes ---------------------------------------------

    def variable(self, name: str, where: Position) -> Any:
        if name.startswith(_BCRYPT_PREFIX):
            return "$" + name
        for scope in reversed(self.scopes):
            if name in scope:
                scope.variables.add(name)
                return scope[name]
        if name in self.resolving:
            raise self.fail(f"variable reference cycle for {name!r}", where)
        if name not in self.env:
            raise self.fail(f"variable reference for {name!r} can not be found", where)
        # Environment values are configuration text too: `4222` is a number.
        sub = _Parser(
            f"pk={self.env[name]}",
            self.file,
            self.loader,
            self.env,
            chain=self.chain,
            resolving=self.resolving | {name},
        )
        try:
            return sub.document().get("pk", "")
        except ConfigError as exc:
            raise self.fail(f"variable {name!r} from the environment: {exc.reason}", where) from exc

    def include(self, table: Table, where: Position) -> None:
        self.skip_blank(newlines=False)
        quote = self.peek()
        if quote in "\"'" and quote:
            self.advance()
            start = self.i
            while self.peek() != quote:
                if not self.peek():
                    raise self.fail("unterminated include name")
                self.advance()
            name = self.text[start : self.i]
            self.advance()
        else:
            name, _ = self.word(_INCLUDE_END)
        if not name:
            raise self.fail("include needs a file name", where)
        try:
            path, text = self.loader(name, self.file)
        except ConfigError as exc:
            raise self.fail(f"error parsing include file {name!r}: {exc.reason}", where) from exc
        if path in self.chain or path == self.file:
            raise self.fail(f"include cycle through {path!r}", where)
        sub = _Parser(
            text,
            path,
            self.loader,
            self.env,
            chain=(*self.chain, *((self.file,) if self.file else ())),
            resolving=self.resolving,
        )
        included = sub.document()
        table.update(included)
        table.positions.update(included.positions)
        table.variables |= included.variables
