"""Pull consumer priority groups (nats-server 2.11+, ADR-42): the pure rules.

A pull consumer with `priority_groups` and a `priority_policy` decides which
waiting request a message goes to by more than arrival order:

- `overflow`: a request carrying `min_pending` / `min_ack_pending` is served only
  while the consumer is that far behind (a standby fleet takes over under load);
- `pinned_client`: one client at a time holds the group's pin id (`Nats-Pin-Id`
  on every delivery); others wait until the pinned client stays silent for
  `priority_timeout` or an admin `CONSUMER.UNPIN`s it, then the next waiting
  request is pinned;
- `prioritized`: requests are served lowest `priority` (0-9) first.

The refusals and status lines are the reference's word for word, because clients
(orbit, nats.go's `pcgroups`) switch on them. Like the reference, only the
consumer's first group carries a pin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from log import errors
from log.consumers.wire import Advisory, group_pinned, group_unpinned, random_token
from log.errors import ApiError
from log.timefmt import ZERO_TIME, rfc3339

if TYPE_CHECKING:
    from log.consumers.config import ConsumerConfig

POLICIES = ("none", "overflow", "pinned_client", "prioritized")
DEFAULT_PINNED_TTL = 120_000_000_000  # ns, the reference's JsDefaultPinnedTTL
PIN_ID = "Nats-Pin-Id"
UNRANKED = 2**31 - 1  # a request without a priority group goes after every ranked one
_GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")


@dataclass(slots=True)
class PriorityRequest:
    """The priority fields of a JSON pull request (present whenever the body was JSON)."""

    group: str = ""
    min_pending: int = 0
    min_ack_pending: int = 0
    id: str = ""
    priority: int = 0


class Verdict(Enum):
    SERVE = 1
    SKIP = 2  # not this request for now: it goes to the back of the queue
    WRONG_PIN = 3  # it holds a pin id that is no longer current: answer 423 and drop it


def parse_request(doc: dict[str, Any]) -> PriorityRequest:
    """The group fields of a pull request body; a wrongly typed field raises ValueError."""
    return PriorityRequest(
        group=_text(doc, "group"),
        min_pending=_whole(doc, "min_pending"),
        min_ack_pending=_whole(doc, "min_ack_pending"),
        id=_text(doc, "id"),
        priority=_whole(doc, "priority"),
    )


def _text(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"json: cannot unmarshal into Go struct field PriorityGroup.{key}")
    return value


def _whole(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"json: cannot unmarshal into Go struct field PriorityGroup.{key}")
    return value


def valid_group_name(name: str) -> bool:
    return _GROUP_NAME.fullmatch(name) is not None


def invalid_group_name() -> ApiError:
    return ApiError(
        400,
        10162,
        "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ "
        "and may not exceed 16 characters",
    )


def unknown_group() -> ApiError:
    return ApiError(400, 10160, "Provided priority group does not exist for this consumer")


def parse_policy(raw: Any) -> str:
    """`priority_policy` of a config request; the reference's JSON decoder names the value."""
    if raw is None:
        return "none"
    if raw not in POLICIES:
        raise errors.invalid_json(f"unknown priority policy: {_go_quote(raw)}")
    return str(raw)


def _go_quote(raw: Any) -> str:
    return f'"{raw}"' if isinstance(raw, str) else str(raw)


def default_ttl(policy: str, ttl: int) -> int:
    """`setConsumerConfigDefaults`: negative is none; a pinned consumer gets two minutes."""
    ttl = max(ttl, 0)
    return DEFAULT_PINNED_TTL if policy == "pinned_client" and ttl == 0 else ttl


def check_config(groups: tuple[str, ...], policy: str, ttl: int, *, push: bool) -> None:
    """The refusals of `checkConsumerCfg`, in its order."""
    if policy != "none":
        if push:
            raise ApiError(400, 10178, "priority groups can not be used with push consumers")
        if not groups:
            raise ApiError(
                400, 10159, "Setting PriorityPolicy requires at least one PriorityGroup to be set"
            )
        for group in groups:
            if not group:
                raise ApiError(400, 10161, "Group name cannot be an empty string")
            if not valid_group_name(group):
                raise invalid_group_name()
    elif groups:
        raise ApiError(400, 10196, "consumer can not have priority groups when policy is none")
    elif ttl > 0:
        raise ApiError(400, 10197, "PinnedTTL cannot be set when PriorityPolicy is none")


