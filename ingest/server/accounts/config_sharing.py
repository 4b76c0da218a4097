"""An account's `exports`, `imports` and `limits`, read with the reference's keys and errors.

Exports and imports are checked against each other once every account is read:
an import of a subject its account does not export to the importer stops the
server at start, naming the import, as the reference does.
"""

from __future__ import annotations

import re
from typing import Any

from ingest.parser.conf import ConfigError, Table
from ingest.parser.mapping import MappingError, compile_transform, tokenize_wildcards
from ingest.parser.subjects import is_subset
from ingest.server.accounts.settings import (
    CHUNKED,
    HEADERS_SAMPLING,
    SINGLETON,
    STREAM,
    AccountConfig,
    Export,
    Import,
    JetStreamLimits,
    Latency,
)
from ingest.server.config_reader import Section
from ingest.server.gofmt import go_type, go_value
from ingest.server.settings import parse_duration, storage_size

_RESPONSE_TYPES = {
    "single": SINGLETON,
    "singleton": SINGLETON,
    "stream": STREAM,
    "chunk": CHUNKED,
    "chunked": CHUNKED,
}
# Export and import keys the reference accepts that change nothing here.
_EXPORT_IGNORED = ("advertise", "allow_trace")
_IMPORT_IGNORED = ("share", "allow_trace")
_LIMITS = {
    "max_connections": "max_connections",
    "max_conn": "max_connections",
    "max_subscriptions": "max_subscriptions",
    "max_subs": "max_subscriptions",
    "max_payload": "max_payload",
    "max_pay": "max_payload",
    "max_leafnodes": "max_leafnodes",
    "max_leafs": "max_leafnodes",
}
_JS_LIMITS = {
    "max_memory": "max_memory",
    "max_mem": "max_memory",
    "max_file": "max_file",
    "max_store": "max_file",
    "max_streams": "max_streams",
    "max_consumers": "max_consumers",
    "max_ack_pending": "max_ack_pending",
    "mem_max_stream_bytes": "memory_max_stream_bytes",
    "memory_max_stream_bytes": "memory_max_stream_bytes",
    "disk_max_stream_bytes": "disk_max_stream_bytes",
    "store_max_stream_bytes": "disk_max_stream_bytes",
}


def read_exports(section: Section, field: str) -> tuple[Export, ...]:
    items = section.table[field]
    if not isinstance(items, list):
        items = [items]
    return tuple(_export(section, field, item) for item in items)


def read_imports(section: Section, field: str) -> tuple[Import, ...]:
    items = section.table[field]
    if not isinstance(items, list):
        items = [items]
    return tuple(_import(section, field, item) for item in items)


def _error(item: Table, key: str, reason: str) -> ConfigError:
    return ConfigError(reason, item.position(key))


def _export(section: Section, field: str, item: Any) -> Export:
    if not isinstance(item, Table):
        raise section.error(
            field, f"Export Items should be a map with type entry, got {go_type(item)}"
        )
    values: dict[str, Any] = {}
    service: bool | None = None
    response: tuple[str, str] | None = None  # (key, type) until the kind is known
    for key, value in item.items():
        lowered = key.lower()
        if lowered in ("stream", "service"):
            if service is not None:
                seen = "service" if service else "stream"
                raise _error(item, key, f'Detected {lowered} "{value}" but already saw a {seen}')
            service = lowered == "service"
            if not service and response is not None:
                raise _error(item, response[0], "Detected response directive on non-service")
            values["subject"] = str(value)
        elif lowered in ("response", "response_type"):
            if service is False:
                raise _error(item, key, "Detected response directive on non-service")
            kind = _RESPONSE_TYPES.get(str(value).lower())
            if kind is None:
                raise _error(item, key, f'Unknown response type: "{value}"')
            response = (key, kind)
        elif lowered in ("threshold", "response_threshold"):
            try:
                values["response_threshold"] = parse_duration(str(value))
            except ValueError as exc:
                raise _error(item, key, f"error parsing {key}: {exc}") from exc
        elif lowered == "latency":
            values["latency"] = _latency(item, key, value)
        elif lowered == "accounts":
            names = value if isinstance(value, list) else [value]
            values["accounts"] = tuple(str(name) for name in names)
        elif lowered == "account_token_position":
            values["account_token_position"] = _position(item, key, value)
        elif lowered not in _EXPORT_IGNORED and key not in item.variables:
            raise _error(item, key, f'unknown field "{key}"')
    if service is None:
        raise section.error(field, "Expected a stream or service entry in the export")
    if response is not None:
        values["response_type"] = response[1]
    return Export(service=service, **values)


