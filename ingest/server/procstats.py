"""Process figures for /varz without psutil: resident memory and CPU percent."""

from __future__ import annotations

import os
import time


def rss() -> int:
    """Resident set size from /proc (0 where there is none); psutil is not a dependency."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class CpuMeter:
    """CPU percent over the last interval, refreshed at most once a second like the reference."""

    def __init__(self, since: float) -> None:
        self._wall, self._cpu, self._value = since, 0.0, 0.0

    def sample(self) -> float:
        now = time.time()
        if now - self._wall >= 1.0:
            t = os.times()
            cpu = t.user + t.system
            self._value = round(100.0 * (cpu - self._cpu) / (now - self._wall), 2)
            self._wall, self._cpu = now, cpu
        return self._value
