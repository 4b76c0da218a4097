"""What a SQL query pays to have its server show replicated streams current.

Before each read the SQL service asks the server beside it on `$JL.STORE.CURRENT`
(docs/lake.md, "Replicated streams"), which answers after a ReadIndex round per stream
asked about. This starts three jetlake servers as `jetlake bench --only cluster` does,
makes ``--streams`` R3 streams with a message each, and times ``--asks`` requests through
nats-py on every server, for every stream (what a listing asks) and for one (what a
query naming one stream asks). Medians and 90th percentiles in ms, as JSON. jetlake
alone: nats-server has no such subject.

    python -m benchmarks.cluster.current [--streams 50] [--asks 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
from pathlib import Path
from time import perf_counter

from benchmarks.client import connect
from benchmarks.cluster.rows import COMMANDS, _cluster, _create_stream, placeable
from sql.current import SUBJECT


async def _timed(url: str, body: bytes, asks: int) -> dict[str, float]:
    nc = await connect(url, "cluster-current")
    try:
        times = []
        for _ in range(asks):
            start = perf_counter()
            answer = await nc.request(SUBJECT, body, timeout=10)
            times.append((perf_counter() - start) * 1e3)
            if json.loads(answer.data).get("behind"):
                raise RuntimeError(f"{url}: a stream could not be shown current: {answer.data!r}")
    finally:
        await nc.close()
    times.sort()
    return {"p50": round(statistics.median(times), 2), "p90": round(times[len(times) * 9 // 10], 2)}


async def measure(streams: int, asks: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as root:
        async with _cluster(COMMANDS["jetlake"], Path(root), 3) as nodes:
            await placeable(nodes[0].url, 3)
            nc = await connect(nodes[0].url, "cluster-current")
            try:
                js = nc.jetstream(timeout=5.0)
                for i in range(streams):
                    await _create_stream(js, f"C{i}", f"c{i}.x", 3)
                    await js.publish(f"c{i}.x", b"x")
            finally:
                await nc.close()
            one = json.dumps({"streams": [{"account": "$G", "stream": "C0"}]}).encode()
            out: dict[str, object] = {"streams": streams}
            for node in nodes:
                out[node.name] = {
                    "every stream": await _timed(node.url, b"", asks),
                    "one stream": await _timed(node.url, one, asks),
                }
            out["load"] = round(os.getloadavg()[0], 1)
            return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--asks", type=int, default=200)
    opts = parser.parse_args(argv)
    print(json.dumps(asyncio.run(measure(opts.streams, opts.asks))))


if __name__ == "__main__":
    main()