def _position(item: Table, key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        kind = go_type(value)
        raise _error(item, key, f"interface conversion: interface {{}} is {kind}, not int64")
    return value


def _latency(item: Table, key: str, value: Any) -> Latency:
    if isinstance(value, str):
        return Latency(sampling=100, subject=value)
    if not isinstance(value, Table):
        raise _error(item, key, f"Expected latency to be a map or a subject, got {value!r}")
    subject = value.get("subject")
    sampling = value.get("sampling", 100)
    if isinstance(sampling, str) and sampling.lower() == "headers":
        sampling = HEADERS_SAMPLING
    elif isinstance(sampling, str):
        digits = sampling.removesuffix("%")
        if not re.fullmatch(r"[+-]?[0-9]+", digits):
            raise _error(
                value,
                "sampling",
                f'Failed to parse latency sample: strconv.Atoi: parsing "{digits}": invalid syntax',
            )
        sampling = int(digits)
    percent = int(sampling)
    if percent != HEADERS_SAMPLING and not 1 <= percent <= 100:
        raise _error(value, "sampling", "bad sampling percentage, should be 1-100")
    if not subject:
        raise _error(item, key, "Latency subject required, but missing")
    return Latency(sampling=percent, subject=str(subject))


def _import(section: Section, field: str, item: Any) -> Import:
    if not isinstance(item, Table):
        raise section.error(
            field, f"Import Items should be a map with type entry, got {go_type(item)}"
        )
    values: dict[str, Any] = {}
    for key, value in item.items():
        lowered = key.lower()
        if lowered in ("stream", "service"):
            if not isinstance(value, Table) or not value.get("account") or not value.get("subject"):
                raise section.error(field, "Expect an account name and a subject")
            values.update(
                service=lowered == "service",
                account=str(value["account"]),
                subject=str(value["subject"]),
            )
        elif lowered in ("to", "prefix"):
            values[lowered] = str(value)
        elif lowered not in _IMPORT_IGNORED and key not in item.variables:
            raise _error(item, key, f'unknown field "{key}"')
    if "account" not in values:
        raise section.error(field, "Expect an account name and a subject")
    return Import(**values)


def read_limits(section: Section, field: str) -> dict[str, int]:
    table = section.table[field]
    if not isinstance(table, Table):
        raise section.error(
            field, f"Expected account limits to be a map/struct, got {go_value(table)}"
        )
    out: dict[str, int] = {}
    for key, value in table.items():
        lowered = key.lower()
        if lowered not in _LIMITS:
            if key in table.variables:
                continue
            raise _error(table, key, f'Unknown field "{key}" parsing account limits')
        name = _LIMITS[lowered]
        if not isinstance(value, int) or isinstance(value, bool):
            kind = go_type(value)
            raise _error(table, key, f"interface conversion: interface {{}} is {kind}, not int64")
        out[name] = value
    return out


def read_jetstream_limits(section: Section, field: str, table: Table) -> JetStreamLimits:
    """The map form of an account's `jetstream`: its JetStream limits."""
    values: dict[str, Any] = {}
    for key, value in table.items():
        lowered = key.lower()
        if lowered in ("max_bytes_required", "max_stream_bytes"):
            values["max_bytes_required"] = bool(value)
            continue
        if lowered not in _JS_LIMITS:
            if key in table.variables:
                continue
            raise _error(table, key, f'unknown field "{key}"')
        name = _JS_LIMITS[lowered]
        try:
            values[name] = storage_size(value) if isinstance(value, str) else int(value)
        except ValueError as exc:
            raise _error(table, key, f"{key} {exc}") from exc
    return JetStreamLimits(**values)


def check_sharing(top: Section, key: str, accounts: tuple[AccountConfig, ...]) -> None:
    """Every import must name a defined account that exports the subject to the importer;
    the reference refuses the config otherwise, naming the import."""
    by_name = {account.name: account for account in accounts}
    for account in accounts:
        for export in account.exports:
            refused = export.token_position_error()
            if refused is not None:
                raise top.error(key, refused)
    for account in accounts:
        for imp in account.imports:
            kind = "service" if imp.service else "stream"
            exporter = by_name.get(imp.account)
            if exporter is None:
                raise top.error(key, f'"{imp.account}" account not defined for {kind} import')
            if find_export(exporter, imp, account.name) is None:
                raise top.error(
                    key,
                    f'Error adding {kind} import "{imp.subject}": {kind} import not authorized',
                )
            if imp.service and imp.to:
                try:
                    compile_transform(imp.to, tokenize_wildcards(imp.subject))
                except MappingError as exc:
                    raise top.error(
                        key,
                        f'Error adding service import "{imp.subject}": failed to create mapping '
                        f'transform for service import subject from "{imp.to}" to '
                        f'"{imp.subject}": {exc}',
                    ) from exc


def find_export(exporter: AccountConfig, imp: Import, importer: str) -> Export | None:
    """The export of `exporter` that covers `imp` for `importer`, if any."""
    for export in exporter.exports:
        if (
            export.service == imp.service
            and is_subset(imp.subject, export.subject)
            and export.allows(importer, imp.subject)
        ):
            return export
    return None
