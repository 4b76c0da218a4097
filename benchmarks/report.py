"""Results of a run: per-server outcomes, scores against the reference, table and JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.model import Metric, Workload

SCORE_CONVENTION = (
    "score = jetlake/ref for msgs/s and ref/jetlake for latency: > 1 means jetlake is better"
)


@dataclass(slots=True)
class Outcome:
    """What one workload produced on one server: figures, or why there are none."""

    status: str  # ok | timeout | error | skipped | not run
    values: dict[str, float] = field(default_factory=dict)
    detail: str = ""
    seconds: float = 0.0


NOT_RUN = Outcome("not run")
JETLAKE_ONLY = Outcome("jetlake only")
"""The reference cell of a row the reference has no counterpart for (the lake)."""


@dataclass(frozen=True, slots=True)
class Row:
    """One metric of one workload across both servers."""

    workload: Workload
    metric: Metric
    ref: Outcome
    jetlake: Outcome

    @property
    def score(self) -> float | None:
        ref = self.ref.values.get(self.metric.key)
        jetlake = self.jetlake.values.get(self.metric.key)
        if ref is None or jetlake is None or 0 in (ref, jetlake):
            return None
        return self.metric.score(ref, jetlake)

    @property
    def verdict(self) -> str:
        """One of met, MISSED, n/a (no figure to judge), or empty when the row has no target."""
        if self.metric.bound is not None:
            value = self.jetlake.values.get(self.metric.key)
            if value is None:
                return "n/a"
            within = (
                value >= self.metric.bound
                if self.metric.higher_is_better
                else (value <= self.metric.bound)
            )
            return "met" if within else "MISSED"
        if self.metric.target is None:
            return ""
        if self.score is None:
            return "n/a"
        return "met" if self.score >= self.metric.target else "MISSED"


def figure(outcome: Outcome, metric: Metric) -> str:
    """A figure for the table, or the outcome's status when there is none."""
    value = outcome.values.get(metric.key)
    if value is None:
        return outcome.status
    return f"{value:,.0f}" if metric.unit == "msgs/s" else f"{value:,.1f}"


def _target(metric: Metric) -> str:
    if metric.bound is not None:
        sign = "≥" if metric.higher_is_better else "≤"
        return f"{sign} {metric.bound:g} {metric.unit} (jetlake)"
    if metric.target is None:
        return ""
    return f"≥ {metric.target:.2f} ({metric.target_text})"


def render(rows: list[Row]) -> str:
    """A fixed-width table with the convention in the header and failures listed below."""
    header = ("workload", "metric", "unit", "ref", "jetlake", "score", "target", "met?")
    lines = [
        (
            row.workload.name,
            row.metric.label,
            row.metric.unit,
            figure(row.ref, row.metric),
            figure(row.jetlake, row.metric),
            "" if row.score is None else f"{row.score:.2f}",
            _target(row.metric),
            row.verdict,
        )
        for row in rows
    ]
    widths = [max(len(cells[i]) for cells in [header, *lines]) for i in range(len(header))]
    numeric = {3, 4, 5}

    def fmt(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.rjust(w) if i in numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    out = [SCORE_CONVENTION, fmt(header), fmt(tuple("-" * w for w in widths))]
    out += [fmt(cells) for cells in lines]
    notes = _notes(rows)
    if notes:
        out += ["", *notes]
    return "\n".join(out)


def _notes(rows: list[Row]) -> list[str]:
    """Why figures are missing, once per distinct reason with the workloads it hit."""
    hits: dict[tuple[str, str, str], list[str]] = {}
    for row in rows:
        for side, outcome in (("ref", row.ref), ("jetlake", row.jetlake)):
            if outcome.detail:
                names = hits.setdefault((side, outcome.status, outcome.detail), [])
                if row.workload.name not in names:
                    names.append(row.workload.name)
    return [
        f"{side} {status} in {', '.join(names)}: " + detail.replace("\n", "\n    ")
        for (side, status, detail), names in hits.items()
    ]


def write_json(path: Path, rows: list[Row], meta: dict[str, Any]) -> None:
    """Machine-readable results, for the README figures and comparisons across runs."""
    results = [
        {
            "workload": row.workload.name,
            "profile": row.workload.profile.value,
            "metric": row.metric.key,
            "label": row.metric.label,
            "unit": row.metric.unit,
            "higher_is_better": row.metric.higher_is_better,
            "ref": row.ref.values.get(row.metric.key),
            "jetlake": row.jetlake.values.get(row.metric.key),
            "ref_status": row.ref.status,
            "jetlake_status": row.jetlake.status,
            "ref_detail": row.ref.detail,
            "jetlake_detail": row.jetlake.detail,
            "score": row.score,
            "target": row.metric.target,
            "target_text": row.metric.target_text,
            "bound": row.metric.bound,
            "verdict": row.verdict,
        }
        for row in rows
    ]
    document = {"convention": SCORE_CONVENTION, **meta, "results": results}
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
