"""The `nats` CLI's JetStream, KV and Object Store commands: jetlake prints what the reference does.

The same session of commands runs against the test's server and a reference
server; each command's output is compared after normalising what differs by
nature (times, durations, ids) and the table padding that follows from it.
A reference run compares two reference servers, which checks the normalising.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import MakeServer
from tests.e2e.test_nats_cli import cli
from tests.support.servers import ServerProcess

_VOLATILE = (
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?Z?"), "TIME"),
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "CLOCK"),  # the CLI's log lines
    (re.compile(r"\b\d+(\.\d+)?(ns|µs|ms|s)\b"), "DUR"),
    (re.compile(r"\b\d+(\.\d+)? ?[KMGT]?i?B/s\b"), "RATE"),  # the Object Store's put speed
    (re.compile(r"\b(N[A-Z0-9]{55}|[A-Za-z0-9]{22})\b"), "ID"),  # server ids, nuids
    (re.compile(r"127\.0\.0\.1:\d+"), "ADDR"),
    # jetlake reports its own version (and the reference's JetStream API level, 5).
    (re.compile(r"(Host Version|Connected Server Version): \S+"), r"\1: VERSION"),
    (re.compile(r'"_nats\.ver": "[^"]*"'), r'"_nats.ver": "V"'),
    (re.compile(r"Client ID: \d+"), "Client ID: CID"),
    (re.compile(r"publisher stats: .*"), "publisher stats: RESULT"),  # `nats bench` speeds
    (re.compile(r"[─━═]+"), "─"),
    (re.compile(r"[ \t]+"), " "),
)


MIRROR_CONFIG = "mirror.json"
SOURCE_CONFIG = "source.json"
# What these print races the copying that begins as they return: compared by exit code.
RACING = {("kv", "add", "FROMCFG", "--source", "CFG")}
REPUBLISHING = ("--republish-source", ">", "--republish-destination", "rp.>", "--republish-headers")
# Every option of `nats stream add` that one stream can take at once (counters, schedules,
# async persistence, mirrors and sources are other streams of the session).
EVERY_OPTION = (
    *("--subjects", "all.>", "--description", "d", "--storage", "file", "--compression", "s2"),
    *("--replicas", "1", "--retention", "limits", "--discard", "new", "--discard-per-subject"),
    *("--first-sequence", "10", "--max-age", "1h", "--max-bytes", "1MB", "--max-consumers", "5"),
    *("--max-msg-size", "1KB", "--max-msgs", "100", "--max-msgs-per-subject", "10"),
    *("--dupe-window", "1m", "--allow-rollup", "--deny-delete", "--allow-direct"),
    *("--allow-msg-ttl", "--subject-del-markers-ttl", "1m", "--allow-batch", "--metadata", "k=v"),
    *("--transform-source", "all.>", "--transform-destination", "moved.>"),
    *("--republish-source", "moved.>", "--republish-destination", "rp.>", "--republish-headers"),
    *("--limit-consumer-inactive", "1h", "--limit-consumer-max-pending", "100"),
    *("--persist-mode", "default"),
)


def normalise(out: str) -> str:
    for pattern, replacement in _VOLATILE:
        out = pattern.sub(replacement, out)
    return "\n".join(line.strip() for line in out.splitlines() if line.strip())


def session(blob: Path, got: Path) -> list[tuple[str, ...]]:
    """What a user does in a first hour with the CLI (all non-interactive)."""
    return [
        ("stream", "add", "ORDERS", "--subjects", "orders.>", "--defaults"),
        ("pub", "orders.new", "o1"),
        ("pub", "orders.new", "o2"),
        ("pub", "orders.old", "o3"),
        ("stream", "ls"),
        ("stream", "report"),
        ("stream", "get", "ORDERS", "2"),
        ("stream", "subjects", "ORDERS"),
        # `--mirror` asks for details on a terminal; a config file is the scripted way.
        ("stream", "add", "BACKUP", "--config", str(blob.with_name(MIRROR_CONFIG))),
        ("stream", "rm", "BACKUP", "-f"),  # before its copying (asynchronous) shows anywhere
        ("consumer", "add", "ORDERS", "C1", "--pull", "--defaults"),
        ("consumer", "next", "ORDERS", "C1", "--count", "2"),
        ("consumer", "report", "ORDERS"),
        ("consumer", "info", "ORDERS", "C1", "--json"),
        ("kv", "add", "CFG", "--history", "5"),
        ("kv", "put", "CFG", "a", "1"),
        ("kv", "put", "CFG", "a", "2"),
        ("kv", "put", "CFG", "b", "3"),
        ("kv", "get", "CFG", "a", "--raw"),
        ("kv", "ls", "CFG"),
        ("kv", "history", "CFG", "a"),
        ("kv", "del", "CFG", "b", "-f"),
        ("kv", "add", "RP", *REPUBLISHING, "--compress", "--ttl", "1h", "--max-value-size", "1KB"),
        ("kv", "put", "RP", "k", "v"),
        ("kv", "info", "RP"),
        ("kv", "rm", "RP", "-f"),
        ("kv", "ls"),
        ("object", "add", "FILES"),
        ("object", "put", "FILES", str(blob), "--name", "blob"),
        ("object", "get", "FILES", "blob", "-O", str(got)),
        ("object", "ls", "FILES"),
        # the benchmark creates an atomic-batch stream (and needs API level 2)
        ("bench", "js", "pub", "sync", "bench.s", "--create", "--msgs", "100", "--no-progress"),
        ("bench", "js", "pub", "batch", "bench.s", "--batch=10", "--msgs=100", "--no-progress"),
        ("stream", "info", "benchstream", "--json"),
        ("stream", "add", "CNT", "--subjects", "cnt.>", "--allow-counter", "--defaults"),
        ("stream", "add", "SCHED", "--subjects", "s.>", "--allow-schedules", "--defaults"),
        ("stream", "add", "ALL", *EVERY_OPTION, "--defaults"),
        ("stream", "info", "ALL", "--json"),
        ("stream", "rm", "ALL", "-f"),
        ("stream", "rm", "benchstream", "-f"),
        ("stream", "rm", "CNT", "-f"),
        ("stream", "rm", "SCHED", "-f"),
        ("account", "info"),
        ("server", "check", "jetstream"),
        # last: on the reference a source's consumer on its origin outlives it a while
        ("stream", "add", "AGG", "--config", str(blob.with_name(SOURCE_CONFIG))),
        ("stream", "rm", "AGG", "-f"),
        *RACING,
        ("kv", "rm", "FROMCFG", "-f"),
        ("stream", "purge", "ORDERS", "-f"),
        ("stream", "rm", "ORDERS", "-f"),
        ("stream", "ls", "--names"),
    ]


async def run_command(server: ServerProcess, command: tuple[str, ...]) -> tuple[int, str]:
    """One command; an object get again if the client's reader raced its own end (nats.go
    sometimes ends `object get` with "context canceled" after the last chunk, on either
    server alike)."""
    code, out = await cli(server.url, *command)
    if command[:2] == ("object", "get") and "context canceled" in out:
        code, out = await cli(server.url, *command)
    return code, out


async def run_session(server: ServerProcess, folder: Path) -> list[tuple[int, str]]:
    folder.mkdir()
    blob, got = folder / "blob.bin", folder / "got.bin"
    blob.write_bytes(bytes(range(256)) * 12_288)  # 3 MiB: 24 chunks
    mirror = {"name": "BACKUP", "mirror": {"name": "ORDERS"}, "storage": "file", "num_replicas": 1}
    (folder / MIRROR_CONFIG).write_text(json.dumps(mirror))
    sources = [{"name": "ORDERS", "filter_subject": "orders.new"}]
    source = {"name": "AGG", "sources": sources, "storage": "file", "num_replicas": 1}
    (folder / SOURCE_CONFIG).write_text(json.dumps(source))
    outputs = [await run_command(server, command) for command in session(blob, got)]
    assert got.read_bytes() == blob.read_bytes()
    return [(code, normalise(out.replace(str(folder), "DIR"))) for code, out in outputs]


async def test_cli_jetstream_session_matches_reference(
    make_server: MakeServer, tmp_path: Path
) -> None:
    mine = make_server("-js", "-sd", str(tmp_path / "mine"))
    ref = make_server("-js", "-sd", str(tmp_path / "ref"), kind="nats-server")
    got = await run_session(mine, tmp_path / "mine-cli")
    want = await run_session(ref, tmp_path / "ref-cli")
    commands = session(Path("blob"), Path("got"))
    for command, (code, out), (ref_code, ref_out) in zip(commands, got, want, strict=True):
        if command in RACING:
            assert code == ref_code, " ".join(command)
            continue
        assert (code, out) == (ref_code, ref_out), " ".join(command)
    check = commands.index(("server", "check", "jetstream"))
    assert want[0][0] == 0 and "OK JetStream" in want[check][1]
    made = {"ALL", "AGG", "RP", "FROMCFG"}
    pairs = zip(commands, want, strict=True)
    codes = [code for command, (code, _) in pairs if made & set(command)]
    assert codes == [0] * 11  # streams and buckets with every option: made, shown, removed
