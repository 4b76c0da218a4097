"""The SQL service beside a lake server: `jetlake sql serve` as a child process.

A process of its own, like the compactor: its JVM's pauses and memory never
reach the event loop, and a crash of one leaves the other serving. It exits
with the server (`--parent`) and is restarted, after a pause, if it dies, unless it
found its address taken (a second server on the machine with the same `lake { sql }`).
`JETLAKE_SQL=off` in the environment keeps it from starting whatever the
configuration says: for test rigs and machines where no second JVM may run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
from pathlib import Path

from ingest.server.child import stop_child
from ingest.server.settings import SqlConfig
from sql.logins import OWN_LOGIN_ENV

log = logging.getLogger("jetlake")

DISABLE_ENV = "JETLAKE_SQL"
ADDRESS_TAKEN = 3  # `jetlake sql serve`'s exit code when its port is in use
_RESTART_PAUSE = 30.0  # a JVM start each time: not in a tight loop
_STOP_WAIT = 10.0


class SqlServiceProcess:
    """Runs and watches the service; `argv` says what it serves."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self._argv = argv
        self._env = env
        self._proc: subprocess.Popen[bytes] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            self._proc = subprocess.Popen(self._argv, stdin=subprocess.DEVNULL, env=self._env)
            log.info("Started the SQL service (pid %d)", self._proc.pid)
            code = await asyncio.to_thread(self._proc.wait)
            if code == ADDRESS_TAKEN:  # another server's service, most likely: no retry
                log.error("SQL service not started: its address is taken (see its error above)")
                return
            log.error("SQL service (pid %d) exited with code %d", self._proc.pid, code)
            await asyncio.sleep(_RESTART_PAUSE)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await stop_child(self._proc, _STOP_WAIT)


def sql_service(
    config: SqlConfig | None,
    *,
    store_dir: Path,
    lake_root: str,
    spark_master: str | None,
    client_url: str,
    env: dict[str, str],
    logins: bool = False,
) -> SqlServiceProcess | None:
    """The service for this server's lake, unless it is off (configured, or by the env).

    With `logins` (the server has accounts or users) Spark Connect and JDBC clients log
    in with NATS credentials this server checks. The service's own login for `nats`
    goes in the environment, not argv, which every `ps` shows."""
    if config is None or os.environ.get(DISABLE_ENV, "").lower() == "off":
        return None
    argv = [sys.executable, "-m", "jobs.cli", "sql", "serve", "--store", str(store_dir)]
    argv += ["--lake", lake_root, "--listen", config.listen, "--parent", str(os.getpid())]
    if config.jdbc is not None:
        argv += ["--jdbc", config.jdbc]
    if config.nats is not None:
        argv += ["--nats", config.nats or client_url]
    if config.creds is not None:
        argv += ["--nats_creds", config.creds]
    argv += ["--max_rows", str(config.max_rows), "--max_result_size", str(config.max_result_size)]
    if logins:
        argv += ["--logins", client_url]
    own = (config.user, config.password, config.token)
    env = {**env, **{key: value for key, value in zip(OWN_LOGIN_ENV, own, strict=True) if value}}
    if config.catalog is not None:
        argv += ["--catalog", config.catalog]
    if spark_master:
        argv += ["--spark_master", spark_master]
    return SqlServiceProcess(argv, {**os.environ, **env})
