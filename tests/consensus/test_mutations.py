"""The simulator has teeth: break one Raft rule on purpose, and some CI seed must notice.

Each mutation monkeypatches one of the core's small named safety methods (or the
order in which a node carries out a Ready) and runs the scenarios most likely
to expose it, seed after seed, until the checker raises a Violation. A mutation
the simulator could not catch would be a finding about the simulator (or about a
rule that is not load-bearing); none is left (the lease and the fsync of votes
needed checks on the messages themselves: see `Checker.on_send`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from consensus.core import RaftCore
from consensus.progress import ReplicaState
from consensus.sim import node as node_module
from consensus.sim.invariants import Violation
from consensus.sim.node import Step
from consensus.sim.runner import run
from consensus.sim.scenarios import SCENARIOS
from consensus.types import Ready


@dataclass(frozen=True)
class Mutation:
    name: str
    apply: Callable[[pytest.MonkeyPatch], None]
    scenarios: tuple[str, ...]
    seeds: int = 15  # per scenario


def _const(value: bool) -> Callable[..., bool]:
    return lambda *args, **kwargs: value


def _unsynced_votes(mp: pytest.MonkeyPatch) -> None:
    """Term and vote changes no longer ask for an fsync (Ready.must_sync stays False)."""
    ready = RaftCore.ready

    def mutated(self: RaftCore) -> Ready:
        rd = ready(self)
        rd.must_sync = False
        return rd

    mp.setattr(RaftCore, "ready", mutated)


def _minority_quorum(mp: pytest.MonkeyPatch) -> None:
    """The commit index is what the best-matched minority holds, not a majority."""

    def mutated(self: RaftCore) -> int:
        peers = self.status().get("peers", {})
        assert isinstance(peers, dict)
        matches = sorted(
            self.last_index if v == self.id else peers.get(v, {}).get("match", 0)
            for v in self.conf.voters
        )
        return matches[-max(1, (len(matches) - 1) // 2)]

    mp.setattr(RaftCore, "_quorum_index", mutated)


def _mixed_quorum(mp: pytest.MonkeyPatch) -> None:
    """A candidate wins on held and ordinary grants together: a held node's vote then
    helps elect a log without what it lost, with only a minority held."""

    def mutated(self: RaftCore, held: list[str]) -> bool:
        return self._has_quorum([*held, *self._grants(held=False)])

    mp.setattr(RaftCore, "_held_election_won", mutated)


MUTATIONS = [
    Mutation(
        "vote without the up-to-date check",
        lambda mp: mp.setattr(RaftCore, "_log_up_to_date", _const(True)),
        ("3-partitions", "5-partitions", "3-leader-churn"),
    ),
    Mutation(
        "commit entries of old terms by counting",
        lambda mp: mp.setattr(RaftCore, "_commit_term_ok", _const(True)),
        ("3-transfers-under-load", "3-leader-churn", "5-leader-churn-small-batches"),
    ),
    Mutation(
        "follower accepts entries without the log matching check",
        lambda mp: mp.setattr(RaftCore, "_append_matches", _const(True)),
        ("3-always-crashes", "5-partitions"),
    ),
    Mutation(
        "a follower's in-order path takes an APPEND that overlaps its log",
        lambda mp: mp.setattr(
            RaftCore, "_follows_log", lambda core, m: core._append_matches(m.index, m.log_term)
        ),
        ("3-partitions", "3-leader-churn"),
    ),
    Mutation(
        "the leader's in-order path counts a refusal as the follower holding the entries",
        lambda mp: mp.setattr(
            RaftCore,
            "_acked_in_order",
            lambda core, pr, m: (
                pr.state == ReplicaState.REPLICATE
                and pr.match < m.index <= core.last_index
                and pr.next > core.last_index
            ),
        ),
        ("3-partitions", "3-leader-churn"),
    ),
    Mutation(
        "follower commits past what it matched",
        lambda mp: mp.setattr(RaftCore, "_follower_commit_index", lambda self, c, m: c),
        ("3-window-crashes", "3-leader-churn", "5-always-crashes"),
    ),
    Mutation(
        "commit on a minority",
        _minority_quorum,
        ("3-leader-churn", "5-partitions", "3-partitions"),
    ),
    Mutation(
        "half the voters count as a quorum (differs only with 4 voters, mid-membership change)",
        lambda mp: mp.setattr(
            RaftCore,
            "_has_quorum",
            lambda self, ids: len(self.conf.voters.intersection(ids)) >= len(self.conf.voters) / 2,
        ),
        ("3-membership-snapshots",),
        seeds=40,
    ),
    Mutation(
        "vote changes not fsynced (must_sync dropped)",
        _unsynced_votes,
        ("3-window-crashes", "5-window-crashes"),
    ),
    Mutation(
        "acknowledge before persisting",
        lambda mp: mp.setattr(node_module, "READY_ORDER", (Step.SEND, Step.PERSIST, Step.APPLY)),
        ("3-always-crashes", "5-always-crashes"),
    ),
    Mutation(
        "vote floor ignored after damage",
        lambda mp: mp.setattr(RaftCore, "_below_vote_floor", _const(False)),
        ("3-leader-churn", "3-window-crashes", "3-always-crashes", "5-always-crashes"),
    ),
    Mutation(
        "reboot hold ignored (a node that lost unsynced entries to a power loss votes)",
        lambda mp: mp.setattr(RaftCore, "_held_since_reboot", _const(False)),
        ("3-window-minority-power-loss",),
    ),
    Mutation(
        "held grants count towards an ordinary election",
        _mixed_quorum,
        ("3-window-minority-power-loss",),
    ),
    Mutation(
        "check-quorum ignored (a cut-off leader never steps down)",
        lambda mp: mp.setattr(RaftCore, "_check_quorum_lost", _const(False)),
        ("3-partitions", "5-partitions"),
    ),
    Mutation(
        "leader lease ignored (followers grant votes while hearing a leader)",
        lambda mp: mp.setattr(RaftCore, "_in_lease", _const(False)),
        ("3-leader-churn", "3-partitions", "5-partitions"),
    ),
]


def hunt(mutation: Mutation) -> str | None:
    """The first (scenario, seed) whose run raises a Violation, or None."""
    for name in mutation.scenarios:
        for seed in range(mutation.seeds):
            try:
                run(SCENARIOS[name], seed)
            except Violation as exc:
                return f"{name} seed {seed}: {exc}"
    return None


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_mutation_is_caught(mutation: Mutation, monkeypatch: pytest.MonkeyPatch) -> None:
    mutation.apply(monkeypatch)
    found = hunt(mutation)
    print(f"{mutation.name}: {found}")
    assert found is not None, f"no seed of {mutation.scenarios} noticed: {mutation.name}"
