"""Config reload (SIGHUP) and `--signal`: the pure plan of a change (`plan`), the step
that applies it to a running server (`apply`), and the command that signals one."""

from ingest.server.reload.apply import reload_config, reload_refusal
from ingest.server.reload.command import SignalError, send_signal
from ingest.server.reload.plan import Plan, ReloadRefused, plan

__all__ = [
    "Plan",
    "ReloadRefused",
    "SignalError",
    "plan",
    "reload_config",
    "reload_refusal",
    "send_signal",
]
