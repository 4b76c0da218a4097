"""The `jetlake` command: a thin composition root that dispatches to subcommands.

Each subcommand is imported only when chosen, so `jetlake serve` never pays for
Spark or DuckDB imports.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module

# name -> (module, what it does, the docs page that explains it)
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "serve": (
        "ingest.server.main",
        "run a NATS-compatible server (flags as nats-server)",
        "docs/configuration.md",
    ),
    "bench": (
        "benchmarks.run",
        "side-by-side benchmark against the reference server",
        "docs/benchmarks.md",
    ),
    "inspect": (
        "sql.inspect",
        "list segments or query streams of a store dir with DuckDB",
        "docs/lake-duckdb.md",
    ),
    "sql": (
        "sql.cli",
        "Spark SQL over every stream's history; `sql serve`: the SQL service",
        "docs/lake.md",
    ),
    "job": ("jobs.lake_job", "lake batch jobs: compact, optimize, vacuum", "docs/lake.md#jobs"),
}
# a command's subcommand with options of its own -> the docs page that explains it
_SUBCOMMANDS: dict[str, str] = {"sql serve": "docs/lake.md#the-sql-service"}


def help_pages() -> dict[str, str]:
    """Every command line whose `--help` names a docs page, and that page."""
    pages = {name: page for name, (_, _, page) in _COMMANDS.items()}
    return pages | _SUBCOMMANDS


def _page(args: list[str]) -> str:
    """The page of the most specific command `args` start with."""
    return _SUBCOMMANDS.get(" ".join(args[:2]), _COMMANDS[args[0]][2])


def _usage() -> str:
    """One screen: the commands, and where each is explained (the docs live in the repo)."""
    lines = ["usage: jetlake <command> [options]", "", "commands:"]
    lines += [f"  {name:<10} {about}" for name, (_, about, _) in _COMMANDS.items()]
    lines += ["", "`jetlake <command> --help` lists a command's options. Documentation, in the"]
    lines += ["repository's docs/ (`make docs` builds the site): docs/getting-started.md, and"]
    lines += [f"  {name:<10} {page}" for name, page in help_pages().items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if args else 2
    entry = _COMMANDS.get(args[0])
    if entry is None:
        print(f"jetlake: unknown command {args[0]!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    command: Callable[[list[str]], int] = import_module(entry[0]).main
    if not {"-h", "--help"} & set(args[1:]):
        return command(args[1:])
    try:
        status = command(args[1:])
    except SystemExit as done:  # argparse ends its help this way
        status = done.code if isinstance(done.code, int) else 0
    print(f"\nDocumentation: {_page(args)} (`make docs` builds the site)")
    return status


if __name__ == "__main__":
    sys.exit(main())
