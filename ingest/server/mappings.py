"""Server-level subject mappings (`mappings {}`): core publishes rewritten before routing.

A mapping sends a source subject to one destination, or to several by weight
(canary releases, traffic splits); weights under 100% keep the remainder on
the original subject unless it is listed itself, in which case the rest is
dropped — the reference's rules, read from its config syntax:

    mappings {
      "orders.*": "orders.{{partition(3,1)}}.{{wildcard(1)}}"
      "api": [{destination: "api.v1", weight: 80%}, {destination: "api.v2", weight: 20%}]
    }
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ingest.parser.conf import Table
from ingest.parser.mapping import (
    MappingError,
    Transform,
    compile_transform,
    tokenize_wildcards,
    validate_mapping,
)
from ingest.parser.subjects import is_literal, is_valid_subject, subject_matches

if TYPE_CHECKING:
    from ingest.server.config_reader import Section

_GO_INT = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, slots=True)
class WeightedDest:
    subject: str
    weight: int  # percent
    cluster: str = ""


@dataclass(frozen=True, slots=True)
class SubjectMapping:
    """One source with its destinations; `upto` are cumulative weights, ascending."""

    src: str
    literal: bool
    transforms: tuple[Transform, ...]
    upto: tuple[int, ...]

    @classmethod
    def build(cls, src: str, dests: list[WeightedDest]) -> SubjectMapping:
        """Validate as the reference's AddWeightedMappings; raise ValueError with its wording."""
        if not is_valid_subject(src):
            raise ValueError("invalid subject")
        seen: set[str] = set()
        total: dict[str, int] = {}
        picked: list[tuple[int, Transform]] = []
        for dest in dests:
            if dest.subject in seen:
                raise ValueError(f'duplicate entry for "{dest.subject}"')
            seen.add(dest.subject)
            if dest.weight > 100:
                raise ValueError("individual weights need to be <= 100")
            total[dest.cluster] = total.get(dest.cluster, 0) + dest.weight
            if total[dest.cluster] > 100:
                raise ValueError("total weight needs to be <= 100")
            validate_mapping(src, dest.subject)
            transform = compile_transform(src, dest.subject)
            if transform is not None and not dest.cluster:  # jetlake runs no named clusters
                picked.append((dest.weight, transform))
        weight = sum(w for w, _ in picked)
        if weight != 100 and src not in seen:
            identity = compile_transform(src, src if is_literal(src) else tokenize_wildcards(src))
            assert identity is not None
            picked.append((100 - weight if picked else 100, identity))
        picked.sort(key=lambda pair: pair[0])
        upto, running = [], 0
        for w, _ in picked:
            running += w
            upto.append(running)
        return cls(src, is_literal(src), tuple(t for _, t in picked), tuple(upto))

    def select(self, tokens: list[str], roll: Callable[[int], int]) -> str:
        """The destination of a matched subject; "" when the roll lands past every weight."""
        if len(self.transforms) == 1 and self.upto[0] == 100:
            chosen: Transform | None = self.transforms[0]
        else:
            w = roll(100)
            chosen = next(
                (t for t, u in zip(self.transforms, self.upto, strict=True) if w < u), None
            )
        if chosen is None:
            return ""
        return chosen.apply(tokens) if chosen.uses_source_tokens else chosen.dest


class SubjectMapper:
    """The server's mappings in config order; the first whose source covers a subject wins."""

    def __init__(
        self, mappings: tuple[SubjectMapping, ...], *, roll: Callable[[int], int] = random.randrange
    ) -> None:
        self._mappings = mappings
        self._roll = roll

    def __bool__(self) -> bool:
        return bool(self._mappings)

    def map(self, subject: str) -> str | None:
        """The subject to route on instead, or None when no mapping applies."""
        for m in self._mappings:
            if m.literal:
                if m.src != subject:
                    continue
            elif not subject_matches(m.src, subject):
                continue
            return m.select(subject.split("."), self._roll)
        return None

    def map_bytes(self, subject: bytes) -> bytes:
        """The router's form: wire bytes in, the subject to route on out (itself if unmapped)."""
        mapped = self.map(subject.decode("utf-8", "surrogateescape"))
        return subject if mapped is None else mapped.encode("utf-8", "surrogateescape")


# -- the config file section -------------------------------------------------------


def read_mappings(top: Section, key: str) -> tuple[SubjectMapping, ...]:
    section = top.section(key)
    out: list[SubjectMapping] = []
    for src in section.table:
        if src in section.table.variables:
            continue
        if not is_valid_subject(src):
            raise section.error(src, f'Subject "{src}" is not a valid subject')
        value = section.table[src]
        try:
            if isinstance(value, str):
                try:
                    out.append(SubjectMapping.build(src, [WeightedDest(value, 100)]))
                except (ValueError, MappingError) as exc:
                    raise section.error(
                        src, f'Error adding mapping for "{src}" to "{value}" : {exc}'
                    ) from None
                continue
            if isinstance(value, list):
                dests = [_dest(section, src, item) for item in value]
            elif isinstance(value, Table):
                dests = [_dest(section, src, value)]
            else:
                raise section.error(src, "Unknown type for mapping destination")
            out.append(SubjectMapping.build(src, dests))
        except (ValueError, MappingError) as exc:
            raise section.error(src, f'Error adding mapping for "{src}" : {exc}') from None
    return tuple(out)


def _dest(section: Section, src: str, item: Any) -> WeightedDest:
    if not isinstance(item, Table):
        raise section.error(src, "Expected an entry for the mapping destination")
    subject, weight, cluster = "", None, ""
    for name in item:
        value = item[name]
        lowered = name.lower()
        if lowered in ("dest", "destination"):
            subject = str(value)
        elif lowered == "weight":
            weight = _weight(section, src, value)
        elif lowered == "cluster":
            cluster = str(value)
        else:
            raise section.error(src, f'Unknown field "{name}" for mapping destination')
    if weight is None:
        raise section.error(src, f'Missing weight for mapping destination "{subject}"')
    return WeightedDest(subject, weight, cluster)


def _weight(section: Section, src: str, value: Any) -> int:
    if isinstance(value, str):
        text = value.removesuffix("%")
        if not _GO_INT.fullmatch(text):
            raise section.error(src, f'Invalid weight "{text}" for mapping destination')
        weight = int(text)
    elif isinstance(value, int) and not isinstance(value, bool):
        weight = value
    else:
        raise section.error(src, f"Unknown entry type for weight of {value}")
    if not 0 <= weight <= 100:
        raise section.error(src, f"Invalid weight {weight} for mapping destination")
    return weight
