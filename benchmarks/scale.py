"""Scale rows: what each server costs as the work grows, not how fast it goes.

Four rows, each on fresh servers it starts itself (``Profile.OFFLINE``, like the
cluster rows) because it needs the process (its RSS) or a restart on the store the
first process left: ``scale-subjects``, one stream taking ``--scale-subjects``
messages on as many distinct subjects, each with its own msg-id (`nats bench js
pub async --multisubject --dedup`), so per-subject state and the dedup window both
grow; ``scale-conns``, ``--scale-conns`` idle raw-TCP connections then
``--scale-subs`` subscriptions spread over them; ``scale-streams``,
``--scale-streams`` streams of one message each, then a restart timed until
``$JS.API.INFO`` counts them all; ``scale-history``, ``--scale-messages`` stored
messages, then a restart timed until the stream reports them all.

RSS is the server process's and its children's (``/proc``), read at the moment
named in each metric. The rows run opt-in (``--only scale``): they take minutes
and raise this process's open-file limit to the hard limit (the servers inherit it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from time import perf_counter

from nats.errors import NoRespondersError
from nats.js.api import StorageType

from benchmarks import natscli
from benchmarks.client import connect
from benchmarks.cluster.rows import COMMANDS
from benchmarks.model import Incomplete, Measure, Metric, Params, Profile, Workload
from benchmarks.servers import Target, profile_args, server_process

GROUP = "scale"
STREAM = "scale"
SUBJECT = "scale"
KIB = 1024
MIB = 1024 * 1024
TICKS = os.sysconf("SC_CLK_TCK")
RATE = "msgs/s"
START_SECONDS = 300.0  # a restart on a large store, or a reference-sized history
BATCH = 500  # connections opened at once: under the servers' accept backlogs
API_SECONDS = 2.0
READY_POLL = 0.02
CONNECT = b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n'
PONG = b"PONG\r\n"
Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@dataclass(frozen=True, slots=True)
class Sizes:
    """How far each row goes; the defaults run in a few minutes on 2 cores."""

    subjects: int = 1_000_000
    conns: int = 10_000
    subs: int = 100_000
    streams: int = 1_000
    messages: int = 1_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scale rows' own flags, grouped apart from the per-message workloads'."""
    group = parser.add_argument_group("scale rows (--only scale)")
    add = group.add_argument
    d = Sizes()
    add("--scale-subjects", type=int, default=d.subjects, help="distinct subjects, one stream")
    add("--scale-conns", type=int, default=d.conns, help="idle connections")
    add("--scale-subs", type=int, default=d.subs, help="subscriptions over those connections")
    add("--scale-streams", type=int, default=d.streams, help="streams, timed restart")
    add("--scale-messages", type=int, default=d.messages, help="stored messages, timed restart")


def rss_bytes(status: str) -> int:
    """The ``VmRSS`` of a ``/proc/<pid>/status`` text, in bytes; 0 for a zombie (no line)."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            value, unit = line.split()[1:3]
            if unit != "kB":
                raise ValueError(f"VmRSS in unexpected unit {unit!r}")
            return int(value) * KIB
    return 0


def child_pids(children: str) -> list[int]:
    """The pids of a ``/proc/<pid>/task/<tid>/children`` text (space separated)."""
    return [int(pid) for pid in children.split()]


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants: a server that forks helpers pays for them too."""
    found = []
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += child_pids((task / "children").read_text())
        except FileNotFoundError:
            continue  # exited while being read
        found.append(current)
    return found


def cpu_seconds(stat: str) -> float:
    """utime + stime of a ``/proc/<pid>/stat`` text, in seconds.

    The command name (field 2) may hold spaces and parentheses: fields are
    counted from the last ``)``.
    """
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # fields 14 and 15 of the whole line


def _tree_texts(pid: int, name: str) -> Iterator[str]:
    """``/proc/<p>/<name>`` of ``pid`` and each descendant still there when read."""
    for current in tree_pids(pid):
        try:
            yield Path(f"/proc/{current}/{name}").read_text()
        except FileNotFoundError:
            continue  # exited while being read


def tree_rss(pid: int) -> int:
    """RSS of ``pid`` and its descendants."""
    return sum(rss_bytes(status) for status in _tree_texts(pid, "status"))


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants so far."""
    return sum(cpu_seconds(stat) for stat in _tree_texts(pid, "stat"))


def _raise_fd_limit() -> None:
    """Soft open-file limit up to the hard one, for this process and the servers it starts."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@asynccontextmanager
async def _server(
    command: list[str], p: Params, log: str, *, js: bool = True
) -> AsyncIterator[tuple[int, Target]]:
    """One server on the run's store dir (kept across restarts); its pid and target."""
    assert p.store is not None, "the harness sets the store of every run"
    workdir = p.store.parent
    flags = profile_args(Profile.JS, workdir) if js else []
    args = [*command, "-a", "127.0.0.1", "-p", "-1", *flags]
    async with server_process(args, workdir / log, START_SECONDS) as (proc, target):
        yield proc.pid, target


