"""Eclipse Paho's MQTT 3.1.1 interoperability suite (`client_test.py`) against one server.

The suite is not part of jetlake: `PAHO_INTEROP_DIR` names the `interoperability/`
folder of a checkout of github.com/eclipse-paho/paho.mqtt.testing. It runs in a
child process (module globals, blocking sockets, threads that may hang), started
as `python paho_interop.py SUITE_DIR HOST PORT`. There the suite's own `__main__`
block runs, so its topics and option parsing are its own; only `unittest.main`,
which would parse the same argv again and print, is replaced by a runner that
reports each test's outcome on one line for the parent.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import unittest
from pathlib import Path

ENV = "PAHO_INTEROP_DIR"
SCRIPT = "client_test.py"
_MARK = "PAHO-INTEROP-RESULTS "


class _Outcomes(unittest.TestResult):
    """Successes too: a test that never ran (its class failed to set up) is not a pass."""

    def __init__(self) -> None:
        super().__init__()
        self.passed: list[unittest.TestCase] = []

    def addSuccess(self, test: unittest.TestCase) -> None:
        self.passed.append(test)


def _name(test: unittest.TestCase) -> str:
    return test.id().rsplit(".", 1)[-1]


def _report(**_: object) -> None:
    """Stands in for `unittest.main()` inside the suite's `__main__` block.

    The suite's `cleanup()` (run before its tests) connects with the client id
    `clean retained`, which both servers refuse (CONNACK 2: a space cannot be part of a
    NATS subject token); it only forgets earlier runs' sessions and retained messages,
    and each run here starts on an empty store, so it is not run.
    """
    suite_globals = sys._getframe(1).f_globals  # the suite module, run as __main__
    suite_globals["cleanup"] = lambda: None
    tests = unittest.TestLoader().loadTestsFromTestCase(suite_globals["Test"])
    outcomes = {_name(test): "not run" for test in tests}  # a suite forgets what it ran
    result = _Outcomes()
    tests.run(result)
    outcomes.update({_name(test): "pass" for test in result.passed})
    for outcome, failed in (("fail", result.failures), ("error", result.errors)):
        for test, trace in failed:
            outcomes[_name(test)] = outcome
            print(f"----- {test}\n{trace}", flush=True)
    print(_MARK + json.dumps(outcomes), flush=True)


def _child(suite_dir: str, host: str, port: str) -> None:
    os.chdir(suite_dir)
    sys.path[0] = suite_dir  # not this folder, whose `http.py` would hide the stdlib's
    sys.argv = [SCRIPT, f"--hostname={host}", f"--port={port}"]
    unittest.main = _report  # type: ignore[assignment,misc]
    runpy.run_path(SCRIPT, run_name="__main__")


def run_suite(suite_dir: Path, host: str, port: int, log: Path, timeout: float) -> dict[str, str]:
    """Each test's outcome (`pass`, `fail`, `error`); the suite's output goes to `log`."""
    with log.open("w") as out:
        subprocess.run(
            [sys.executable, __file__, str(suite_dir), host, str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    for line in reversed(log.read_text().splitlines()):
        if line.startswith(_MARK):
            return dict(json.loads(line[len(_MARK) :]))
    raise AssertionError(f"the Paho suite reported no results; see {log}")


if __name__ == "__main__":
    _child(*sys.argv[1:4])
