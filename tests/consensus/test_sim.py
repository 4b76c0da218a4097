"""Hundreds of seeded simulator runs of the real RaftCore, every invariant after every tick.

A failing seed names itself and the command that replays exactly that run:
    pytest tests/consensus/test_sim.py -k <scenario> --raft-seed <seed>
`--raft-seeds N` runs N seeds per scenario instead of the CI default; the soak
run (`pytest -m soak tests/consensus/test_sim.py`) runs thousands.
"""

from __future__ import annotations

from collections import Counter

import pytest

from consensus.sim.cluster import Scenario
from consensus.sim.invariants import Violation
from consensus.sim.runner import Outcome, run
from consensus.sim.scenarios import SCENARIOS

CI_SEEDS = 16  # per scenario: 16 scenarios, 256 runs
SOAK_SEEDS = 1000


def seeds(config: pytest.Config, default: int) -> list[int]:
    one = config.getoption("--raft-seed")
    if one is not None:
        return [one]
    return list(range(config.getoption("--raft-seeds") or default))


def run_seeds(scenario: Scenario, seeds: list[int]) -> list[Outcome]:
    outcomes = []
    for seed in seeds:
        try:
            outcomes.append(run(scenario, seed))
        except Violation as exc:
            pytest.fail(
                f"scenario {scenario.name}, seed {seed}: {exc}\nreplay: pytest "
                f"tests/consensus/test_sim.py -k '{scenario.name}' --raft-seed {seed}",
                pytrace=False,
            )
    return outcomes


def expected_events(scenario: Scenario) -> set[str]:
    """The events each fault or action the scenario enables must show over enough seeds."""
    f, w = scenario.faults, scenario.work
    wanted = {
        "kill -9": f.crash or f.leader_crash,
        "kill -9 mid-Ready": f.crash or f.leader_crash,
        "partition": f.partition,
        "one-way cut": f.one_way,
        "leader isolated": f.isolate_leader,
        "bit flip": f.flip,
        "power loss, torn": f.power_loss and f.torn,
        "restart held after a power loss": scenario.sync_window and f.power_loss,
        "transfer": w.transfer,
        "PROMOTE": w.membership,
        "REMOVE": w.membership,
    }
    return {event for event, on in wanted.items() if on}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario(name: str, request: pytest.FixtureRequest) -> None:
    scenario = SCENARIOS[name]
    outcomes = run_seeds(scenario, seeds(request.config, CI_SEEDS))
    events: Counter[str] = Counter()
    for o in outcomes:
        events.update(o.events)
    print(f"{name}: {len(outcomes)} seeds, {dict(events)}")
    # The runs did work worth checking: clients were acknowledged, reads served...
    assert sum(o.acked for o in outcomes) >= 10 * len(outcomes)
    assert sum(o.reads for o in outcomes) >= len(outcomes)
    # ...and the faults the scenario is about happened.
    if len(outcomes) >= CI_SEEDS:
        assert expected_events(scenario) <= set(events)
    # A loss the sync window allows needs a window, and a majority of power losses at once.
    assert scenario.sync_window or not events["window loss (allowed)"]
    if scenario.faults.minority_power_loss:  # the promise's case: nothing may be excused
        assert not events["window loss (allowed)"] and not events["majority held back at once"]


@pytest.mark.soak
@pytest.mark.timeout(0)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_soak(name: str, request: pytest.FixtureRequest) -> None:
    run_seeds(SCENARIOS[name], seeds(request.config, SOAK_SEEDS))