async def _api(url: str, subject: str, key: str, want: int) -> None:
    """Poll a JetStream API subject until ``key`` (a dotted path) reaches ``want``.

    A restarted server may answer before it has loaded every stream; only the count
    proves it has.
    """
    nc = await connect(url, "bench-scale-ready")
    seen: object = None
    try:
        deadline = perf_counter() + START_SECONDS
        while perf_counter() < deadline:
            try:
                reply = json.loads((await nc.request(subject, b"", timeout=API_SECONDS)).data)
            except (TimeoutError, NoRespondersError):  # JetStream still starting
                await asyncio.sleep(READY_POLL)
                continue
            seen = reply
            for part in key.split("."):
                seen = seen.get(part, {}) if isinstance(seen, dict) else None
            if seen == want:
                return
            await asyncio.sleep(READY_POLL)
    finally:
        await nc.close()
    raise Incomplete(f"{subject}: {key} is {seen!r}, not {want} after {START_SECONDS:g} s")


async def _nats(url: str, *args: str) -> bytes:
    return await natscli._run([natscli._cli(), "--no-context", "-s", url, *args])


async def _stream(url: str, subjects: str) -> None:
    await _nats(
        url, "stream", "add", STREAM, f"--subjects={subjects}", "--storage=file", "--defaults"
    )


async def _bench_pub(url: str, p: Params, count: int, *extra: str) -> float:
    args = natscli._args(
        url, p, "bench", "js", "pub", "async", SUBJECT, f"--stream={STREAM}", f"--msgs={count}"
    )
    return natscli._rate(await natscli._run([*args, *extra]), args)


async def subjects(_url: str, p: Params, *, command: list[str], sizes: Sizes) -> dict[str, float]:
    """One stream, one message per distinct subject, each with a msg-id."""
    async with _server(command, p, "server.log") as (pid, target):
        base = tree_rss(pid)
        await _stream(target.url, f"{SUBJECT}.>")
        rate = await _bench_pub(
            target.url, p, sizes.subjects, "--multisubject", "--multisubjectmax=0", "--dedup"
        )
        info = f"$JS.API.STREAM.INFO.{STREAM}"
        await _api(target.url, info, "state.num_subjects", sizes.subjects)
        after = tree_rss(pid)
    return {
        "msgs_per_s": rate,
        "rss_mib": after / MIB,
        "bytes_per_subject": (after - base) / sizes.subjects,
    }


async def _open(url: str) -> Conn:
    """A raw client connection, CONNECT answered by PONG: the lightest idle client."""
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    await reader.readline()  # INFO
    writer.write(CONNECT)
    await reader.readuntil(PONG)
    return reader, writer


async def _subscribe(conn: Conn, first: int, n: int) -> None:
    reader, writer = conn
    writer.write(
        b"".join(b"SUB %s.%d %d\r\n" % (SUBJECT.encode(), s, s) for s in range(first, first + n))
        + b"PING\r\n"
    )
    await reader.readuntil(PONG)


async def connections(
    _url: str, p: Params, *, command: list[str], sizes: Sizes
) -> dict[str, float]:
    """Idle connections, then distinct-subject subscriptions spread evenly over them."""
    _raise_fd_limit()
    conns: list[Conn] = []
    async with _server(command, p, "server.log", js=False) as (pid, target):
        try:
            base = tree_rss(pid)
            for start in range(0, sizes.conns, BATCH):
                batch = range(start, min(start + BATCH, sizes.conns))
                conns += await asyncio.gather(*(_open(target.url) for _ in batch))
            connected = tree_rss(pid)
            per, extra = divmod(sizes.subs, len(conns))
            first = 0
            for start in range(0, len(conns), BATCH):
                jobs = []
                for i in range(start, min(start + BATCH, len(conns))):
                    n = per + (i < extra)
                    jobs.append(_subscribe(conns[i], first, n))
                    first += n
                await asyncio.gather(*jobs)
            subscribed = tree_rss(pid)
        finally:
            for _, writer in conns:
                writer.close()
    return {
        "rss_mib": subscribed / MIB,
        "kib_per_conn": (connected - base) / sizes.conns / KIB,
        "bytes_per_sub": (subscribed - connected) / sizes.subs,
    }


@asynccontextmanager
async def _started(
    command: list[str], p: Params, log: str, subject: str, key: str, want: int
) -> AsyncIterator[tuple[float, int, str]]:
    """A server on the store as it is: seconds from exec until ``key`` reaches ``want``,
    its RSS then, and its URL."""
    start = perf_counter()
    async with _server(command, p, log) as (pid, target):
        await _api(target.url, subject, key, want)
        yield perf_counter() - start, tree_rss(pid), target.url


