"""Hosts on this machine: one Linux network namespace per host, on a private bridge.

Used by the tests and the bench to run the elastic runtime across "machines" for real: every
host has its own network stack (``eth0`` with an address in 198.18.0.0/15, the range reserved
for benchmarking, RFC 2544), its own loopback, and reaches the controller (on the bridge, in
the root namespace) and the other hosts only over its veth link, so the faults of a real
network can be made: ``ip link set ... down`` (silent loss: no FIN, no RST), packet loss and
delay (``tc netem``, or what stands in where the kernel has none: :meth:`Network.impair`), and a host that vanishes (link down, then every process in it killed).

Needs root and ``ip`` (iproute2); :func:`available` says why not. Everything made here has a
unique name per :class:`Network` and is removed by :meth:`Network.close` (also at exit).

>>> with Network(hosts=2) as net:                     # doctest: +SKIP
...     subprocess.run(net.hosts[0].prefix + ["ping", "-c1", net.hosts[1].address])
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import signal
import subprocess
from dataclasses import dataclass, field

BASE = (198, 18)
"""Addresses come from 198.18.0.0/15 (RFC 2544: benchmarking; never routed)."""


def available() -> tuple[bool, str]:
    """``(True, "")`` when namespaces can be made here, else ``(False, why)``."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False, "network namespaces need root"
    if shutil.which("ip") is None:
        return False, "no `ip` command (iproute2)"
    probe = f"stprobe{os.getpid() % 100000}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return False, f"`ip netns add` failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return True, ""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def _tc(netns: str | None, *args: str, check: bool = True) -> int:
    argv = (["ip", "netns", "exec", netns] if netns else []) + ["tc", *args]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip()}")
    return r.returncode


def _used_subnets() -> set[int]:
    out = _ip("-4", "-o", "addr", "show", check=False).stdout
    used = set()
    for line in out.splitlines():
        for part in line.split():
            if part.startswith(f"{BASE[0]}."):
                a = part.split("/")[0].split(".")
                if len(a) == 4 and int(a[1]) in (BASE[1], BASE[1] + 1):
                    used.add((int(a[1]) - BASE[1]) * 256 + int(a[2]))
    return used


@dataclass
class Host:
    """One "machine": a namespace, its veth (``link`` is the end on the bridge) and address."""

    name: str
    netns: str
    link: str
    address: str
    ifname: str = "eth0"
    up: bool = True
    netem: str | None = None

    @property
    def prefix(self) -> list[str]:
        """argv prefix that runs a command on this host."""
        return ["ip", "netns", "exec", self.netns]

    def env(self) -> dict[str, str]:
        """Environment a process on this host needs (gloo binds to the host's interface)."""
        return {"GLOO_SOCKET_IFNAME": self.ifname, "SPOTTRAIN_HOST": self.name}

    def pids(self) -> list[int]:
        r = _ip("netns", "pids", self.netns, check=False)
        return [int(p) for p in r.stdout.split()] if r.returncode == 0 else []


