"""Typed reads of a JetStream API request's JSON, failing as the reference's decoder does.

Clients see Go's unmarshal errors verbatim (`json: cannot unmarshal string into Go
struct field StreamConfigRequest.max_msgs of type int64`), so every config parser
reads its fields through these, bound to the Go struct its errors name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from log import errors
from log.errors import ApiError

_KINDS = {str: "string", bool: "bool", int: "number", float: "number", list: "array"}

# A Go struct's JSON fields, each with the struct it holds (an object, or a list of
# them) or None for anything else.
Schema = Mapping[str, "Schema | None"]


def fields(words: str, **nested: Schema) -> dict[str, Schema | None]:
    """A schema from space-separated field names, `nested` naming the struct fields."""
    return {**dict.fromkeys(words.split()), **nested}


def refuse_unknown(raw: Any, schema: Schema) -> None:
    """Refuse a field the Go structs lack, at any depth, as the reference's strict decoder
    does (the first in document order), rather than ignore what the client asked for."""
    items = raw if isinstance(raw, list) else [raw]
    for item in items:
        if not isinstance(item, Mapping):
            continue  # a type error, for the typed reads to name
        for key, value in item.items():
            if key not in schema:
                raise errors.invalid_json(f'json: unknown field "{key}"')
            inner = schema[key]
            if inner is not None and value is not None:
                refuse_unknown(value, inner)


@dataclass(frozen=True, slots=True)
class Fields:
    struct: str  # e.g. "StreamConfigRequest", "ConsumerConfig.config"

    def type_error(self, key: str, value: Any, want: str) -> ApiError:
        kind = _KINDS.get(type(value), "object")
        where = f"Go struct field {self.struct}.{key} of type {want}"
        return errors.invalid_json(f"json: cannot unmarshal {kind} into {where}")

    def str(self, raw: Mapping[str, Any], key: str) -> str:
        value = raw.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise self.type_error(key, value, "string")
        return value

    def int(self, raw: Mapping[str, Any], key: str) -> int:
        value = raw.get(key)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise self.type_error(key, value, "int64")
        return int(value)

    def uint(self, raw: Mapping[str, Any], key: str) -> int:
        """A uint64 field: Go's decoder names the number it refuses (negative, fractional)."""
        value = raw.get(key)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.type_error(key, value, "uint64")
        if value < 0 or int(value) != value:
            where = f"Go struct field {self.struct}.{key} of type uint64"
            raise errors.invalid_json(f"json: cannot unmarshal number {value} into {where}")
        return int(value)

    def bool(self, raw: Mapping[str, Any], key: str) -> bool:
        value = raw.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.type_error(key, value, "bool")
        return value

    def str_list(self, raw: Mapping[str, Any], key: str) -> list[str]:
        value = raw.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.type_error(key, value, "[]string")
        return value

    def int_list(self, raw: Mapping[str, Any], key: str, want: str) -> list[int]:
        """`want` is the Go type the reference names, e.g. `[]time.Duration` for backoff."""
        value = raw.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.type_error(key, value, want)
        return value

    def dict(self, raw: Mapping[str, Any], key: str) -> dict[str, Any]:
        value = raw.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.type_error(key, value, "map[string]string")
        return dict(value)

    @staticmethod
    def enum(raw: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> str:
        value = raw.get(key)
        if value is None:
            return allowed[0]
        if not isinstance(value, str) or value not in allowed:
            token = json.dumps(value)
            raise errors.invalid_json(f"can not unmarshal {json.dumps(token)}")
        return value
