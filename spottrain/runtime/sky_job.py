"""A plan run on SkyPilot as one elastic job: the dry run, and the real run.

Where the controller lives: on the machine where ``spottrain run --backend skypilot`` runs.
It holds the cloud credentials SkyPilot uses (so it can launch and tear down nodes) and it is
not a spot node, so no revocation takes it away. The nodes reach its store at ``--controller
HOST:PORT``, an address of that machine they can reach (a public address with the port open,
or a private network / VPN shared with the cloud). The address is checked before any node is
launched. If the controller dies, the nodes' workers lose the store and exit, each cluster is
torn down when its worker exits (``down=True``), and re-running the same command resumes from
the newest complete checkpoint in ``--bucket``. See docs/skypilot.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spottrain.errors import InputError, SpottrainError
from spottrain.plan_file import Plan
from spottrain.runtime.cloud import NodeGroup, check_launchable, check_reachable, groups_from_plan, parse_address
from spottrain.runtime.cloud_sky import RecordingSky, SkyPilotProvider
from spottrain.runtime.skypilot import NodeTask, SpottrainInstall, assumptions, node_task_config, to_yaml

DEFAULT_PORT = 29400
PLACEHOLDER = "CONTROLLER_HOST"


@dataclass(frozen=True, kw_only=True)
class SkyJob:
    """Everything the elastic SkyPilot run needs."""

    plan: Plan
    job_id: str
    command: list[str]
    env: dict[str, str]
    """``SPOTTRAIN_*`` settings for every worker."""
    policy: str
    steps: int | None = None
    controller: str | None = None
    """``HOST:PORT`` the nodes use to reach the controller's store."""
    controller_port: int | None = None
    """Port the store listens on, on every interface (default: ``controller``'s port)."""
    workdir: str | None = None
    bucket: str | None = None
    install: SpottrainInstall = field(default_factory=SpottrainInstall)
    dist_dir: str = "dist"
    replacement_delay_s: float = 300.0
    """Expected time from a request to a joined node on the cloud (launch + setup + restore)."""

    def groups(self) -> tuple[NodeGroup, ...]:
        """The plan's groups, refused (one line) when they cannot be launched."""
        groups = groups_from_plan(self.plan)
        check_launchable(groups)
        for g in groups:
            if g.gpus_per_node > 1:
                raise InputError(f"plan group {g.name} has {g.gpus_per_node} GPUs per node ({g.instance_type}); the "
                                 "elastic mode runs one worker per node: use --skypilot-mode managed-torchrun",
                                 column="--skypilot-mode")
        return groups

    def address(self) -> str:
        if self.controller:
            parse_address(self.controller)
            return self.controller
        return f"{PLACEHOLDER}:{DEFAULT_PORT}"

    def bind(self) -> str:
        """What the store listens on: c10d's TCPStore listens on every interface of its port."""
        if self.controller_port is not None:
            if not 0 < self.controller_port < 65536:
                raise InputError(f"expected a port 1-65535, got {self.controller_port}", column="--controller-port")
            return f"0.0.0.0:{self.controller_port}"
        return f"0.0.0.0:{parse_address(self.controller)[1] if self.controller else DEFAULT_PORT}"

    def task_for(self, group: NodeGroup, node_id: str, cluster: str, env: Mapping[str, str]) -> dict[str, Any]:
        accelerators = f"{group.gpu}:{group.gpus_per_node}" if group.gpu and group.gpu.lower() != "cpu" else None
        return node_task_config(NodeTask(cluster=cluster, node_id=node_id, command=self.command, cloud=group.cloud,
                                         region=group.region, zone=group.zone, instance_type=group.instance_type,
                                         accelerators=accelerators, use_spot=group.spot, env=dict(env),
                                         workdir=self.workdir, bucket=self.bucket, install=self.install,
                                         dist_dir=self.dist_dir))

    def liveness_address(self) -> str:
        """The heartbeat server: the controller's host, the next port."""
        host, port = self.address().rsplit(":", 1)
        return f"{host}:{int(port) + 1}"

    def worker_env(self, address: str) -> dict[str, str]:
        return {**self.env, "SPOTTRAIN_RDZV": address, "SPOTTRAIN_LIVENESS": self.liveness_address(),
                "SPOTTRAIN_JOB_ID": self.job_id}


DECISIONS = (
    ("replace a lost node (request)",
     "sky.launch(task, cluster_name='<job>-<group>-n<k>', down=True): a new one-node cluster of the option's market"),
    ("release a node", "the node leaves at a step boundary (told over its heartbeat), then sky.down('<cluster>')"),
    ("switch to on-demand", "sky.launch of the on-demand nodes; the spot nodes leave and are downed once one has "
                            "joined and trained two steps (it gets the state from them)"),
    ("checkpoint now", "no SkyPilot call: the controller's store asks every worker for a checkpoint"),
    ("a node's state", "sky.status(cluster_names=[...], refresh=AUTO) and sky.job_status(cluster, [job]) every 30 s"),
)