@dataclass
class Network:
    """A bridge in the root namespace with ``hosts`` namespaces on it; more can be added."""

    hosts_wanted: int = 0
    tag: str = field(default_factory=lambda: f"{random.randrange(16**4):04x}")
    hosts: list[Host] = field(default_factory=list)

    def __init__(self, hosts: int = 0, *, tag: str | None = None) -> None:
        self.tag = tag or f"{random.randrange(16**4):04x}"
        self.hosts = []
        self.bridge = f"stb{self.tag}"
        self._closed = False
        used = _used_subnets()
        free = [k for k in range(512) if k not in used]
        if not free:
            raise RuntimeError("no free /24 in 198.18.0.0/15")
        self.subnet = random.choice(free)
        self._a, self._b = BASE[1] + self.subnet // 256, self.subnet % 256
        self.address = f"{BASE[0]}.{self._a}.{self._b}.1"
        """The root namespace's address on the bridge: where the controller listens."""
        atexit.register(self.close)
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.address}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for _ in range(hosts):
                self.add_host()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "Network":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_host(self) -> Host:
        """A fresh host (a replacement machine): new namespace, new link, new address."""
        i = len(self.hosts)
        if i > 240:
            raise RuntimeError("at most 240 hosts per network")
        host = Host(name=f"h{i}", netns=f"spottrain-{self.tag}-h{i}", link=f"st{self.tag}v{i}",
                    address=f"{BASE[0]}.{self._a}.{self._b}.{10 + i}")
        self.hosts.append(host)
        _ip("netns", "add", host.netns)
        _ip("link", "add", host.link, "type", "veth", "peer", "name", host.ifname, "netns", host.netns)
        _ip("link", "set", host.link, "master", self.bridge, "up")
        _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", host.ifname)
        _ip("-n", host.netns, "link", "set", host.ifname, "up")
        _ip("-n", host.netns, "link", "set", "lo", "up")
        return host

    # ------------------------------------------------------------ faults
    def link_down(self, host: Host) -> None:
        """Cut the host off: its peers see silence (no FIN, no RST)."""
        _ip("link", "set", host.link, "down")
        host.up = False

    def link_up(self, host: Host) -> None:
        _ip("link", "set", host.link, "up")
        host.up = True

    def impair(self, host: Host, kind: str, *, loss: float = 0.05, delay_ms: float = 50.0,
               rate_mbit: float = 20.0) -> str:
        """Degrade both ends of the host's link: ``loss`` (random packet loss) or ``delay``.

        With ``sch_netem`` in the kernel this is ``tc netem loss 5%`` / ``delay 50ms 10ms``. Without
        it (some VM kernels ship neither netem nor tc actions) loss is made with a classic-BPF
        classifier (a random number per packet) that sends ``loss`` of the packets into an HTB class
        of 8 bit/s with a one-packet queue (dropped), and delay becomes a ``tbf`` rate limit of
        ``rate_mbit`` (queueing delay, not a fixed one). Returns what was applied.
        """
        if kind not in ("loss", "delay"):
            raise ValueError(f"unknown impairment {kind!r}")
        spec = f"loss {loss * 100:g}%" if kind == "loss" else f"delay {delay_ms:g}ms {delay_ms / 5:g}ms"
        ends = ((None, host.link), (host.netns, host.ifname))
        # A new impairment replaces the one in place (a root qdisc of another kind cannot be
        # "replaced" in place, and the loss classes would exist twice).
        self.clear_impairment(host)
        if _tc(None, "qdisc", "replace", "dev", host.link, "root", "netem", *spec.split(), check=False) == 0:
            _tc(host.netns, "qdisc", "replace", "dev", host.ifname, "root", "netem", *spec.split())
            host.netem = f"netem {spec}"
            return host.netem
        for ns, dev in ends:
            if kind == "delay":
                _tc(ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{rate_mbit:g}mbit",
                    "burst", "32kbit", "latency", "400ms")
                continue
            threshold = int(loss * 2**32)
            # ld rand; A >= threshold ? no match (default class) : match (the black-hole class)
            prog = f"4,32 0 0 {0xFFFFF000 + 56},53 1 0 {threshold},6 0 0 {0xFFFFFFFF},6 0 0 0"
            _tc(ns, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
            _tc(ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit")
            _tc(ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb", "rate", "8bit", "ceil", "8bit")
            _tc(ns, "qdisc", "add", "dev", dev, "parent", "1:20", "handle", "20:", "pfifo", "limit", "1")
            _tc(ns, "filter", "add", "dev", dev, "parent", "1:", "protocol", "all", "bpf", "bytecode", prog,
                "classid", "1:20")
        host.netem = (f"tbf rate {rate_mbit:g}mbit" if kind == "delay"
                      else f"random loss {loss * 100:g}% (cBPF classifier into a dropping HTB class)")
        return host.netem

    def clear_impairment(self, host: Host) -> None:
        _tc(None, "qdisc", "del", "dev", host.link, "root", check=False)
        _tc(host.netns, "qdisc", "del", "dev", host.ifname, "root", check=False)
        host.netem = None

    def vanish(self, host: Host) -> list[int]:
        """The host disappears: link down first (nothing it sends gets out), then every process in
        it is killed. Returns the pids killed."""
        self.link_down(host)
        pids = host.pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids

    # ------------------------------------------------------------ cleanup
    def close(self) -> None:
        """Kill what runs in the hosts and remove every namespace, link and the bridge."""
        if self._closed:
            return
        self._closed = True
        for host in self.hosts:
            for pid in host.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for host in self.hosts:
            _ip("link", "del", host.link, check=False)
            _ip("netns", "del", host.netns, check=False)
        _ip("link", "del", self.bridge, check=False)
        try:
            atexit.unregister(self.close)
        except Exception:  # noqa: BLE001
            pass


def leftovers(tag: str) -> list[str]:
    """Namespaces and links of network ``tag`` that still exist (for tests of the cleanup)."""
    out = [n.split()[0] for n in _ip("netns", "list", check=False).stdout.splitlines()
           if n.startswith(f"spottrain-{tag}-")]
    links = _ip("-o", "link", "show", check=False).stdout
    out += [f"link st{tag}" for line in links.splitlines() if f"st{tag}v" in line or f"stb{tag}" in line]
    return out