class Priority:
    """One consumer's priority policy and its pin (the reference keeps one, for group one)."""

    def __init__(self, stream: str, consumer: str, cfg: ConsumerConfig) -> None:
        self.stream, self.consumer = stream, consumer
        self.adopt(cfg)
        self.advisories: list[Advisory] = []  # PINNED / UNPINNED, for the owner to publish
        self.pin = ""
        self.pinned_ts = 0  # ns since the epoch, while pinned
        self.pin_expires = 0  # ns; 0 = no pin timer

    def adopt(self, cfg: ConsumerConfig) -> None:
        self.policy = cfg.priority_policy
        self.groups = cfg.priority_groups
        self.ttl = cfg.priority_timeout
        self.pinning = self.policy == "pinned_client"
        self.ranked = self.policy == "prioritized"
        self.gated = self.pinning or self.policy == "overflow"

    def refusal(self, pg: PriorityRequest | None, now: int) -> tuple[int, str] | None:
        """Why a pull request is refused before it queues (`processNextMsgRequest`).

        A request of the pinned client restarts the pin's timer, as the reference does
        even when the request then goes unqueued.
        """
        if pg is None:
            return None
        if (pg.min_pending or pg.min_ack_pending) and self.policy != "overflow":
            return 400, "Bad Request - Not a Overflow Priority consumer"
        if pg.id and not self.pinning:
            return 400, "Bad Request - Not a Pinned Client Priority consumer"
        if not 0 <= pg.priority <= 9:
            return 400, "Bad Request - Priority must be between 0 and 9"
        if self.policy == "none":
            return None
        if not pg.group:
            return 400, "Bad Request - Priority Group missing"
        if pg.group not in self.groups:
            return 400, "Bad Request - Invalid Priority Group"
        if self.pin:
            if pg.id == self.pin:
                self.pin_expires = now + self.ttl
            elif pg.id:
                return 423, "Nats-Pin-Id mismatch"
        return None

    def verdict(self, pg: PriorityRequest | None, pending: int, ack_pending: int) -> Verdict:
        """Whether the head request may take the next message (`nextWaiting`).

        `pending` counts the matching messages not yet delivered, this one included.
        """
        if self.pinning:
            pinned = pg.id if pg is not None else ""
            if not self.pin:
                return Verdict.WRONG_PIN if pinned else Verdict.SERVE
            if pinned == self.pin:
                return Verdict.SERVE
            return Verdict.WRONG_PIN if pinned else Verdict.SKIP
        if pg is None or not (pg.min_pending > 0 or pg.min_ack_pending > 0):
            return Verdict.SERVE
        if 0 < pg.min_pending <= pending or 0 < pg.min_ack_pending <= ack_pending:
            return Verdict.SERVE
        return Verdict.SKIP

    def served(self, pg: PriorityRequest | None, now: int) -> None:
        """The head request takes a message: with nobody pinned, its client is pinned now."""
        if not self.pinning or self.pin or pg is None or not pg.group:
            return
        self.pin = random_token(22)
        self.pinned_ts = now
        self.pin_expires = now + self.ttl
        pg.id = self.pin
        self.advisories.append(group_pinned(self.stream, self.consumer, pg.group, self.pin, now))

    def unpin(self, group: str, reason: str, now: int) -> None:
        """Release the pin (CONSUMER.UNPIN says "admin"), advised even with nobody pinned."""
        self.pin, self.pinned_ts, self.pin_expires = "", 0, 0
        self.advisories.append(group_unpinned(self.stream, self.consumer, group, reason, now))

    def expire(self, now: int) -> None:
        """The pinned client stayed silent for the whole TTL: release its pin."""
        if self.pin and self.pin_expires and now >= self.pin_expires:
            self.unpin(self.groups[0], "timeout", now)

    def deadline(self) -> int | None:
        return self.pin_expires if self.pin and self.pin_expires else None

    def states(self) -> list[dict[str, str]]:
        """`priority_groups` of CONSUMER.INFO: the first group, its pin if any."""
        if not self.groups:
            return []
        state = {"group": self.groups[0]}
        if self.pin:
            state["pinned_client_id"] = self.pin
        state["pinned_ts"] = rfc3339(self.pinned_ts) if self.pin else ZERO_TIME
        return [state]


def with_pin(hdr: bytes | None, pin: str) -> bytes:
    """A delivery's headers with `Nats-Pin-Id` appended (empty when nobody is pinned)."""
    head = hdr[:-2] if hdr and len(hdr) > 2 else b"NATS/1.0\r\n"
    return head + f"{PIN_ID}: {pin}\r\n\r\n".encode()
