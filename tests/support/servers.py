"""Real server processes (reference nats-server or jetlake) for end-to-end tests.

Both servers take the same command line, so a test is written once and run
against either. Readiness is detected from the log lines both servers print on
stderr (``Listening for client connections on HOST:PORT``, ``Server is ready``)
rather than by sleeping or polling the port: a test never waits longer than the
server needs, and a server that fails to start reports its own log.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO

VENV_BIN = Path(sys.executable).parent
KINDS = ("nats-server", "jetlake")

_LISTEN_RE = re.compile(r"Listening for client connections on (\S+):(\d+)")
_HTTP_RE = re.compile(r"Starting http monitor on (\S+):(\d+)")
_READY_RE = re.compile(r"Server is ready")

START_TIMEOUT = 30.0  # a deadline: jetlake imports for 1-2 s, several times that on a busy machine
STOP_TIMEOUT = 10.0


class ServerError(AssertionError):
    """A server failed to start or stop as expected; carries its log."""


def server_command(kind: str) -> list[str]:
    """The argv prefix that runs ``kind``; both accept the reference's flags."""
    if kind == "nats-server":
        return [str(VENV_BIN / "nats-server")]
    if kind == "jetlake":
        return [str(VENV_BIN / "jetlake"), "serve"]
    raise ValueError(f"unknown server kind {kind!r}; expected one of {KINDS}")


