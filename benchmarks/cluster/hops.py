"""Where one publish at a time waits: the wall-clock time of each hop of a round.

CPU per message (`benchmarks.cluster.cpu`) says what each server spends, not where a
client that waits for every answer waits. This runs a natscli one-at-a-time workload
(`js pub sync`, `kv put`) against three servers of one kind with the client on the
stream leader's server, records the read and write system calls of the three servers
and the client with `perf record` on the kernel's syscall tracepoints (root and the
`perf` tool needed) for a while in the middle of the run, and cuts the trace into
rounds at each of the client's writes. Each round's hops, from the end of one call to
the start of the next:

- the client's PUB write to the leader's read of it;
- the leader's read to its first write (the WAL, or an APPEND) and to its last before
  an answer (the APPENDs out);
- the last of those to a follower's read of its APPEND;
- that read to the follower's answer written (on the socket it read from);
- the first answer to the leader's next read of a route;
- that read to the PubAck written (on the client's socket);
- the PubAck to the client's read, and that read to the client's next PUB.

Quartiles in µs, printed as JSON. The tracepoints cost both kinds alike (a few µs a
call), so read the hops side by side rather than as absolute figures.

    python -m benchmarks.cluster.hops sync [--side ref] [--count 8000] [--seconds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from itertools import pairwise
from pathlib import Path
from typing import NamedTuple

from benchmarks.client import connect
from benchmarks.cluster.cpu import staged
from benchmarks.cluster.rows import COMMANDS
from benchmarks.natscli import KV_STREAM, STREAM

READ, WRITE, PWRITE, WRITEV = 0, 1, 18, 20  # x86-64 system call numbers
WRITES = (WRITE, PWRITE, WRITEV)
HOPS = (
    "client PUB -> leader read",
    "leader read -> first write",
    "leader read -> APPENDs out",
    "APPENDs out -> follower read",
    "follower read -> answer written",
    "answer -> leader read",
    "leader read -> PubAck written",
    "PubAck -> client read",
    "client read -> next PUB",
    "round",
)
LINE = re.compile(
    rb"^\s*\S.*?\s+(\d+)/(\d+)\s+\[\d+\]\s+([\d.]+):\s+raw_syscalls:sys_(enter|exit):"
    rb"\s+NR (\d+)(?: \(([0-9a-f]+))?"
)
STARTED = 0.2  # of the workload's messages stored before the trace begins


class Call(NamedTuple):
    start: float  # µs
    end: float
    who: str  # "C" the client, "L" the leader, "F<name>" a follower
    nr: int
    fd: int


def calls(lines: Iterable[bytes], roles: dict[int, str]) -> list[Call]:
    """The read and write calls of `perf script` output, for the processes in `roles`,
    in order of their start; a call whose enter or exit the trace cut off is left out."""
    entered: dict[int, tuple[float, int, int]] = {}
    out = []
    for line in lines:
        m = LINE.match(line)
        if m is None:
            continue
        pid, tid, at, kind, nr = int(m[1]), int(m[2]), float(m[3]) * 1e6, m[4], int(m[5])
        if pid not in roles or nr not in (READ, *WRITES):
            continue
        if kind == b"enter":
            entered[tid] = (at, nr, int(m[6] or b"0", 16))
        elif tid in entered:
            start, nr, fd = entered.pop(tid)
            out.append(Call(start, at, roles[pid], nr, fd))
    return sorted(out)


def rounds(trace: list[Call]) -> list[tuple[float, ...]]:
    """Each whole round's hops (`HOPS`), in µs; a round without them all is left out (a
    PING, a beat, one cut by the trace's ends)."""
    starts = [i for i, c in enumerate(trace) if c.who == "C" and c.nr in WRITES]
    fd = _client_fd(trace, starts)
    out = []
    for a, b in pairwise(starts):
        hops = _hops(trace[a:b], trace[b].start, fd)
        if hops is not None:
            out.append(hops)
    return out


def _client_fd(trace: list[Call], starts: list[int]) -> int | None:
    """The leader's socket to the client: the one it most often reads first after a PUB
    (in some rounds it reads a follower's late answer to the round before first)."""
    firsts: Counter[int] = Counter()
    for i in starts:
        reads = (trace[j] for j in range(i, len(trace)))
        first = next((c for c in reads if c.who == "L" and c.nr == READ), None)
        if first is not None:
            firsts[first.fd] += 1
    return firsts.most_common(1)[0][0] if firsts else None


