"""Where a job's nodes come from: the :class:`Provider` interface and the local provider.

The fleet controller (:mod:`spottrain.runtime.fleet`) asks a provider for nodes of a
:class:`NodeGroup` (one plan group: a cloud, a region/zone, an instance type, spot or
on-demand) and tells it to give nodes back; every node runs the same worker command, which
joins the job through the controller's store (``SPOTTRAIN_RDZV``) under its node id
(``SPOTTRAIN_WORKER_ID``). Two providers implement it:

- :class:`LocalProvider` (here): a "node" is a process on this machine (or, with a
  ``host_for`` hook, one started on a network-namespace host), so the controller's
  decisions are tested end to end without a cloud;
- :class:`~spottrain.runtime.cloud_sky.SkyPilotProvider`: a node is a one-node SkyPilot
  cluster, launched and torn down through SkyPilot's Python API.

Also here: the checks that refuse a plan before any node is started (:func:`check_launchable`)
and the controller-address check (:func:`check_reachable`).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from spottrain.errors import InputError, UnknownNameError
from spottrain.plan_file import Plan

STARTING, RUNNING, SUCCEEDED, LOST = "starting", "running", "succeeded", "lost"
"""Node states a provider reports: still being provisioned / set up; its worker runs; its
worker exited 0 (the job is done); gone (revoked, crashed, failed to launch, terminated)."""

ENV_RDZV = "SPOTTRAIN_RDZV"
ENV_WORKER_ID = "SPOTTRAIN_WORKER_ID"
# Same names as spottrain.runtime.elastic (kept here so that cloud code does not import torch).


@dataclass(frozen=True, kw_only=True)
class NodeGroup:
    """Identical nodes bought on one market: a plan group, or one a policy asked for."""

    name: str
    """Short id, e.g. ``g0``; node ids are ``<name>-n<k>``."""
    cloud: str
    instance_type: str
    gpu: str
    gpus_per_node: int
    spot: bool
    region: str | None
    zone: str | None
    price_usd_per_hour: float
    """Price of one node on this group's market."""
    on_demand_price_usd_per_hour: float
    count: int
    """Nodes of the plan in this group (0 for groups created by a decision)."""

    @property
    def label(self) -> str:
        where = self.zone or self.region or "any region"
        return f"{self.instance_type} {'spot' if self.spot else 'on-demand'} ({self.cloud} {where})"


def groups_from_plan(plan: Plan) -> tuple[NodeGroup, ...]:
    """One :class:`NodeGroup` per plan group, named ``g0``, ``g1``, ..."""
    if not plan.groups:
        raise InputError("the plan has no node groups")
    return tuple(NodeGroup(name=f"g{i}", cloud=g.cloud, instance_type=g.instance_type, gpu=g.gpu,
                           gpus_per_node=g.gpus_per_node, spot=g.spot, region=g.region, zone=g.zone,
                           price_usd_per_hour=g.price_usd_per_hour,
                           on_demand_price_usd_per_hour=g.on_demand_price_usd_per_hour, count=g.count)
                 for i, g in enumerate(plan.groups))


def check_launchable(groups: Sequence[NodeGroup]) -> None:
    """Refuse groups that no cloud could launch, before any node is started.

    Checked against the shipped catalog (SkyPilot's, see docs/catalog.md): the cloud is one
    spottrain knows, the instance type exists on it, the region and zone offer that type, and a
    spot group's zone has a spot market for it. The error names the group and the near miss.
    """
    from spottrain.catalog import CLOUDS, load_catalog

    catalog = load_catalog()
    for g in groups:
        where = f"plan group {g.name} ({g.instance_type})"
        cloud = (g.cloud or "").lower()
        if cloud not in CLOUDS:
            raise InputError(str(UnknownNameError("cloud", g.cloud, CLOUDS)), column=where)
        offers = [o for o in catalog.offers if o.cloud == cloud]
        types = {o.instance_type for o in offers}
        if g.instance_type not in types:
            raise InputError(str(UnknownNameError(f"{cloud} instance type", g.instance_type, types)), column=where)
        offers = [o for o in offers if o.instance_type == g.instance_type]
        if g.region:
            in_region = [o for o in offers if o.region == g.region]
            if not in_region:
                near = sorted({o.region for o in offers})
                raise InputError(f"{g.instance_type} is not offered in region {g.region!r} on {cloud} "
                                 f"(offered in {_few(near)})", column=where)
            offers = in_region
        if g.zone and cloud == "aws" and g.region and re.fullmatch(re.escape(g.region) + "[a-z]", g.zone):
            pass  # an AWS zone *name*: its zone ID differs per account, so only the region can be checked
        elif g.zone:
            in_zone = [o for o in offers if o.zone == g.zone]
            if not in_zone:
                near = sorted({o.zone for o in offers if o.zone})
                raise InputError(f"zone {g.zone!r} has no {g.instance_type} (zones of {g.region or cloud} that "
                                 f"do: {_few(near) or 'none listed'})", column=where)
            offers = in_zone
        if g.spot and not any(o.spot_price_usd_per_hour is not None for o in offers):
            raise InputError(f"{g.instance_type} has no spot market in {g.zone or g.region or cloud}; "
                             "plan it on-demand or in another zone", column=where)


def _few(names: Sequence[str], n: int = 6) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


_ADDR = re.compile(r"^(?P<host>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:]+\]):(?P<port>\d{1,5})$")