class ServerProcess:
    """One running server; restartable on the port it first bound."""

    def __init__(
        self,
        kind: str,
        args: Sequence[str],
        *,
        config_path: Path | None,
        log_path: Path,
        wrapper: Sequence[str] = (),
    ) -> None:
        self.kind = kind
        self.args = list(args)
        self.wrapper = list(wrapper)  # e.g. `ip netns exec NS`: must exec, not fork
        self.config_path = config_path
        self.log_path = log_path
        self.host = "127.0.0.1"
        self.port = 0
        self.http_port: int | None = None
        self.returncode: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self._reader: threading.Thread | None = None
        self._eof = False

    # -- lifecycle -----------------------------------------------------------

    def start(self, *, port: int | None = None) -> ServerProcess:
        """Start and block until the server says it is ready (or fail with its log)."""
        argv = self.wrapper + server_command(self.kind) + self._argv(port)
        with self._cond:
            self._lines = []
            self._eof = False
        log = self.log_path.open("ab")
        log.write(f"=== {' '.join(argv)}\n".encode())
        log.flush()
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.PIPE,
                cwd=self.log_path.parent,
            )
        except OSError as exc:
            log.close()
            raise ServerError(f"{self.kind}: cannot run {argv[0]}: {exc}") from exc
        self.returncode = None
        self._reader = threading.Thread(
            target=self._pump, args=(self._proc, log), name=f"{self.kind}-stderr", daemon=True
        )
        self._reader.start()
        try:
            listen = self.wait_for_log(_LISTEN_RE, START_TIMEOUT)
            self.host, self.port = listen.group(1), int(listen.group(2))
            self.wait_for_log(_READY_RE, START_TIMEOUT)
        except BaseException:
            # A start given up on must not leave its server running: it went on dialling
            # its routes for the rest of the run and could join another test's cluster
            # (all are named C) on ports handed out again.
            self.kill()
            raise
        http = self.find_log(_HTTP_RE)
        self.http_port = int(http.group(2)) if http else None
        return self

    def _argv(self, port: int | None) -> list[str]:
        """Flags for this start: a restart pins the port the first start got."""
        args = list(self.args)
        if self.config_path is not None:
            args = ["-c", str(self.config_path), *args]
        if port is not None:
            args = _replace_flag(args, ("-p", "--port"), str(port))
            if self.http_port is not None:
                args = _replace_flag(args, ("-m", "--http_port"), str(self.http_port))
        return args

    def _pump(self, proc: subprocess.Popen[bytes], log: BinaryIO) -> None:
        """Copy stderr to the log file and keep lines for wait_for_log."""
        assert proc.stderr is not None
        try:
            for raw in proc.stderr:
                log.write(raw)
                log.flush()
                with self._cond:
                    self._lines.append(raw.decode(errors="replace").rstrip("\n"))
                    self._cond.notify_all()
        finally:
            log.close()
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def stop(self, *, expect_code: int | None = 0, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM, wait for exit; a graceful shutdown must exit 0."""
        return self._signal_and_wait(signal.SIGTERM, expect_code, timeout)

    def kill(self) -> int:
        """SIGKILL: the crash case, no shutdown code runs."""
        return self._signal_and_wait(signal.SIGKILL, None, STOP_TIMEOUT)

    def restart(self, *, timeout: float = STOP_TIMEOUT) -> ServerProcess:
        """Stop gracefully (if running) and start again on the same port(s)."""
        if self.running:
            self.stop(timeout=timeout)
        return self.start(port=self.port)

    def send_signal(self, sig: signal.Signals) -> None:
        """Deliver ``sig`` (e.g. SIGUSR2 for lame-duck mode)."""
        assert self._proc is not None
        self._proc.send_signal(sig)

    def wait_exit(self, timeout: float = STOP_TIMEOUT) -> int:
        """Wait for the process to exit on its own (after lame duck, say)."""
        assert self._proc is not None
        try:
            code = self._proc.wait(timeout)
        except subprocess.TimeoutExpired as exc:
            raise ServerError(f"{self.kind} did not exit within {timeout}s\n{self.log()}") from exc
        self._finish(code)
        return code

    def _signal_and_wait(self, sig: signal.Signals, expect: int | None, timeout: float) -> int:
        if self._proc is None:
            raise ServerError(f"{self.kind} was never started")
        if self._proc.poll() is None:
            self._proc.send_signal(sig)
        code = self.wait_exit(timeout)
        if expect is not None and code != expect:
            raise ServerError(
                f"{self.kind} exited with {code} after {sig.name}, expected {expect}\n{self.log()}"
            )
        return code

    def _finish(self, code: int) -> None:
        self.returncode = code
        if self._reader is not None:
            self._reader.join(STOP_TIMEOUT)

    async def stop_async(self, *, expect_code: int | None = 0) -> int:
        """stop() without blocking the event loop the clients under test run on."""
        return await asyncio.to_thread(self.stop, expect_code=expect_code)

    async def restart_async(self) -> ServerProcess:
        """restart() without blocking the event loop."""
        return await asyncio.to_thread(self.restart)

    async def wait_exit_async(self, timeout: float = STOP_TIMEOUT) -> int:
        """wait_exit() without blocking the event loop."""
        return await asyncio.to_thread(self.wait_exit, timeout)

    # -- observation ---------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def tls_url(self) -> str:
        return f"tls://{self.host}:{self.port}"

    @property
    def http_url(self) -> str:
        if self.http_port is None:
            raise ServerError(f"{self.kind} was started without -m")
        return f"http://{self.host}:{self.http_port}"

    def log(self) -> str:
        """Everything the server printed on stderr since its last start."""
        with self._cond:
            return "\n".join(self._lines)

    def find_log(self, pattern: re.Pattern[str] | str) -> re.Match[str] | None:
        """First log line (since the last start) matching ``pattern``, if any."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        with self._cond:
            for line in self._lines:
                if m := rx.search(line):
                    return m
        return None

    def wait_for_log(
        self, pattern: re.Pattern[str] | str, timeout: float = START_TIMEOUT
    ) -> re.Match[str]:
        """Block until a stderr line matches; fail with the log on deadline or exit."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self._lines[seen:]:
                    if m := rx.search(line):
                        return m
                seen = len(self._lines)
                if self._eof:
                    raise ServerError(
                        f"{self.kind} exited before logging {rx.pattern!r}\n{self._log_locked()}"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ServerError(
                        f"{self.kind} did not log {rx.pattern!r} within {timeout}s\n"
                        f"{self._log_locked()}"
                    )
                self._cond.wait(left)

    def _log_locked(self) -> str:
        """log() for callers already holding the condition's lock."""
        return "\n".join(self._lines)

    async def wait_for_log_async(
        self, pattern: re.Pattern[str] | str, timeout: float = START_TIMEOUT
    ) -> re.Match[str]:
        """wait_for_log() without blocking the event loop."""
        return await asyncio.to_thread(self.wait_for_log, pattern, timeout)

    def __repr__(self) -> str:
        return f"<{self.kind} {self.url} pid={self._proc.pid if self._proc else None}>"


def print_logs(servers: Iterable[ServerProcess]) -> None:
    """Each server's stderr since its last start, for a failed test's captured output."""
    for server in servers:
        print(f"----- {server.kind} stderr ({server.log_path}) -----\n{server.log()}")


def _replace_flag(args: list[str], names: tuple[str, ...], value: str) -> list[str]:
    """Set a flag's value whether it was given as ``-f v``, ``-f=v`` or not at all."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg in names and i + 1 < len(args):
            skip = True
            continue
        if any(arg.startswith(n + "=") for n in names):
            continue
        out.append(arg)
    return [*out, names[0], value]


def write_config(tmp_path: Path, text: str, name: str = "server.conf") -> Path:
    """Write a NATS config file under the test's tmp dir."""
    path = tmp_path / name
    path.write_text(text)
    return path


def start_server(
    kind: str,
    *args: str,
    config: str | None = None,
    tmp_path: Path,
    name: str | None = None,
    wrapper: Sequence[str] = (),
) -> ServerProcess:
    """Start ``kind`` on a free loopback port; ``args`` are extra nats-server flags.

    ``-a 127.0.0.1 -p -1`` come first so a test may still override them.
    ``wrapper`` prefixes the command (a network namespace, see tests/support/netns.py).
    """
    label = name or kind
    tmp_path.mkdir(parents=True, exist_ok=True)
    config_path = write_config(tmp_path, config, f"{label}.conf") if config is not None else None
    argv = ["-a", "127.0.0.1", "-p", "-1", *args]
    server = ServerProcess(
        kind,
        argv,
        config_path=config_path,
        log_path=tmp_path / f"{label}.stderr.log",
        wrapper=wrapper,
    )
    return server.start()


def enabled_kinds() -> list[str]:
    """Server kinds selected by ``JETLAKE_TEST_SERVERS`` (comma list), default both."""
    raw = os.environ.get("JETLAKE_TEST_SERVERS", "")
    wanted = [k.strip() for k in raw.split(",") if k.strip()] or list(KINDS)
    unknown = [k for k in wanted if k not in KINDS]
    if unknown:
        raise ValueError(f"JETLAKE_TEST_SERVERS: unknown kinds {unknown}; use {KINDS}")
    return wanted