def _hops(run: list[Call], next_pub: float, fd: int | None) -> tuple[float, ...] | None:
    pub = run[0]
    first = next((c for c in run if c.who == "L" and c.nr == READ and c.fd == fd), None)
    if first is None:
        return None
    read_by: dict[str, Call] = {}
    answers = []
    for c in run:
        if c.who[0] != "F":
            continue
        if c.nr == READ:
            read_by.setdefault(c.who, c)
        elif c.who in read_by and c.fd == read_by[c.who].fd:
            answers.append(c)
    if not answers:
        return None
    answer = min(answers, key=lambda c: c.end)
    out = [c for c in run if c.who == "L" and c.nr in WRITES and first.end <= c.start]
    out = [c for c in out if c.start < answer.start]
    back = next((c for c in run if _after(c, "L", (READ,), answer.end) and c.fd != first.fd), None)
    if not out or back is None:
        return None
    ack = next((c for c in run if _after(c, "L", WRITES, back.end) and c.fd == first.fd), None)
    seen = None if ack is None else next((c for c in run if _after(c, "C", (READ,), ack.end)), None)
    if ack is None or seen is None:
        return None
    fread = min(read_by.values(), key=lambda c: c.start)
    return (
        first.start - pub.end,
        out[0].start - first.end,
        out[-1].end - first.end,
        fread.start - out[-1].end,
        answer.start - read_by[answer.who].end,
        back.start - answer.end,
        ack.start - back.end,
        seen.start - ack.end,
        next_pub - seen.end,
        next_pub - pub.start,
    )


def _after(c: Call, who: str, nrs: tuple[int, ...], at: float) -> bool:
    """`c` is `who`'s call of one of those kinds, begun no earlier than `at` (1 µs of the
    trace's rounding allowed)."""
    return c.who == who and c.nr in nrs and c.start >= at - 1


def quartiles(rows: list[tuple[float, ...]]) -> dict[str, list[float]]:
    out = {}
    for i, name in enumerate(HOPS):
        values = sorted(row[i] for row in rows)
        n = len(values)
        out[name] = [round(values[n * q // 4], 1) for q in (1, 2, 3)] if n else []
    return out


async def measure(side: str, workload: str, count: int, seconds: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as root:
        async with staged(side, workload, count, Path(root)) as (nodes, lead, args):
            client = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            try:
                stream = KV_STREAM if workload == "kv" else STREAM
                await _underway(lead.url, stream, count, client)
                roles = {n.proc.pid: "L" if n is lead else f"F{n.name}" for n in nodes}
                roles[client.pid] = "C"
                data = Path(root) / "perf.data"
                record = ["perf", "record", "-q", "-o", str(data)]
                record += ["-e", "raw_syscalls:sys_enter", "-e", "raw_syscalls:sys_exit"]
                record += ["-p", ",".join(map(str, roles)), "--", "sleep", str(seconds)]
                subprocess.run(record, check=True, capture_output=True)
            finally:
                output = client.communicate()[0]
            script = ["perf", "script", "-i", str(data), "-F", "comm,pid,tid,cpu,time,event,trace"]
            lines = subprocess.run(script, check=True, capture_output=True).stdout.splitlines()
    rows = rounds(calls(lines, roles))
    rate = re.search(rb"stats: ([\d,]+) msgs/sec", output)
    return {
        "side": side,
        "workload": workload,
        "rate": rate[1].decode() if rate else None,
        "rounds": len(rows),
        "hops_us [p25, p50, p75]": quartiles(rows),
    }


async def _underway(url: str, stream: str, count: int, client: subprocess.Popen[bytes]) -> None:
    """Return once the client is well into its run (`STARTED` of its messages stored), so
    that the trace holds none of its connecting."""
    deadline = time.monotonic() + 60
    nc = await connect(url, "bench-hops-probe")
    try:
        js = nc.jetstream(timeout=2.0)
        while (await js.stream_info(stream)).state.messages < count * STARTED:
            if client.poll() is not None:
                raise RuntimeError(f"natscli ended before the trace began: {client.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"stream {stream}: natscli stored too little in 60 s")
            await asyncio.sleep(0.05)
    finally:
        await nc.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", choices=("sync", "kv"))
    parser.add_argument("--count", type=int, default=8000)
    parser.add_argument("--side", choices=sorted(COMMANDS), default="jetlake")
    parser.add_argument("--seconds", type=float, default=1.0, help="how long to trace")
    opts = parser.parse_args(argv)
    print(json.dumps(asyncio.run(measure(opts.side, opts.workload, opts.count, opts.seconds))))


if __name__ == "__main__":
    main()
