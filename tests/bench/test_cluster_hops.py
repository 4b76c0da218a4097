"""The hop timeline of `benchmarks.cluster.hops`, from a trace written out by hand.

The trace below is one sync publish's round as `perf script` prints it, with the
times chosen so that every hop has its own length: if a hop were measured between
the wrong calls, its figure would be another's.
"""

from __future__ import annotations

from benchmarks.cluster.hops import HOPS, calls, quartiles, rounds

C, L, F1, F2 = 10, 20, 30, 40
ROLES = {C: "C", L: "L", F1: "FN1", F2: "FN2"}
NAMES = {C: "nats", L: "jetlake", F1: "jetlake", F2: "jetlake"}


def call(pid: int, nr: int, fd: int, start: float, end: float) -> list[bytes]:
    """The enter and exit lines of one call, at `start` and `end` µs."""
    head = f"{NAMES[pid]:>16} {pid}/{pid} [000]"
    return [
        f"{head} {100 + start / 1e6:.6f}: raw_syscalls:sys_enter: NR {nr} ({fd:x}, 7f, 8)".encode(),
        f"{head} {100 + end / 1e6:.6f}:  raw_syscalls:sys_exit: NR {nr} = 8".encode(),
    ]


def one_round(at: float) -> list[bytes]:
    """Client fd 8; the leader reads the client on fd 5, writes its WAL on 9 and APPENDs
    on 6 and 7; the followers answer on the socket they read."""
    t = at
    return [
        *call(C, 1, 8, t, t + 2),  # PUB
        *call(L, 0, 5, t + 5, t + 6),  # hop 1: 3
        *call(L, 18, 9, t + 10, t + 11),  # hop 2: 4 (the WAL)
        *call(L, 1, 6, t + 12, t + 13),
        *call(L, 1, 7, t + 14, t + 16),  # hop 3: 10 (APPENDs out at 16)
        *call(F1, 0, 4, t + 21, t + 22),  # hop 4: 5
        *call(F2, 0, 3, t + 30, t + 31),
        *call(F1, 18, 2, t + 25, t + 26),  # its WAL: not the answer
        *call(F1, 1, 4, t + 28, t + 29),  # hop 5: 6
        *call(F2, 1, 3, t + 40, t + 41),  # the second answer, later
        *call(L, 0, 6, t + 36, t + 37),  # hop 6: 7
        *call(L, 1, 5, t + 45, t + 46),  # hop 7: 8
        *call(L, 1, 12, t + 50, t + 51),  # the segment, after the PubAck
        *call(C, 0, 8, t + 55, t + 56),  # hop 8: 9
        b"some other line perf printed",
    ]


def test_each_hop_is_measured_between_its_own_calls() -> None:
    lines = one_round(0) + one_round(100) + one_round(200)
    found = rounds(calls(lines, ROLES))
    assert len(found) == 2  # the last round has no next PUB to end it
    for row in found:
        assert [round(v) for v in row] == [3, 4, 10, 5, 6, 7, 8, 9, 44, 100]
    figures = quartiles(found)
    assert list(figures) == list(HOPS)
    assert figures["answer -> leader read"] == [7.0, 7.0, 7.0]


def test_a_late_answer_read_before_the_pub_does_not_pass_for_it() -> None:
    """The leader may read the second follower's answer to the round before first: the
    client's socket is the one it most often reads first, so the PUB is still found."""
    late = call(L, 0, 7, 203, 204) + one_round(200)
    found = rounds(calls(one_round(0) + one_round(100) + late + one_round(300), ROLES))
    assert [[round(v) for v in row] for row in found] == [[3, 4, 10, 5, 6, 7, 8, 9, 44, 100]] * 3


def test_a_round_whose_answer_the_leader_read_before_it_came_is_left_out() -> None:
    """Without the first follower's answer the second's comes after the leader's last
    route read of the round: no leader read answers it, so the round has no hops."""
    late = [line for line in one_round(200) if b"NR 1 (4," not in line]
    trace = calls(one_round(0) + one_round(100) + late + one_round(300), ROLES)
    assert len([c for c in trace if c.who == "C" and c.nr == 1]) == 4
    assert len(rounds(trace)) == 2


def test_calls_cut_by_the_trace_and_other_processes_are_left_out() -> None:
    lines = call(C, 1, 8, 0, 2)[1:] + call(L, 0, 5, 7, 8)
    lines += [line.replace(b" 20/20 ", b" 99/99 ") for line in call(L, 1, 5, 9, 10)]
    assert [(c.who, c.nr, c.fd) for c in calls(lines, ROLES)] == [("L", 0, 5)]
