"""Typed reads of one config-file table, each error and warning at its key's position.

Every section module (the top level's, a cluster's, an account's, the lake's) reads its
keys through this one reader, so types, aliases and messages match the reference's everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from ingest.parser.conf import ConfigError, Table
from ingest.parser.subjects import is_valid_subject
from ingest.server.gofmt import go_type
from ingest.server.settings import parse_duration, storage_size

_TYPE_NAMES = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}


def describe(value: Any) -> str:
    if isinstance(value, Table):
        return "map"
    if isinstance(value, datetime):
        return "date"
    return f"{_TYPE_NAMES.get(type(value), type(value).__name__)} {value!r}"


class Section:
    """One table being interpreted, reporting problems at the key's position."""

    def __init__(self, table: Table, warnings: list[str]) -> None:
        self.table = table
        self.warnings = warnings

    def error(self, key: str, reason: str) -> ConfigError:
        return ConfigError(reason, self.table.position(key))

    def warn(self, key: str, reason: str) -> None:
        self.warnings.append(f'{self.table.position(key)}: invalid use of field "{key}": {reason}')

    def unknown(self, key: str) -> None:
        if key not in self.table.variables:
            raise self.error(key, f'unknown field "{key}"')

    def typed(self, key: str, kind: type | tuple[type, ...], name: str) -> Any:
        value = self.table[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise self.error(key, f'expected {name} for "{key}", got {describe(value)}')
        return value

    def integer(self, key: str) -> int:
        return self.typed(key, int, "an integer")

    def string(self, key: str) -> str:
        return self.typed(key, str, "a string")

    def boolean(self, key: str) -> bool:
        return self.typed(key, bool, "a boolean")

    def address(self, key: str) -> tuple[str | None, int]:
        """A port, or "host:port" with an IPv6 host in brackets, as the reference's
        `parseListen` reads every `listen`: the host None for a bare port."""
        value = self.typed(key, (int, str), "a port or host:port")
        if isinstance(value, int):
            return None, value
        host, sep, port = value.rpartition(":")
        if not sep or not port.lstrip("-").isdigit() or (":" in host and not host.startswith("[")):
            raise self.error(key, f'could not parse address string "{value}"')
        return host.strip("[]"), int(port)

    def section(self, key: str) -> Section:
        table = self.typed(key, Table, "a map")
        return Section(table, self.warnings)

    def entry(self, table: Table) -> Section:
        """A table inside a list (a leafnode remote), read like a section."""
        return Section(table, self.warnings)

    def maps(
        self, key: str, field: str, entry: str, shown: Callable[[Any], str] = go_type
    ) -> Iterator[Section]:
        """Each map of a list (users, leafnode remotes), read as a section, with the
        reference's errors for a value that is no array (`field` named, the value
        `shown`: its type, or for users the value itself) and an item that is no map."""
        value = self.table[key]
        if not isinstance(value, list):
            raise self.error(key, f"Expected {field} field to be an array, got {shown(value)}")
        for item in value:
            if not isinstance(item, Table):
                raise self.error(key, f"Expected {entry} entry to be a map/struct, got {item}")
            yield Section(item, self.warnings)

    def duration(self, key: str) -> float:
        """A duration string, or (warned) a number of seconds."""
        value = self.typed(key, (str, int), "a duration")
        if isinstance(value, int):
            self.warn(key, f"{key} should be converted to a duration")
            return float(value)
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise self.error(key, f"error parsing {key}: {exc}") from exc

    def timeout(self, key: str, context: str) -> float:
        """Seconds as an int, a float, or a duration string."""
        value = self.typed(key, (int, float, str), "a number of seconds or a duration")
        if not isinstance(value, str):
            return float(value)
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise self.error(key, f"error parsing {context}, 'timeout' {exc}") from exc

    def subjects(self, key: str, *, queue: bool) -> tuple[str, ...]:
        value = self.table[key]
        items = value if isinstance(value, list) else [value]
        for subject in items:
            if not isinstance(subject, str):
                raise self.error(key, "Subject in permissions array cannot be cast to string")
            literal, _, group = subject.partition(" ") if queue else (subject, "", "")
            if not is_valid_subject(literal) or (group and not is_valid_subject(group)):
                raise self.error(key, f'subject "{subject}" is not a valid subject')
        return tuple(items)


def read_size(section: Section, key: str, label: str) -> int:
    """A size in bytes: a number (`64MB` unquoted is one) or a string such as "64M"."""
    value = section.table[key]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise section.error(key, f"{label} must be int64 or string")
    try:
        return storage_size(value)
    except ValueError as exc:
        raise section.error(key, f"{label} {exc}") from exc
