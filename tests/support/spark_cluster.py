"""A real Spark standalone cluster (one master, one worker) from the pyspark install, for tests.

Both daemons run in the foreground under `spark-class` (it execs the JVM, so
the process we hold is the daemon), bound to the loopback on ports the OS
picks, with their work dirs in the test's temp folder. Readiness is read from
their log lines, as `tests.support.servers` does for NATS servers: the master
prints its `spark://` URL and then that it was elected leader, the worker
that it registered. The master's REST submission server is off (it would
take the fixed port 6066, which another test run may hold).

Applications (jetlake's compactor, `jetlake sql`) reach the cluster with the
settings `app_env` gives them: the driver on the loopback, and per
application one core and a small executor, so the long-lived compactor leaves
the worker's other core to a query (a standalone application otherwise takes
every core there is, and a second one waits forever).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
START_SECONDS = 60.0  # a JVM start on a loaded 2-core machine
STOP_SECONDS = 10.0
WORKER_CORES = 2
WORKER_MEMORY = "1536m"
# spark-defaults.conf of the applications: they share the worker; an executor lives for one
# test, so the quick compiler alone (C1) and one GC thread suit it better than the defaults.
APP_DEFAULTS = {
    "spark.cores.max": "1",
    "spark.executor.cores": "1",
    "spark.executor.memory": "640m",
    "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}

_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI = re.compile(r"MasterWebUI: Bound MasterWebUI to \S+, and started at (http://\S+)")
_LEADER = re.compile(r"I have been elected leader")
_REGISTERED = re.compile(r"Successfully registered with master")


class ClusterError(AssertionError):
    """A daemon failed to start in time; carries its log."""


@dataclass
class Daemon:
    """One spark-class JVM and the lines it printed so far."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    lines: list[str] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def pump(self, log: IO[bytes]) -> None:
        assert self.proc.stderr is not None
        with log:
            for raw in self.proc.stderr:
                log.write(raw)
                log.flush()
                with self.cond:
                    self.lines.append(raw.decode(errors="replace"))
                    self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, pattern: re.Pattern[str]) -> re.Match[str]:
        end = time.monotonic() + START_SECONDS
        seen = 0
        with self.cond:
            while True:
                for line in self.lines[seen:]:
                    if found := pattern.search(line):
                        return found
                seen = len(self.lines)
                left = end - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    tail = "".join(self.lines[-40:])
                    raise ClusterError(f"spark {self.name}: no {pattern.pattern!r}\n{tail}")
                self.cond.wait(min(left, 1.0))

    def stop(self) -> None:
        """SIGTERM to its process group (the JVM and anything it forked), SIGKILL if slow."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _start(name: str, argv: list[str], folder: Path, env: dict[str, str]) -> Daemon:
    log_path = folder / f"spark-{name}.log"
    proc = subprocess.Popen(
        [str(SPARK_HOME / "bin" / "spark-class"), *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=folder,
        env=env,
        start_new_session=True,
    )
    daemon = Daemon(name, proc, log_path)
    threading.Thread(target=daemon.pump, args=(log_path.open("ab"),), daemon=True).start()
    return daemon


@dataclass
class SparkCluster:
    """A running master and worker; `url` is what `--spark_master` takes."""

    url: str
    ui: str
    work_dir: Path
    conf_dir: Path
    daemons: list[Daemon]

    def app_env(self) -> dict[str, str]:
        """Environment variables under which a driver (compactor, `jetlake sql`) uses it."""
        return {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_CONF_DIR": str(self.conf_dir)}

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()


def start_cluster(folder: Path) -> SparkCluster:
    """A master and one worker (2 cores, 1.5 GB) under `folder`; stop() ends both."""
    work_dir, conf_dir = folder / "work", folder / "conf"
    work_dir.mkdir(parents=True)
    conf_dir.mkdir()
    defaults = "".join(f"{key} {value}\n" for key, value in APP_DEFAULTS.items())
    (conf_dir / "spark-defaults.conf").write_text(defaults)
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "SPARK_WORKER_DIR": str(work_dir),
        "SPARK_LOG_DIR": str(folder),
    }
    daemons: list[Daemon] = []
    try:
        host = ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"]
        master = _start("master", [MASTER_CLASS, *host], folder, env)
        daemons.append(master)
        url = master.wait_for(_MASTER_URL).group(1)
        ui = master.wait_for(_MASTER_UI).group(1)
        master.wait_for(_LEADER)
        resources = ["--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY]
        worker_argv = [WORKER_CLASS, *host, *resources, "--work-dir", str(work_dir), url]
        worker = _start("worker", worker_argv, folder, env)
        daemons.append(worker)
        worker.wait_for(_REGISTERED)
    except BaseException:
        for daemon in reversed(daemons):
            daemon.stop()
        raise
    return SparkCluster(url, ui, work_dir, conf_dir, daemons)