def parse_address(text: str, *, option: str = "--controller", any_port: bool = False) -> tuple[str, int]:
    """``host:port`` -> ``(host, port)``; a one-line error naming the option otherwise.
    ``any_port``: port 0 (a free port, for an address to listen on) is allowed."""
    m = _ADDR.match(text.strip())
    if not m or not (0 if any_port else 1) <= int(m["port"]) < 65536:
        raise InputError(f"expected HOST:PORT (e.g. 203.0.113.7:29400), got {text!r}", column=option)
    return m["host"].strip("[]"), int(m["port"])


def check_reachable(address: str, *, timeout_s: float = 5.0, option: str = "--controller") -> None:
    """Open (and close) a TCP connection to ``address``; a one-line error if it fails.

    Run after the controller's store is listening and before any node is launched: an
    address this machine cannot reach is one the nodes will not reach either (or a typo).
    """
    host, port = parse_address(address, option=option)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InputError(f"controller address {address} cannot be reached ({reason}); give an address of "
                         "this machine that the cloud nodes can reach, with the port open", column=option) from None


class Provider(Protocol):
    """What the fleet controller needs from a source of nodes.

    Every call returns quickly: launching is asynchronous (a node shows as ``starting`` in
    :meth:`poll` until its worker runs), so one slow launch never stalls the controller.
    """

    def launch(self, group: NodeGroup, node_ids: Sequence[str], env: Mapping[str, str]) -> None:
        """Start one node of ``group`` per id; each runs the worker with ``env`` plus
        ``SPOTTRAIN_WORKER_ID=<id>``."""
        ...

    def terminate(self, node_id: str) -> None:
        """Give the node back (release, or the end of the job); no error if it is gone."""
        ...

    def poll(self) -> dict[str, str]:
        """``node id -> state`` (:data:`STARTING`, :data:`RUNNING`, :data:`SUCCEEDED`,
        :data:`LOST`) for every node launched so far."""
        ...

    def shutdown(self) -> None:
        """Terminate every node still held."""
        ...


@dataclass(kw_only=True)
class _LocalNode:
    group: NodeGroup
    proc: subprocess.Popen[bytes]
    log: object
    terminated: bool = False


class LocalProvider:
    """Nodes as processes on this machine, each running the worker command.

    ``host_for(node_id)`` lets a caller start each node on a host of its own, e.g. a
    network-namespace host of :class:`spottrain.runtime.netns.Network` (anything with an argv
    ``prefix`` and an ``env()``); the controller's advertised address is then its address on
    the hosts' bridge. ``revoke`` is the fault injector: what a cloud does to a spot node
    (``kill`` = SIGKILL, ``sigterm`` = a notice, ``stop`` = SIGSTOP, a node that falls silent).
    """

    def __init__(self, *, command: Sequence[str], run_dir: str | os.PathLike[str],
                 host_for: Callable[[str], Any] | None = None,
                 base_env: Mapping[str, str] | None = None) -> None:
        self.command = list(command)
        self.run_dir = Path(run_dir)
        self.host_for = host_for
        self.hosts: dict[str, Any] = {}
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.nodes: dict[str, _LocalNode] = {}
        self.launched: list[tuple[str, str]] = []
        """``(node id, group label)`` in launch order (what a test compares)."""
        self.terminated: list[str] = []

    def launch(self, group: NodeGroup, node_ids: Sequence[str], env: Mapping[str, str]) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for node_id in node_ids:
            if node_id in self.nodes:
                raise ValueError(f"node id {node_id} is already in use")
            full_env = {**self.base_env, **env, ENV_WORKER_ID: node_id, "PYTHONUNBUFFERED": "1",
                        "SPOTTRAIN_RUN_DIR": str(self.run_dir),
                        "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1")}
            host = self.host_for(node_id) if self.host_for else None
            if host is not None:
                self.hosts[node_id] = host
                full_env.update(host.env())
            argv = [*(host.prefix if host is not None else ()), *self.command]
            log = open(self.run_dir / f"worker-{node_id}.log", "ab")
            proc = subprocess.Popen(argv, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            self.nodes[node_id] = _LocalNode(group=group, proc=proc, log=log)
            self.launched.append((node_id, group.label))

    def terminate(self, node_id: str) -> None:
        node = self.nodes.get(node_id)
        if node is None or node.terminated:
            return
        node.terminated = True
        self.terminated.append(node_id)
        self._signal(node, signal.SIGKILL)

    def revoke(self, node_id: str, how: str = "kill") -> None:
        """Fault injection: ``kill`` (SIGKILL), ``sigterm`` (notice), ``stop`` (SIGSTOP)."""
        sig = {"kill": signal.SIGKILL, "sigterm": signal.SIGTERM, "stop": signal.SIGSTOP}[how]
        self._signal(self.nodes[node_id], sig)

    def pid(self, node_id: str) -> int:
        return self.nodes[node_id].proc.pid

    @staticmethod
    def _signal(node: _LocalNode, sig: int) -> None:
        try:  # the whole session: a worker's helper processes go with it, as on a VM
            os.killpg(node.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def poll(self) -> dict[str, str]:
        out = {}
        for node_id, node in self.nodes.items():
            code = node.proc.poll()
            if code is None:
                out[node_id] = LOST if node.terminated else RUNNING
            else:
                out[node_id] = SUCCEEDED if code == 0 and not node.terminated else LOST
        return out

    def shutdown(self) -> None:
        for node_id, node in self.nodes.items():
            if node.proc.poll() is None:
                self._signal(node, signal.SIGKILL)
        for node in self.nodes.values():
            try:
                node.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            node.log.close()  # type: ignore[attr-defined]
