"""`nats server list`, `nats server report jetstream` and `nats server check jetstream` as a
system-account user print on jetlake what they print on the reference.

Both servers run the same configuration side by side; the CLI's tables are
parsed and compared column by column. Columns that differ by nature (versions,
memory, CPU, uptimes, round trips, internal subscription counts, API request
totals) are left out; names, clusters, counts of servers, routes, connections,
streams, messages and bytes must match exactly.
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_nats_cli import cli
from tests.support.cluster import start_js_mesh, stop_all
from tests.support.poll import poll_async
from tests.support.servers import ServerProcess, start_server

CONFIG = """
accounts {
  A { users [ {user: a, password: a} ], jetstream: enabled }
  SYS { users [ {user: sys, password: sys} ] }
}
system_account: SYS
"""
CLUSTER = "cluster { pool_size: -1 }\n"
KINDS = ("nats-server", "jetlake")
# Columns whose values are the server's nature, not its behaviour.
VARYING = {"Version", "Subs", "Mem", "CPU %", "Uptime", "RTT", "API Req"}

Table = tuple[list[str], list[list[str]], list[list[str]]]  # header, rows, totals


def tables(out: str) -> dict[str, Table]:
    """The CLI's boxed tables by title: header, body rows and the totals row(s)."""
    found: dict[str, Table] = {}
    sections: list[list[list[str]]] = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("╭"):
            sections = [[]]
        elif line.startswith("├"):
            sections.append([])
        elif line.startswith("│") and sections:
            sections[-1].append([cell.strip() for cell in line.strip("│").split("│")])
        elif line.startswith("╰") and len(sections) >= 3:
            title = sections[0][0][0]
            header = sections[1][0]
            totals = sections[3] if len(sections) > 3 else []
            found[title] = (header, sections[2], totals)
    return found


def comparable(table: Table) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Rows keyed by column (sorted by the first), without the varying columns; a leading
    server marked `*` as the JetStream meta leader is compared by name."""
    header, rows, totals = table

    def keep(row: list[str]) -> dict[str, str]:
        cells = {h: c for h, c in zip(header, row, strict=True) if h not in VARYING}
        first = header[0]
        cells[first] = cells[first].rstrip("*")
        return cells

    return sorted((keep(r) for r in rows), key=lambda r: r[header[0]]), [keep(r) for r in totals]


def url(server: ServerProcess, user: str) -> str:
    return f"nats://{user}:{user}@{server.host}:{server.port}"


async def run(server: ServerProcess, user: str, *args: str) -> str:
    code, out = await cli(url(server, user), *args)
    assert code == 0 or "CRITICAL" in out, out
    return out


async def until_ok(server: ServerProcess) -> str:
    """`check jetstream` as the account's user, once the servers' JetStream is ready (the
    reference elects a meta leader first)."""
    return await poll_async(
        lambda: run(server, "a", "server", "check", "jetstream"),
        "OK from check jetstream",
        20,
        until=lambda out: out.startswith("OK"),
    )


async def listed_all(server: ServerProcess, expect: int) -> dict[str, Table]:
    """`server list` once every server answers within the CLI's wait (a loaded machine
    can make one late while the mesh settles; the comparison is of what they answer)."""

    async def listed() -> dict[str, Table]:
        return tables(await run(server, "sys", "server", "list", str(expect)))

    def every(listed: dict[str, Table]) -> bool:
        overview = listed.get("Server Overview")
        return overview is not None and len(overview[1]) == expect

    return await poll_async(listed, f"{expect} servers listed", 20, until=every)


async def observe(server: ServerProcess, expect: int) -> dict[str, object]:
    listed = await listed_all(server, expect)
    report = tables(await run(server, "sys", "server", "report", "jetstream"))
    seen: dict[str, object] = {
        "servers": comparable(listed["Server Overview"]),
        "jetstream": comparable(report["JetStream Summary"]),
        "check": await until_ok(server),
        "check as sys": await run(server, "sys", "server", "check", "jetstream"),
    }
    if "Cluster Overview" in listed:
        seen["clusters"] = comparable(listed["Cluster Overview"])
    return seen


async def test_one_server(tmp_path: Path) -> None:
    seen = {}
    for kind in KINDS:
        store = tmp_path / kind / "js"
        server = start_server(
            kind, "-n", "R1", "-js", "-sd", str(store), config=CONFIG, tmp_path=tmp_path / kind
        )
        try:
            await run(server, "a", "stream", "add", "S", "--subjects", "s.>", "--defaults")
            await run(server, "a", "pub", "s.1", "hello")
            seen[kind] = await observe(server, 1)
        finally:
            server.stop()
    reference, ours = seen["nats-server"], seen["jetlake"]
    assert ours == reference
    rows, _ = reference["jetstream"]  # type: ignore[misc]
    assert [(r["Server"], r["Streams"], r["Messages"]) for r in rows] == [("R1", "1", "1")]
    assert str(reference["check as sys"]).startswith("CRITICAL")


async def test_three_servers(tmp_path: Path) -> None:
    seen = {}
    for kind in KINDS:
        servers = start_js_mesh(kind, tmp_path / kind, ["S0", "S1", "S2"], config=CONFIG + CLUSTER)
        try:
            seen[kind] = await observe(servers[0], 3)
        finally:
            stop_all(servers)
    reference, ours = seen["nats-server"], seen["jetlake"]
    assert ours == reference
    rows, _ = reference["servers"]  # type: ignore[misc]
    assert [(r["Name"], r["Routes"]) for r in rows] == [("S0", "2"), ("S1", "2"), ("S2", "2")]
