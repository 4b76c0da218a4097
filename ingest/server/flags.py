"""nats-server's command line, parsed by the rules of Go's `flag` package.

Scripts written for the reference pass `-p 4222`, `--port=4222` or `-DV`
interchangeably; this module accepts exactly what the reference accepts and
refuses the rest with its wording.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ingest.parser.conf import ConfigError
from ingest.server.settings import parse_duration


class FlagError(Exception):
    """A command line the reference answers with this message, its usage text and
    exit status 0 (its usage printer exits successfully, even after a bad flag)."""


@dataclass(slots=True)
class Flags:
    values: dict[str, Any] = field(default_factory=dict)  # explicit settings, in order
    config_file: str | None = None
    check_config: bool = False
    show_help: bool = False
    show_version: bool = False
    signal: str | None = None  # `--signal reload=<pid>`: send it, start nothing


# flag name -> (setting, kind); several spellings share a setting as in the reference.
_FLAG_SPECS: dict[str, tuple[str, type]] = {
    **dict.fromkeys(("p", "port"), ("port", int)),
    **dict.fromkeys(("a", "addr", "net"), ("host", str)),
    **dict.fromkeys(("n", "name", "server_name"), ("server_name", str)),
    **dict.fromkeys(("m", "http_port"), ("http_port", int)),
    **dict.fromkeys(("c", "config"), ("config", str)),
    **dict.fromkeys(("D", "debug"), ("debug", bool)),
    **dict.fromkeys(("V", "trace"), ("trace", bool)),
    **dict.fromkeys(("l", "log"), ("log", str)),
    **dict.fromkeys(("P", "pid"), ("pid_file", str)),
    **dict.fromkeys(("js", "jetstream"), ("jetstream", bool)),
    **dict.fromkeys(("sd", "store_dir"), ("store_dir", str)),
    **dict.fromkeys(("h", "help"), ("help", bool)),
    **dict.fromkeys(("v", "version"), ("version", bool)),
    **dict.fromkeys(("sl", "signal"), ("signal", str)),
    "lake": ("lake", bool),
    "lake_dir": ("lake_dir", str),
    "spark_master": ("spark_master", str),
    "busy_poll": ("busy_poll", float),
    "t": ("check", bool),
    "DV": ("DV", bool),
    "user": ("user", str),
    "pass": ("pass", str),
    "auth": ("auth", str),
    "tls": ("tls", bool),
    "tlsverify": ("tlsverify", bool),
    "tlscert": ("tlscert", str),
    "tlskey": ("tlskey", str),
    "tlscacert": ("tlscacert", str),
    **dict.fromkeys(("cluster", "cluster_listen"), ("cluster", str)),
    "routes": ("routes", str),
    "cluster_name": ("cluster_name", str),
    "no_advertise": ("no_advertise", bool),
    "connect_retries": ("connect_retries", int),
}
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def _go_int(text: str, flag: str) -> int:
    """Go's base-0 integer syntax: 42, -1, 0x2a, 0o52, 052, 0b101010."""
    try:
        number = int(text, 8) if re.fullmatch(r"[-+]?0[0-7]+", text) else int(text, 0)
    except ValueError:
        raise FlagError(f'invalid value "{text}" for flag -{flag}: parse error') from None
    if not -(2**63) <= number < 2**63:
        raise FlagError(f'invalid value "{text}" for flag -{flag}: value out of range')
    return number


def _go_duration(text: str, flag: str) -> float:
    try:
        return parse_duration(text)
    except ValueError:
        raise FlagError(f'invalid value "{text}" for flag -{flag}: parse error') from None


def parse_flags(argv: list[str]) -> Flags:
    """Go `flag` package rules: `-f`, `--f`, `-f=v`, `-f v`; stop at `--` or a word."""
    parsed = Flags()
    args = list(argv)
    while args and args[0].startswith("-") and args[0] != "-":
        arg = args.pop(0)
        if arg == "--":
            break
        body = arg[2:] if arg.startswith("--") else arg[1:]
        if not body or body[0] in "-=":
            raise FlagError(f"bad flag syntax: {arg}")
        name, has_value, value = body.partition("=")
        if name not in _FLAG_SPECS:
            raise FlagError(f"flag provided but not defined: -{name}")
        setting, kind = _FLAG_SPECS[name]
        result: Any
        if kind is bool:
            if has_value and value not in _GO_TRUE | _GO_FALSE:
                raise FlagError(f'invalid boolean value "{value}" for -{name}: parse error')
            result = not has_value or value in _GO_TRUE
        else:
            if not has_value:
                if not args:
                    raise FlagError(f"flag needs an argument: -{name}")
                value = args.pop(0)
            result = _go_int(value, name) if kind is int else value
            if kind is float:  # a duration, as Go's flag.Duration reads it
                result = _go_duration(value, name)
        _record_flag(parsed, setting, result)
    if args:
        command = args[0].lower()
        if command not in ("version", "help"):
            raise ConfigError(f'unrecognized command: "{args[0]}"')
        parsed.show_version |= command == "version"
        parsed.show_help |= command == "help"
    return parsed


def _record_flag(parsed: Flags, setting: str, value: Any) -> None:
    if setting == "config":
        parsed.config_file = value
    elif setting == "check":
        parsed.check_config = value
    elif setting == "help":
        parsed.show_help = value
    elif setting == "version":
        parsed.show_version = value
    elif setting == "signal":
        parsed.signal = value
    elif setting == "DV":
        parsed.values.update(debug=value, trace=value)
    else:
        parsed.values[setting] = value
