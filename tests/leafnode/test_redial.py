"""A remote that stays away: the leaf keeps dialling at the reference's pace, logs as the
reference does (the first failure, then one an hour before the link was ever up;
every failure once it was), and its clients are not disturbed meanwhile."""

from __future__ import annotations

import itertools
import re
import statistics
from datetime import datetime
from pathlib import Path

import nats
import pytest

from ingest.server.leafnode.redial import CONNECT_ERROR_REPORTS, Redial
from ingest.server.options import parse_serve_args
from tests.conftest import KIND_IDS
from tests.leafnode.conftest import LINK_TIMEOUT, hub_config, leaf_config, linked
from tests.support.cluster import free_port
from tests.support.poll import poll
from tests.support.servers import ServerProcess, start_server

HOURS = 10_000  # failed dials: 2 h 47 min at the default 1 s interval
DIAL_ERROR = re.compile(
    r"(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+) \[(ERR|DBG)\] Error trying to connect as leafnode "
    r'to remote server "127\.0\.0\.1:\d+" \(attempt (\d+)\)'
)


def test_a_remote_never_reached_is_logged_once_an_hour() -> None:
    redial = Redial(1.0, jitter=lambda span: span / 2)
    schedule = [redial.failed() for _ in range(HOURS)]
    reported = [n for n, (report, _) in enumerate(schedule, 1) if report]
    assert reported == [1, CONNECT_ERROR_REPORTS, 2 * CONNECT_ERROR_REPORTS]
    assert {delay for _, delay in schedule} == {1.5}  # no growth, however long
    assert not hasattr(redial, "__dict__")  # its whole state: two counters and the interval


def test_once_linked_every_failed_redial_is_logged() -> None:
    redial = Redial(0.25)
    redial.failed()
    redial.linked()
    schedule = [redial.failed() for _ in range(100)]
    assert all(report for report, _ in schedule)
    assert redial.attempts == 100
    assert all(0.25 <= delay < 0.5 for _, delay in schedule)  # the interval plus jitter


def _dials(server: ServerProcess) -> list[tuple[float, str, int]]:
    """(time, level, attempt) of each failed dial the server logged."""
    return [
        (datetime.strptime(m[1], "%Y/%m/%d %H:%M:%S.%f").timestamp(), m[2], int(m[3]))
        for m in DIAL_ERROR.finditer(server.log())
    ]


async def _undisturbed(server: ServerProcess, subject: str) -> None:
    nc = await nats.connect(server.url, allow_reconnect=False)
    try:
        sub = await nc.subscribe(subject)
        await nc.publish(subject, b"still here")
        assert (await sub.next_msg(5)).data == b"still here"
    finally:
        await nc.close()


@pytest.mark.parametrize("leaf_kind", ["nats-server", "jetlake"], ids=lambda k: KIND_IDS[k])
async def test_a_remote_away_for_long_is_redialled_at_the_interval(
    tmp_path: Path, leaf_kind: str
) -> None:
    port = free_port()
    config = leaf_config(port).replace("reconnect: 1", 'reconnect: "100ms"')
    leaf = start_server(leaf_kind, "-D", "-m", "-1", config=config, tmp_path=tmp_path, name="leaf")
    hub = None
    try:
        # Never reached: the first failure is an error, the next ones debug lines only.
        poll(lambda: len(_dials(leaf)) >= 8, "eight failed dials", LINK_TIMEOUT)
        before = _dials(leaf)
        assert [level for _, level, _ in before] == ["ERR"] + ["DBG"] * (len(before) - 1)
        assert [n for _, _, n in before] == list(range(1, len(before) + 1))
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(before)]
        assert min(gaps) >= 0.09 and statistics.median(gaps) < 0.6, gaps
        await _undisturbed(leaf, "leaf.local")
        # Up once, then gone: every failure to restore the link is an error.
        hub = start_server("nats-server", config=hub_config(port), tmp_path=tmp_path, name="hub")
        poll(lambda: linked(leaf), "the link", LINK_TIMEOUT)
        hub.stop(expect_code=None)
        count = len(before)
        poll(lambda: len(_dials(leaf)) >= count + 4, "four failed redials", LINK_TIMEOUT)
        after = _dials(leaf)[count:]
        assert [(level, n) for _, level, n in after[:4]] == [("ERR", n) for n in range(1, 5)]
        await _undisturbed(leaf, "leaf.local")
    finally:
        leaf.stop(expect_code=None)
        if hub is not None and hub.running:
            hub.stop(expect_code=None)


REFUSED = re.compile(
    r"(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+) \[ERR\] .* Leafnode Error 'Authorization Violation'"
)


def _refusals(server: ServerProcess) -> list[float]:
    stamps = (m[1] for m in REFUSED.finditer(server.log()))
    return [datetime.strptime(s, "%Y/%m/%d %H:%M:%S.%f").timestamp() for s in stamps]


async def test_a_leaf_with_wrong_credentials_retries_at_the_interval(tmp_path: Path) -> None:
    """Both leafs, refused by the same hub, log the hub's -ERR at every attempt and dial
    again after `reconnect`, no backoff; clients of the hub and of the leaf go on."""
    port = free_port()
    auth = "  authorization { user: edge, password: right } }\n"
    config = hub_config(port).replace(" }\n", "\n" + auth, 1)
    hub = start_server("nats-server", config=config, tmp_path=tmp_path, name="hub")
    wrong = leaf_config(port).replace("nats://", "nats://edge:wrong@")
    wrong = wrong.replace("reconnect: 1", 'reconnect: "250ms"')
    leaves = [
        start_server(kind, config=wrong, tmp_path=tmp_path, name=f"leaf-{KIND_IDS[kind]}")
        for kind in ("nats-server", "jetlake")
    ]
    try:
        for leaf in leaves:
            poll(lambda leaf=leaf: len(_refusals(leaf)) >= 6, "six refusals", LINK_TIMEOUT)
        ref_gaps, jl_gaps = (
            [b - a for a, b in itertools.pairwise(_refusals(leaf)[:6])] for leaf in leaves
        )
        assert min(ref_gaps) >= 0.2 and min(jl_gaps) >= 0.2, (ref_gaps, jl_gaps)
        # The same pace: no growth from one attempt to the next on either side.
        assert statistics.median(jl_gaps) < 2 * statistics.median(ref_gaps) + 0.25
        assert max(jl_gaps) < 4 * min(jl_gaps) + 0.5, jl_gaps
        for leaf in leaves:  # each attempt, before the hub refuses it, and as it hangs up
            assert leaf.find_log(r"\[INF\] .* - Leafnode connection created for account: \$G")
            assert leaf.find_log("Leafnode connection closed: Client Closed - Remote: hub")
        await _undisturbed(hub, "hub.local")
        await _undisturbed(leaves[1], "leaf.local")
    finally:
        for server in (*leaves, hub):
            server.stop(expect_code=None)


def test_the_report_counts_are_read_from_the_config(tmp_path: Path) -> None:
    conf = tmp_path / "reports.conf"
    conf.write_text("connect_error_reports: 10\nreconnect_error_reports: 0\n")
    opts = parse_serve_args(["-c", str(conf)])
    assert (opts.connect_error_reports, opts.reconnect_error_reports) == (10, 1)  # 0: default
    redial = Redial(1.0, reports=(opts.connect_error_reports, 5))
    assert [n for n in range(1, 31) if redial.failed()[0]] == [1, 10, 20, 30]
    redial.linked()
    assert [n for n in range(1, 11) if redial.failed()[0]] == [1, 5, 10]