def dry_run(job: SkyJob) -> dict[str, Any]:
    """The calls the real run would make at start, with the task of each node; nothing launched.

    ``validated_by`` is SkyPilot's version when its own task and resources schemas accepted every
    task, ``None`` when SkyPilot is not installed here.
    """
    groups = job.groups()
    address = job.address()
    api = RecordingSky()
    tasks: dict[str, dict[str, Any]] = {}

    def task_for(group: NodeGroup, node_id: str, cluster: str, env: Mapping[str, str]) -> dict[str, Any]:
        tasks[cluster] = job.task_for(group, node_id, cluster, env)
        return tasks[cluster]

    provider = SkyPilotProvider(job_id=job.job_id, task_for=task_for, api=api, max_parallel_launches=1)
    for g in groups:
        provider.launch(g, [f"{g.name}-n{k}" for k in range(g.count)], job.worker_env(address))
    provider._pool.shutdown(wait=True)
    validated_by = None
    try:
        from spottrain.runtime.skypilot import validate_with_skypilot

        for config in tasks.values():
            validated_by = validate_with_skypilot(config)
    except ImportError:
        validated_by = None
    return {"job_id": job.job_id, "controller": {"where": "this machine", "store_listens_on": job.bind(),
                                                  "nodes_reach_it_at": address,
                                                  "heartbeats_at": job.liveness_address(),
                                                  "placeholder": not job.controller},
            "policy": job.policy, "calls": api.calls, "tasks": tasks, "validated_by": validated_by,
            "decisions": [{"decision": d, "skypilot": how} for d, how in DECISIONS],
            "groups": [f"{g.name}: {g.count}x {g.label}" for g in groups],
            "assumes": assumptions(job.install, workdir=job.workdir, dist_dir=job.dist_dir)}


def render_dry_run(result: dict[str, Any]) -> str:
    """The dry run as text: a header, the calls as Python, each task's YAML."""
    c = result["controller"]
    lines = [f"# spottrain run --backend skypilot (elastic), job {result['job_id']}: DRY RUN, nothing is launched",
             f"# controller: {c['where']}; its store listens on {c['store_listens_on']}; nodes reach it at "
             f"{c['nodes_reach_it_at']} (heartbeats: {c['heartbeats_at']})"
             + (" (placeholder: pass --controller HOST:PORT)" if c["placeholder"] else ""),
             f"# policy {result['policy']}; plan groups: " + "; ".join(result["groups"]),
             f"# assumes: {result['assumes']}",
             "# what the policy's decisions become:"]
    lines += [f"#   {d['decision']}: {d['skypilot']}" for d in result["decisions"]]
    lines.append("# " + (f"every task below is valid by SkyPilot {result['validated_by']}'s task and resources schemas"
                         if result["validated_by"] else
                         "SkyPilot is not installed here: the tasks were not checked against its schema"))
    lines += ["import sky, yaml", ""]
    for call in result["calls"]:
        name = call.split("cluster_name=")[1].split(",")[0].strip("'") if "cluster_name=" in call else None
        if name:
            lines.append(f"task = sky.Task.from_yaml_config(yaml.safe_load(open('{name}.yaml')))")
        lines.append(f"sky.get({call.split('   #')[0]})")
    for name, config in result["tasks"].items():
        lines += ["", f"# ---- {name}.yaml", to_yaml(config).rstrip()]
    return "\n".join(lines) + "\n"


def run(job: SkyJob, *, on_event: Callable[[str, dict[str, Any]], None] | None = None,
        api: Any = None) -> Any:
    """Launch the plan's nodes and run the elastic job to the end; returns the
    :class:`~spottrain.runtime.fleet.FleetResult`. Every check that can fail is made before a
    node is launched: the groups, SkyPilot present, the wheel built, the controller address reachable."""
    from spottrain.runtime.fleet import FleetController, FleetJob

    groups = job.groups()
    if not job.controller:
        raise InputError("the elastic mode needs the address the nodes reach this machine at: --controller "
                         "HOST:PORT (or --dry-run, or --skypilot-mode managed-torchrun)", column="--controller")
    address = job.address()
    if api is None:
        try:
            import sky as api  # noqa: PLC0415
        except ImportError:
            raise SpottrainError("SkyPilot is not installed: pip install 'spottrain[skypilot]' "
                                 "(or see the tasks with --dry-run)") from None
    install = job.install
    if not install.wheel and not install.source:
        from spottrain.runtime.skypilot import build_wheel

        install = SpottrainInstall(wheel=str(build_wheel(job.dist_dir)), python=install.python)
    job = _replace(job, install=install)
    provider = SkyPilotProvider(job_id=job.job_id, task_for=job.task_for, api=api)
    fleet = FleetJob(groups=groups, job_id=job.job_id, steps=job.steps, policy=job.policy, env=dict(job.env),
                     deadline_s=job.plan.deadline_s, store_bind=job.bind(), advertise=address,
                     liveness_port=int(job.bind().rsplit(":", 1)[1]) + 1, liveness_advertise=job.liveness_address(),
                     replacement_delay_s=job.replacement_delay_s, finish_grace_s=300.0, poll_s=1.0,
                     before_launch=lambda addr: check_reachable(addr))
    import signal

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, stop)  # SIGTERM stops like Ctrl-C: checkpoint, exit, tear down
    try:
        result = FleetController(fleet, provider, on_event=on_event).run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if result.input_error is not None:  # the user's input, not a revocation: one line, exit 2
        raise InputError(result.input_error)
    return result


def _replace(job: SkyJob, **changes: Any) -> SkyJob:
    import dataclasses

    return dataclasses.replace(job, **changes)

