"""Log lines in nats-server's format, so tools that tail its logs read ours.

The reference writes `[pid] YYYY/MM/DD HH:MM:SS.micro [INF] message` and treats
debug (-D) and trace (-V) as two independent switches, not as a ladder of
levels: `-V` alone shows [TRC] lines but no [DBG] lines. A filter reproduces
that on top of stdlib `logging`.
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import UTC, datetime

from ingest.server.options import Options

__all__ = ["LOGGER_NAME", "TRACE", "NatsFormatter", "setup_logging"]

LOGGER_NAME = "jetlake"
TRACE = 5  # below DEBUG: raw protocol traces
logging.addLevelName(TRACE, "TRACE")

_LABELS = {
    TRACE: "TRC",
    logging.DEBUG: "DBG",
    logging.INFO: "INF",
    logging.WARNING: "WRN",
    logging.ERROR: "ERR",
    logging.CRITICAL: "FTL",
}


class NatsFormatter(logging.Formatter):
    """`[pid] date time.micro [LVL] message`, local time unless told UTC."""

    def __init__(self, *, timestamps: bool = True, utc: bool = False) -> None:
        super().__init__()
        self.timestamps = timestamps
        self.utc = utc

    def format(self, record: logging.LogRecord) -> str:
        label = _LABELS.get(record.levelno) or _LABELS[_nearest(record.levelno)]
        message = record.getMessage()
        if record.exc_info:
            message = f"{message}\n{self.formatException(record.exc_info)}"
        if not self.timestamps:
            return f"[{record.process}] [{label}] {message}"
        when = datetime.fromtimestamp(record.created, UTC if self.utc else None)
        return f"[{record.process}] {when:%Y/%m/%d %H:%M:%S.%f} [{label}] {message}"


def _nearest(levelno: int) -> int:
    """Custom levels print as the closest standard level below them."""
    return max((level for level in _LABELS if level <= levelno), default=TRACE)


class _SwitchFilter(logging.Filter):
    """Let [DBG] and [TRC] through only when their own switch is on."""

    def __init__(self, *, debug: bool, trace: bool) -> None:
        super().__init__()
        self.debug = debug
        self.trace = trace

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.DEBUG:
            return self.trace
        if record.levelno < logging.INFO:
            return self.debug
        return True


def setup_logging(opts: Options) -> logging.Logger:
    """Configure the `jetlake` logger from options; safe to call again on reload."""
    logger = logging.getLogger(LOGGER_NAME)
    for old in list(logger.handlers):
        logger.removeHandler(old)
        old.close()
    handler: logging.Handler
    if opts.logfile:
        handler = logging.FileHandler(os.fspath(opts.logfile), encoding="utf-8")
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NatsFormatter(timestamps=opts.logtime, utc=opts.logtime_utc))
    handler.addFilter(_SwitchFilter(debug=opts.debug, trace=opts.trace))
    logger.addHandler(handler)
    logger.setLevel(TRACE if opts.trace else logging.DEBUG if opts.debug else logging.INFO)
    logger.propagate = False
    return logger
