"""The cluster blocks of stream info, `/jsz` (`meta_cluster`) and `/raftz`, as the reference
shapes them, from a Raft node's status and when each peer was last heard from."""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Mapping
from typing import Any

from consensus.driver import RaftNode
from consensus.types import Role
from ingest.server.jetstream.cluster.groups import META_GROUP
from log.timefmt import rfc3339

OFFLINE_NS = 4_000_000_000  # two election timeouts without a word: the member is down


def peer_id(name: str) -> str:
    """The reference's short peer id: a hash of the server name, eight characters."""
    return base64.b32encode(hashlib.sha256(name.encode()).digest()).decode()[:8]


def replicas(
    node: RaftNode, group: str, heard: Mapping[tuple[str, str], int]
) -> list[dict[str, Any]]:
    """Every member but this one: `current` when it holds all that is committed (as far
    as the leader knows; a follower cannot tell), `active` ns since last heard from."""
    status = node.status()
    progress: dict[str, Any] = status.get("peers") or {}  # type: ignore[assignment]
    commit = int(status["commit"])  # type: ignore[call-overload]
    now = time.monotonic_ns()
    out: list[dict[str, Any]] = []
    for name in sorted(set(status["voters"]) - {node.id}):  # type: ignore[call-overload]
        last = heard.get((group, name))
        entry: dict[str, Any] = {"name": name}
        if node.role is Role.LEADER:
            match = int(progress.get(name, {}).get("match", 0))
            entry["current"] = match >= commit
            entry["active"] = now - last if last is not None else 0
            if match < commit:
                entry["lag"] = commit - match
        else:
            entry["current"] = last is not None and name == node.leader
            entry["active"] = now - last if last is not None else 0
        if node.role is Role.LEADER and (last is None or now - last > OFFLINE_NS):
            entry["offline"] = True  # only a leader hears from every member
        entry["peer"] = peer_id(name)
        out.append(entry)
    return out


def group_block(
    node: RaftNode,
    *,
    cluster: str,
    group: str,
    leader_since: int,
    heard: Mapping[tuple[str, str], int],
    traffic: str,
) -> dict[str, Any]:
    """`cluster` of STREAM.INFO / CONSUMER.INFO; `traffic` the account whose routes carry
    the group's Raft messages (the system account's name)."""
    block: dict[str, Any] = {"name": cluster, "raft_group": group}
    if node.leader is not None:
        block["leader"] = node.leader
    if node.role is Role.LEADER and leader_since:
        block["leader_since"] = rfc3339(leader_since)
    block["system_account"] = True
    block["traffic_account"] = traffic
    block["replicas"] = replicas(node, group, heard)
    return block


def meta_block(
    node: RaftNode, *, cluster: str, heard: Mapping[tuple[str, str], int]
) -> dict[str, Any]:
    """`/jsz` `meta_cluster`."""
    status = node.status()
    size = len(status["voters"])  # type: ignore[arg-type]
    block: dict[str, Any] = {"name": cluster}
    if node.leader is not None:
        block["leader"] = node.leader
    block["peer"] = peer_id(node.id)
    block["replicas"] = replicas(node, META_GROUP, heard)
    block["cluster_size"] = size
    block["quorum_needed"] = size // 2 + 1
    block["pending"] = int(status.get("pending", 0))  # type: ignore[call-overload]
    return block


def raftz_entry(node: RaftNode, *, leader_since: int, traffic: str) -> dict[str, Any]:
    """One group of `/raftz`; `traffic` as in `group_block`."""
    status = node.status()
    entry: dict[str, Any] = {
        "id": peer_id(node.id),
        "state": node.role.name,
        "size": len(status["voters"]),  # type: ignore[arg-type]
        "quorum_needed": len(status["voters"]) // 2 + 1,  # type: ignore[arg-type]
        "committed": status["commit"],
        "applied": status["applied"],
    }
    if node.leader is not None:
        entry["leader"] = peer_id(node.leader)
    if leader_since and node.role is Role.LEADER:
        entry["leader_since"] = rfc3339(leader_since)
    entry["term"] = node.term
    vote = status.get("vote")
    if vote:
        entry["voted_for"] = peer_id(str(vote))
    entry["system_account"] = True
    entry["traffic_account"] = traffic
    entry["peers"] = {
        peer_id(name): {"name": name, "known": True}
        for name in sorted(set(status["voters"]) - {node.id})  # type: ignore[call-overload]
    }
    return entry
