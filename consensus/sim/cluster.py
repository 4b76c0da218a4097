"""A Raft cluster in one process, driven tick by tick by one seeded random source.

Each tick the world does some of: deliver due messages, tick every live node,
crash or power off a node (possibly in the middle of a Ready), restart one,
partition or heal the network, flip a bit on a disk, propose client values,
start linearizable reads, change membership, transfer leadership. The checker
looks at everything after every tick. The same seed gives the same run.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from consensus.sim.app import make_value
from consensus.sim.disk import SimDisk
from consensus.sim.invariants import Checker
from consensus.sim.network import NetworkConfig, SimNetwork
from consensus.sim.node import READY_ORDER, PendingRead, SimNode, drift
from consensus.types import ConfChange, ConfOp, NodeId, RaftError

# Two randomized election timeouts at the slowest clock drift, and some slack.
CHECK_QUORUM_TICKS = 60


@dataclass(frozen=True, slots=True)
class Faults:
    """Per-tick probabilities of each event."""

    crash: float = 0.004  # kill -9 of a live node (sometimes mid-Ready)
    power_loss: float = 0.002  # of a live node; its unsynced writes may vanish
    # Power losses only while the nodes still held by earlier ones stay a minority:
    # the promise under a window, where such a run must lose nothing acknowledged.
    minority_power_loss: bool = False
    torn: float = 0.5  # a power loss tears the last surviving write
    all_power_loss: float = 0.0  # every node at once
    flip: float = 0.001  # a bit flips in a stored entry of some node
    restart: float = 0.05  # a down node comes back
    partition: float = 0.004
    one_way: float = 0.002
    heal: float = 0.02
    leader_crash: float = 0.0  # kill -9 of the leader: leader churn exposes commit rules
    leader_power_loss: float = 0.0  # the leader's unsynced acknowledged tail goes with it
    isolate_leader: float = 0.0  # partition the leader from everyone
    max_down: int | None = None  # default: a minority, so the run keeps making progress


@dataclass(frozen=True, slots=True)
class Workload:
    propose: float = 0.3
    read: float = 0.05
    transfer: float = 0.003
    membership: float = 0.0  # chance per tick of taking the next membership step
    snapshot_every: int = 0  # entries applied between app snapshots; 0: never


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    nodes: int = 3
    sync_window: int = 0  # 0: fsync every Ready; W: background sync every W ticks
    ticks: int = 500
    net: NetworkConfig = field(default_factory=NetworkConfig)
    faults: Faults = field(default_factory=Faults)
    work: Workload = field(default_factory=Workload)
    # Small APPEND batches and windows make followers lag and pipelines reorder.
    max_append_entries: int = 256
    max_inflight: int = 64


class Cluster:
    def __init__(self, scenario: Scenario, seed: int) -> None:
        self.scenario = scenario
        self.rng = random.Random(seed)
        self.net = SimNetwork(random.Random(self.rng.getrandbits(64)), scenario.net)
        self.checker = Checker()
        self.now = 0
        self.bootstrap = tuple(f"n{i}" for i in range(scenario.nodes))
        self.nodes: dict[NodeId, SimNode] = {}
        self.spare: NodeId | None = None  # a server outside the group, for membership steps
        self.leaving: NodeId | None = None  # a voter being removed
        # (leader, term) -> since when it has been cut off from a quorum
        self._cut_off: dict[tuple[NodeId, int], int] = {}
        self._names = scenario.nodes  # the last server name handed out is n<_names>
        self._clients = 0
        for name in self.bootstrap:
            self._make_node(name).start(self.bootstrap)
        if scenario.work.membership:
            self.spare = f"n{scenario.nodes}"
            self._make_node(self.spare)
        self.calm = False  # no faults and no client load: the liveness phase
        self.events: Counter[str] = Counter()  # what happened, so tests can see faults did

    # -- the world's clock -------------------------------------------------------

    def step(self) -> None:
        """One tick of the world, then every invariant."""
        self.now += 1
        self.checker.now = self.now
        for msg in self.net.due(self.now):
            node = self.nodes.get(msg.dst)
            if node is not None and node.core is not None:
                node.deliver(msg)
        for node in self._live():
            node.tick()
            node.handle_ready()
        if not self.calm:
            self._faults()
            self._workload()
        w = self.scenario.sync_window
        if w and self.now % w == 0:
            for node in self.nodes.values():
                node.disk.sync()
        self.check()

    def check(self) -> None:
        for node in self._live():
            assert node.core is not None
            if node.core.last_index != node.disk.last_index:
                self.checker.fail(
                    f"{node.id}: core's log ends at {node.core.last_index}, "
                    f"but it asked to persist up to {node.disk.last_index}"
                )
            if node.leader:
                self.checker.on_leader(node.id, node.core.term, node.disk)
                self._check_quorum(node)

    def _check_quorum(self, leader: SimNode) -> None:
        """A leader cut off from a quorum of voters must step down (check-quorum)."""
        assert leader.core is not None
        voters = leader.core.conf.voters
        heard = sum(
            1
            for v in voters
            if v == leader.id
            or (v in self.nodes and self.nodes[v].up and self.net.linked(leader.id, v))
        )
        key = (leader.id, leader.core.term)
        if heard > len(voters) // 2:
            self._cut_off.pop(key, None)
            return
        since = self._cut_off.setdefault(key, self.now)
        if self.now - since > CHECK_QUORUM_TICKS:
            self.checker.fail(
                f"check-quorum: {leader.id} still leads term {leader.core.term}, "
                f"cut off from a quorum since tick {since}"
            )

    def _live(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.core is not None]

    def _make_node(self, name: NodeId) -> SimNode:
        disk = SimDisk(name, self.scenario.sync_window)
        node = SimNode(
            name,
            disk,
            drift(self.rng),
            self.rng.getrandbits(32),
            self.net,
            self.checker,
            self.scenario.work.snapshot_every,
            (self.scenario.max_append_entries, self.scenario.max_inflight),
        )
        self.nodes[name] = node
        return node

    def members(self) -> list[SimNode]:
        return [n for name, n in self.nodes.items() if name != self.spare]

    # -- faults ------------------------------------------------------------------

    def _faults(self) -> None:
        f = self.scenario.faults
        rng = self.rng
        members = self.members()
        down = [n for n in members if not n.up]
        max_down = f.max_down if f.max_down is not None else (len(members) - 1) // 2
        live = [n for n in members if n.up]
        if live and len(down) < max_down:
            if rng.random() < f.crash:
                self.kill(rng.choice(live), mid_ready=rng.random() < 0.5)
            elif rng.random() < f.power_loss:
                node = rng.choice(live)
                if not f.minority_power_loss or self._floor_budget(node):
                    self.power_off(node)
        leader = self.leader()
        if leader and len(down) < max_down and rng.random() < f.leader_crash:
            self.kill(leader, mid_ready=rng.random() < 0.5)
        elif (
            leader
            and len(down) < max_down
            and rng.random() < f.leader_power_loss
            and (not f.minority_power_loss or self._floor_budget(leader))
        ):
            self.power_off(leader)
        if leader and rng.random() < f.isolate_leader:
            self.net.partition({leader.id}, {n.id for n in members})
            self.events["leader isolated"] += 1
        if rng.random() < f.all_power_loss:
            for node in members:
                self.power_off(node, torn=False, count=False)
            self._count_power_losses()
        if down and rng.random() < f.restart:
            self.restart(rng.choice(down))
        if rng.random() < f.flip:
            self._flip(members)
        names = {n.id for n in members}
        if rng.random() < f.partition:
            side = set(rng.sample(sorted(names), rng.randint(1, len(names) // 2)))
            self.net.partition(side, names)
            self.events["partition"] += 1
        if rng.random() < f.one_way:
            a, b = rng.sample(sorted(names), 2)
            self.net.cut(a, b)
            self.events["one-way cut"] += 1
        if self.net.partitioned and rng.random() < f.heal:
            self.net.heal()

    def kill(self, node: SimNode, mid_ready: bool = False) -> None:
        """kill -9, now or (`mid_ready`) part way through the node's next Ready."""
        self.events["kill -9 mid-Ready" if mid_ready else "kill -9"] += 1
        if mid_ready:
            node.crash_after = self.rng.randint(1, len(READY_ORDER) - 1)
        else:
            node.stop()

    def power_off(self, node: SimNode, torn: bool | None = None, count: bool = True) -> None:
        """Cut its power: the process dies and the disk keeps what it keeps. `count`
        False: more nodes go down in the same instant; the caller counts them after."""
        node.stop()
        if torn is None:
            torn = self.rng.random() < self.scenario.faults.torn and self._floor_budget(node)
        self.events["power loss, torn" if torn else "power loss"] += 1
        node.damaged = node.damaged or torn
        node.disk.power_loss(self.rng, torn)
        if count:
            self._count_power_losses()

    def _count_power_losses(self) -> None:
        """A power loss that leaves a majority held back: count it, and excuse what they
        lost (`Checker.lost_by_majority`)."""
        if self._excuse_majority():
            self.events["majority held back at once"] += 1

    def _excuse_majority(self) -> bool:
        """If the held-back nodes are a majority, what they lost may be lost."""
        held = self._held_back()
        if len(held) <= len(self.members()) // 2:
            return False
        for n in held:
            self.checker.lost_by_majority.update(n.disk.lost)
        return True

    def restart(self, node: SimNode) -> None:
        node.start(self.bootstrap)
        self._excuse_majority()  # recovery found what damage took
        if node.floor:
            self.events["restart below a vote floor"] += 1
        if node.disk.power_held:
            self.events["restart held after a power loss"] += 1

    def _flip(self, members: list[SimNode]) -> None:
        """Damage one node's disk, if that cannot leave a majority unable to vote."""
        node = self.rng.choice(members)
        if self._floor_budget(node):
            index = node.disk.flip(self.rng)
            self.events["bit flip" if index else "bit flip in hard state"] += 1
            node.damaged = node.damaged or index is not None

    def _floor_budget(self, node: SimNode) -> bool:
        """Held nodes (a vote floor, a damaged disk, a power loss) give no ordinary vote:
        with `node` among them they must stay a minority, the faults the promise covers
        together (else nothing is elected but by the held path, which may lose)."""
        held = {n.id for n in self._held_back()} | {node.id}
        return len(held) <= (len(self.members()) - 1) // 2

    def _held_back(self) -> list[SimNode]:
        """Members that may have lost entries they acknowledged and are not whole again."""
        return [n for n in self.members() if n.floor or n.damaged or n.disk.power_held]

    # -- clients -----------------------------------------------------------------

    def _workload(self) -> None:
        w = self.scenario.work
        rng = self.rng
        # Each action may kill its node (a pending mid-Ready crash): look again each time.
        for chance, act in [
            (w.propose, self.propose),
            (w.transfer, self._transfer),
            (w.membership, self._membership),
        ]:
            leaders = [n for n in self._live() if n.leader]
            if leaders and rng.random() < chance:
                act(rng.choice(leaders))
        live = self._live()
        if live and rng.random() < w.read:
            self.read(rng.choice(live))

    def propose(self, node: SimNode) -> bytes | None:
        assert node.core is not None
        self._clients += 1
        value = make_value(self._clients % 7, self._clients)
        node.catch_up()
        try:
            node.core.propose([value])
        except RaftError:
            return None
        node.proposed.add(value)
        node.handle_ready()
        return value

    def read(self, node: SimNode) -> None:
        assert node.core is not None
        self._clients += 1
        ctx = f"r{self._clients}".encode()
        node.catch_up()
        try:
            node.core.read_index(ctx)
        except RaftError:
            return
        node.reads[ctx] = PendingRead(set(self.checker.acked))
        node.handle_ready()

    def _transfer(self, leader: SimNode) -> None:
        assert leader.core is not None
        voters = sorted(leader.core.conf.voters - {leader.id})
        target = self.rng.choice([*voters, None]) if voters else None
        leader.catch_up()
        try:
            leader.core.transfer_leadership(target)
        except RaftError:
            return
        self.events["transfer"] += 1
        leader.handle_ready()

    def _membership(self, leader: SimNode) -> None:
        """Walk the group through add learner -> promote -> remove someone, over and over.

        A removed server is shut down for good once its removal committed; the
        next one added is a new server with an empty disk.
        """
        assert leader.core is not None
        conf = leader.core.conf
        if self.leaving is not None:
            if self.leaving not in conf.voters | conf.learners:
                self._retire(self.leaving)
                return
            change = ConfChange(ConfOp.REMOVE, self.leaving)
        elif self.spare is not None:
            spare = self.nodes[self.spare]
            if self.spare not in conf.voters | conf.learners:
                if not spare.up:
                    spare.start(self.bootstrap)
                change = ConfChange(ConfOp.ADD_LEARNER, self.spare)
            elif self.spare in conf.learners:
                change = ConfChange(ConfOp.PROMOTE, self.spare)
            else:
                self.leaving = self.rng.choice(sorted(conf.voters - {self.spare}))
                self.spare = None
                change = ConfChange(ConfOp.REMOVE, self.leaving)
        else:
            return
        leader.catch_up()
        try:
            leader.core.propose_conf_change(change)
        except RaftError:
            return
        self.events[change.op.name] += 1
        leader.handle_ready()

    def _retire(self, name: NodeId) -> None:
        """Shut the removed server down for good; a new one (new name, empty disk) is next.

        Never a wiped disk under an old name: a stale member still counting that
        name as a voter would take its blank vote for one it never gave.
        """
        self.nodes[name].stop()
        del self.nodes[name]
        self._names += 1
        self.spare = f"n{self._names}"
        self._make_node(self.spare)
        self.leaving = None

    # -- scripting (scenario tests) ---------------------------------------------

    def leader(self) -> SimNode | None:
        """The live node that is leader in the highest term, if any."""
        leaders = [n for n in self._live() if n.leader]
        return max(leaders, key=lambda n: n.core.term if n.core else 0, default=None)

    def run_until(self, done: Callable[[], bool], bound: int, what: str) -> None:
        start = self.now
        while not done():
            self._within(start, bound, what)
            self.step()

    # -- liveness ----------------------------------------------------------------

    def settle(self, bound: int) -> int:
        """Heal everything, then a leader must commit a proposal and all members catch up.

        Returns the ticks it took; fails if more than `bound`.
        """
        start = self.now
        self.calm = True
        self.net.heal()
        for node in self.nodes.values():
            node.crash_after = None
        for node in self.members():
            if not node.up:
                self.restart(node)
        value: bytes | None = None
        proposed_at = 0
        while value is None or value not in self.checker.acked:
            self._within(start, bound, f"no proposal committed (value {value!r})")
            self.step()
            leader = self.leader()
            if leader and (value is None or self.now - proposed_at > 40):
                value, proposed_at = self.propose(leader), self.now
        self.run_until(self._caught_up, bound - (self.now - start), "members to catch up")
        return self.now - start

    def _within(self, start: int, bound: int, what: str) -> None:
        if self.now - start >= bound:
            roles = {
                n.id: (n.core.role.name, n.core.term, n.core.commit) if n.core else None
                for n in self.nodes.values()
            }
            self.checker.fail(f"liveness: {what} within {bound} ticks after healing; {roles}")

    def _caught_up(self) -> bool:
        """One leader, and it and every member applied all that anyone ever applied."""
        leader = self.leader()
        if leader is None or leader.core is None:
            return False
        target = max(leader.core.commit, max(self.checker.applied, default=0))
        conf = leader.core.conf
        names = conf.voters | conf.learners | {leader.id}
        return all(name in self.nodes and self.nodes[name].sm.index >= target for name in names)
