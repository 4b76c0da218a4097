"""Subject filters as stores use them: "" means everything, and a regex twin for scans.

The matching rule itself lives in `ingest.parser.subjects` (one definition for
the router, the streams and the stores); stores add the RE2 form so an Arrow
subject column can be filtered in C (`pc.match_substring_regex`).
"""

from __future__ import annotations

import re


def matches_all(subject_filter: str) -> bool:
    return subject_filter in ("", ">")


def filter_regex(subject_filter: str) -> str:
    """An anchored RE2 pattern equivalent to `subject_matches` for this filter."""
    parts = []
    for token in subject_filter.split("."):
        if token == "*":
            parts.append(r"[^.]+")
        elif token == ">":
            parts.append(r".+")
        else:
            parts.append(re.escape(token))
    return "^" + r"\.".join(parts) + "$"
