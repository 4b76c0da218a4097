"""Network namespaces for tests that need real partitions between servers.

Loopback cannot partition: every server shares one stack, and a refused
connection is not a lost packet. Here each server gets its own namespace with
one veth leg on a bridge in the root namespace; the bridge itself holds the
subnet's first address, so clients in the test process reach every server
directly. Addresses come from 10.231.X.0/24, X picked free at creation.

A partition is a pair of ``blackhole`` routes, one in each namespace: packets
between the two are discarded by the sender's own stack in both directions, so
established connections stall as they would behind a dead switch (no RST, no
ICMP) while new ones fail. Clients keep reaching every server, like a
Jepsen client that stays connected to the minority side.

Everything this module creates is named ``jl<pid hex>x<n>-…``: ``cleanup``
removes whatever carries a prefix, and ``reap_stale`` what a killed test run
left behind (its pid no longer exists). Namespaces are kept alive by the
processes inside them, so servers must be stopped before ``cleanup``.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

SUBNET = "10.231"
BRIDGE_HOST = 1  # the root namespace's address on the bridge: where clients come from
FIRST_NODE_HOST = 11
_NAME_RE = re.compile(r"^jl([0-9a-f]+)x\d+")
_IFNAME_MAX = 15  # IFNAMSIZ - 1
_labs = itertools.count()


class NetnsError(AssertionError):
    """An ``ip`` command failed: carries the command and its stderr."""


def ip(*args: str, netns: str | None = None) -> str:
    """Run ``ip ARGS`` (inside ``netns`` if given); its stdout, or NetnsError."""
    argv = ["ip", *(["netns", "exec", netns, "ip"] if netns else []), *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except FileNotFoundError as exc:
        raise NetnsError("the `ip` command (iproute2) is not installed") from exc
    if done.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def namespaces() -> list[str]:
    """Names from ``ip netns list`` (each line is a name, maybe followed by ``(id: N)``)."""
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def links() -> list[str]:
    """Interface names in the root namespace (``veth@peer`` reduced to ``veth``)."""
    names = []
    for line in ip("-o", "link", "show").splitlines():
        names.append(line.split(":", 2)[1].strip().split("@")[0])
    return names


def cleanup(prefix: str) -> None:
    """Delete every namespace and root-namespace link whose name starts with ``prefix``."""
    for name in namespaces():
        if name.startswith(prefix):
            ip("netns", "del", name)
    for name in links():
        if name.startswith(prefix):
            try:
                ip("link", "del", name)
            except NetnsError as exc:
                # A veth leaves by itself once its peer's namespace is gone, and may go
                # between the listing and the delete (then the kernel says "No such device").
                if not any(gone in str(exc) for gone in ("Cannot find device", "No such device")):
                    raise


def reap_stale() -> None:
    """Remove what earlier runs left behind: namespaces of processes that no longer exist."""
    owners = {m.group(1) for n in namespaces() + links() if (m := _NAME_RE.match(n))}
    for pid_hex in owners:
        if not _alive(int(pid_hex, 16)):
            cleanup(f"jl{pid_hex}x")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _free_subnet() -> int:
    """A third octet X such that no interface holds an address in 10.231.X.0/24."""
    used = ip("-o", "-4", "addr", "show")
    start = os.getpid() % 200
    for offset in range(250):
        octet = (start + offset) % 250 + 1
        if f" {SUBNET}.{octet}." not in used:
            return octet
    raise NetnsError(f"no free /24 left in {SUBNET}.0.0/16")


@dataclass(slots=True)
class NetLab:
    """``size`` namespaces on one bridge; node ``i`` lives in ``netns[i]`` at ``addrs[i]``."""

    prefix: str
    netns: list[str]
    addrs: list[str]
    bridge: str
    client_addr: str
    blackholes: set[tuple[int, int]] = field(default_factory=set)

    def wrapper(self, node: int) -> list[str]:
        """The argv prefix that runs a command inside node ``node``'s namespace.

        ``ip netns exec`` execs the command in place, so the pid a caller gets
        is the command's own: signals (SIGKILL, SIGSTOP) reach it directly.
        """
        return ["ip", "netns", "exec", self.netns[node]]

    def cut(self, a: int, b: int) -> None:
        """Drop every packet between nodes ``a`` and ``b``, both ways."""
        for src, dst in ((a, b), (b, a)):
            if (src, dst) not in self.blackholes:
                ip("route", "add", "blackhole", f"{self.addrs[dst]}/32", netns=self.netns[src])
                self.blackholes.add((src, dst))

    def isolate(self, node: int) -> None:
        """Cut ``node`` off from every other node (clients still reach it)."""
        for other in range(len(self.netns)):
            if other != node:
                self.cut(node, other)

    def heal(self) -> None:
        """Remove every blackhole route this lab added."""
        for src, dst in sorted(self.blackholes):
            ip("route", "del", "blackhole", f"{self.addrs[dst]}/32", netns=self.netns[src])
        self.blackholes.clear()

    @property
    def partitioned(self) -> bool:
        return bool(self.blackholes)


def create(size: int) -> NetLab:
    """Build the namespaces, veth pairs and bridge; on any failure remove what was built."""
    prefix = f"jl{os.getpid():x}x{next(_labs)}-"  # the dash: lab 1 is no prefix of lab 10
    if len(prefix) + 2 > _IFNAME_MAX:
        raise NetnsError(f"interface prefix {prefix!r} too long for IFNAMSIZ")
    octet = _free_subnet()
    lab = NetLab(
        prefix=prefix,
        netns=[f"{prefix}n{i}" for i in range(size)],
        addrs=[f"{SUBNET}.{octet}.{FIRST_NODE_HOST + i}" for i in range(size)],
        bridge=f"{prefix}b",
        client_addr=f"{SUBNET}.{octet}.{BRIDGE_HOST}",
    )
    try:
        ip("link", "add", lab.bridge, "type", "bridge")
        ip("addr", "add", f"{lab.client_addr}/24", "dev", lab.bridge)
        ip("link", "set", lab.bridge, "up")
        for i, (ns, addr) in enumerate(zip(lab.netns, lab.addrs, strict=True)):
            _add_node(lab, ns, addr, host=f"{prefix}v{i}", peer=f"{prefix}p{i}")
    except BaseException:
        cleanup(prefix)
        raise
    return lab


def _add_node(lab: NetLab, ns: str, addr: str, *, host: str, peer: str) -> None:
    ip("netns", "add", ns)
    ip("link", "add", host, "type", "veth", "peer", "name", peer)
    ip("link", "set", peer, "netns", ns)
    ip("link", "set", host, "master", lab.bridge)
    ip("link", "set", host, "up")
    ip("link", "set", "lo", "up", netns=ns)
    ip("link", "set", peer, "name", "eth0", netns=ns)
    ip("addr", "add", f"{addr}/24", "dev", "eth0", netns=ns)
    ip("link", "set", "eth0", "up", netns=ns)


@contextmanager
def netlab(size: int) -> Iterator[NetLab]:
    """A lab for the duration of a block, removed (prefix-wide) however the block ends."""
    reap_stale()
    lab = create(size)
    try:
        yield lab
    finally:
        cleanup(lab.prefix)


def leftovers(labs: Sequence[NetLab]) -> list[str]:
    """Namespaces or links of ``labs`` still present: empty after a clean teardown."""
    present = namespaces() + links()
    return [name for name in present if any(name.startswith(lab.prefix) for lab in labs)]
