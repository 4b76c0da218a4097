"""Which compression a server-to-server link runs, as nats-server negotiates it.

Each side has a mode: `off`, `accept` (compress only when the other side asks),
`s2_fast`, `s2_better`, `s2_best`, or `s2_auto` (the level follows the link's round
trip: up to the first threshold `s2_uncompressed`, then fast, better, best).
`not supported` is what a side that never says a mode counts as (an older server).
The choice is per direction: each side writes at the level it selected, and reads
whatever S2 stream comes. Sans-IO: the connections do the switching.
"""

from __future__ import annotations

import dataclasses

from ingest.server.gofmt import NS, go_duration

NOT_SUPPORTED = "not supported"
OFF = "off"
ACCEPT = "accept"
S2_AUTO = "s2_auto"
S2_UNCOMPRESSED = "s2_uncompressed"
S2_FAST = "s2_fast"
S2_BETTER = "s2_better"
S2_BEST = "s2_best"

DEFAULT_RTT_THRESHOLDS = (10_000_000, 50_000_000, 100_000_000)  # ns: fast, better, best above
_LEVELS = (S2_UNCOMPRESSED, S2_FAST, S2_BETTER, S2_BEST)


@dataclasses.dataclass(frozen=True, slots=True)
class Compression:
    """A configured mode; `rtt_thresholds` (nanoseconds) only for `s2_auto`."""

    mode: str = S2_AUTO
    rtt_thresholds: tuple[int, ...] = DEFAULT_RTT_THRESHOLDS


def normalise(mode: str, thresholds: tuple[int, ...] = (), *, on: str = S2_AUTO) -> Compression:
    """A user's mode (and `s2_auto` thresholds) in canonical form; ValueError with the
    reference's wording when it is not one. `on` is what `on`/`true` stands for."""
    lowered = mode.lower()
    if lowered in ("on", "enabled", "true"):
        lowered = on
    aliases = {
        "not supported": NOT_SUPPORTED,
        "not_supported": NOT_SUPPORTED,
        "disabled": OFF,
        "off": OFF,
        "false": OFF,
        "accept": ACCEPT,
        "fast": S2_FAST,
        "s2_fast": S2_FAST,
        "better": S2_BETTER,
        "s2_better": S2_BETTER,
        "best": S2_BEST,
        "s2_best": S2_BEST,
    }
    if lowered in aliases:
        return Compression(aliases[lowered], ())
    if lowered not in ("auto", "s2_auto"):
        raise ValueError(f'unsupported compression mode "{mode}"')
    if not thresholds:
        return Compression(S2_AUTO, DEFAULT_RTT_THRESHOLDS)
    kept: list[int] = []
    for value in thresholds:
        value = max(value, 0)
        if kept and value and any(value < seen for seen in kept):
            listed = " ".join(go_duration(t) for t in thresholds)
            raise ValueError(f"RTT threshold values [{listed}] should be in ascending order")
        kept.append(value)
    while kept and kept[-1] == 0:
        kept.pop()
    listed = " ".join(go_duration(t) for t in thresholds)
    if len(kept) > 4:
        raise ValueError(
            f'compression mode "{mode}" should have no more than 4 RTT thresholds: [{listed}]'
        )
    if not kept:
        raise ValueError(f'compression mode "{mode}" requires at least one RTT threshold')
    return Compression(S2_AUTO, tuple(kept))


def needs_compression(mode: str) -> bool:
    """Whether a side in `mode` negotiates compression at all."""
    return mode not in ("", OFF, NOT_SUPPORTED)


def select(ours: str, theirs: str) -> str:
    """The mode this side writes at, given the other side's INFO `compression` (ours
    negotiates). ValueError for a mode the reference does not know."""
    if theirs in ("", NOT_SUPPORTED):
        return NOT_SUPPORTED
    if theirs == OFF:
        return OFF
    if theirs == ACCEPT:
        return OFF if ours == ACCEPT else ours
    if theirs in (S2_AUTO, *_LEVELS):
        if ours == ACCEPT:
            return S2_FAST if theirs == S2_AUTO else theirs
        return ours
    raise ValueError(f'unsupported route compression mode "{theirs}"')


def auto_level(rtt: float, thresholds: tuple[int, ...]) -> str:
    """The `s2_auto` level for a round trip of `rtt` seconds: the first threshold it is
    within; past them all, best (or the last level the thresholds name)."""
    ns = int(rtt * NS)
    for index, limit in enumerate(thresholds):
        if ns <= limit:
            return _LEVELS[index]
    return _LEVELS[3 if len(thresholds) >= 3 else len(thresholds) - 1]


def info_mode(config: Compression, chosen: str) -> str:
    """What this side's INFO says once it compresses: `s2_auto` stays `s2_auto`."""
    return S2_AUTO if config.mode == S2_AUTO else chosen


DEFAULT_COMPRESSION = Compression()  # leafnodes' default, for accepted links and remotes