async def _restart(
    command: list[str], p: Params, subject: str, key: str, want: int
) -> tuple[float, int]:
    async with _started(command, p, "restart.log", subject, key, want) as (seconds, rss, _):
        return seconds, rss


async def streams(_url: str, p: Params, *, command: list[str], sizes: Sizes) -> dict[str, float]:
    """An empty start timed, ``streams`` file streams of one message each, a restart timed."""
    info = "$JS.API.INFO"
    async with _started(command, p, "server.log", info, "streams", 0) as (empty_s, empty, url):
        nc = await connect(url, "bench-scale")
        try:
            js = nc.jetstream(timeout=p.timeout)
            for i in range(sizes.streams):
                subject = f"{SUBJECT}.{i}"
                await js.add_stream(
                    name=f"{STREAM}{i}", subjects=[subject], storage=StorageType.FILE
                )
                await js.publish(subject, p.payload)
        finally:
            await nc.close()
    seconds, rss = await _restart(command, p, info, "streams", sizes.streams)
    return {
        "empty_start_ms": empty_s * 1e3,
        "empty_rss_mib": empty / MIB,
        "start_ms": seconds * 1e3,
        "rss_mib": rss / MIB,
    }


async def history(_url: str, p: Params, *, command: list[str], sizes: Sizes) -> dict[str, float]:
    """``messages`` stored by `nats bench js pub async`, then a restart timed."""
    async with _server(command, p, "server.log") as (_, target):
        await _stream(target.url, SUBJECT)
        rate = await _bench_pub(target.url, p, sizes.messages)
    info = f"$JS.API.STREAM.INFO.{STREAM}"
    seconds, rss = await _restart(command, p, info, "state.messages", sizes.messages)
    return {"msgs_per_s": rate, "start_ms": seconds * 1e3, "rss_mib": rss / MIB}


def _metric(key: str, label: str, unit: str) -> Metric:
    return Metric(key, label, unit, higher_is_better=unit == RATE)


def _sizes(args: argparse.Namespace) -> Sizes:
    return Sizes(
        subjects=args.scale_subjects,
        conns=args.scale_conns,
        subs=args.scale_subs,
        streams=args.scale_streams,
        messages=args.scale_messages,
    )


def workloads(sizes: Sizes) -> list[Workload]:
    """The rows at ``sizes``, each side's measure bound to its binary (as the cluster rows)."""

    def row(name: str, measure: Measure, metrics: tuple[Metric, ...], text: str) -> Workload:
        return Workload(
            f"{GROUP}-{name}",
            Profile.OFFLINE,
            partial(measure, command=COMMANDS["jetlake"], sizes=sizes),
            metrics,
            text,
            ref_measure=partial(measure, command=COMMANDS["ref"], sizes=sizes),
            timeout=1800.0,
        )

    return [
        row(
            "subjects",
            subjects,
            (
                _metric("msgs_per_s", f"{sizes.subjects:,} subjects + msg-ids: publish", RATE),
                _metric("rss_mib", "RSS after", "MiB"),
                _metric("bytes_per_subject", "RSS growth per subject", "B"),
            ),
            "nats bench js pub async --multisubject --dedup: one message per distinct subject",
        ),
        row(
            "conns",
            connections,
            (
                _metric("kib_per_conn", f"{sizes.conns:,} idle conns: RSS per conn", "KiB"),
                _metric("bytes_per_sub", f"{sizes.subs:,} subs: RSS per sub", "B"),
                _metric("rss_mib", "RSS after", "MiB"),
            ),
            "raw TCP CONNECT+PING clients, then distinct-subject SUBs spread over them",
        ),
        row(
            "streams",
            streams,
            (
                _metric("empty_start_ms", "start, empty store", "ms"),
                _metric("empty_rss_mib", "RSS, empty store", "MiB"),
                _metric("start_ms", f"start, {sizes.streams:,} streams", "ms"),
                _metric("rss_mib", f"RSS, {sizes.streams:,} streams", "MiB"),
            ),
            "exec → $JS.API.INFO counts every stream; file streams of one message each",
        ),
        row(
            "history",
            history,
            (
                _metric("msgs_per_s", "fill: js publish async", RATE),
                _metric("start_ms", f"start, {sizes.messages:,} msgs stored", "ms"),
                _metric("rss_mib", "RSS after start", "MiB"),
            ),
            "exec → STREAM.INFO reports every message stored by nats bench js pub async",
        ),
    ]


def choose(names: list[str], args: argparse.Namespace) -> tuple[list[str], list[Workload]]:
    """Split ``--only`` names into those for ``workloads.select`` and the scale rows picked.

    ``scale`` picks every row; the rows are never part of an unfiltered run.
    """
    rows = workloads(_sizes(args))
    picked = [w for w in rows if GROUP in names or w.name in names]
    rest = [n for n in names if n != GROUP and n not in {w.name for w in rows}]
    return rest, picked
