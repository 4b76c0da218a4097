"""Typed lake tables: payloads as columns, per stream metadata, schemas from a KV bucket.

The entry point shared by the compactor, the union view and `jetlake inspect`
is `type_rows` (see `typer`); `lake_spec` reads a stream's metadata and
`load_registry` the `jetlake_schemas` bucket.
"""

from log.compactor.typed.registry import Registry, load_registry
from log.compactor.typed.spec import LakeSpec, SpecError, TableSpec, lake_spec
from log.compactor.typed.typer import REJECTS_SCHEMA, Typed, payload_of, type_rows

__all__ = [
    "REJECTS_SCHEMA",
    "LakeSpec",
    "Registry",
    "SpecError",
    "TableSpec",
    "Typed",
    "lake_spec",
    "load_registry",
    "payload_of",
    "type_rows",
]
