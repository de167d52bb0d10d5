"""The SkyPilot backend: a task YAML from a plan, launched with ``sky jobs launch``.

The task runs ``torchrun`` on every node with a c10d rendezvous on the head node, the
checkpoint directory on a bucket (``file_mounts``, mode ``MOUNT``) so that a managed job that
SkyPilot recovers after a preemption resumes from the newest complete checkpoint.
``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` gives every torchrun restart a fresh store (see
docs/run.md: with the shared agent store, restarted gloo workers read dead peers' addresses).

Safety: every user-given token is ``shlex.quote``'d into the ``run`` script, names are checked
against SkyPilot's pattern, and only ``SPOTTRAIN_*`` settings we chose go into ``envs`` - no
variable of the caller's environment (credentials included) is ever copied into the spec.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spottrain.errors import InputError, SpottrainError
from spottrain.plan import Plan

RDZV_PORT = 29500
_NAME = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9._-]{0,62})$")
_BUCKET = re.compile(r"^(?:(?:s3|gs|r2|cos)://)?[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](?:/[A-Za-z0-9._/-]*)?$")
_ENV_KEY = re.compile(r"^SPOTTRAIN_[A-Z0-9_]+$")
CHECKPOINT_MOUNT = "/spottrain-checkpoints"


@dataclass(frozen=True, kw_only=True)
class SkyTask:
    """What goes into the YAML."""

    name: str
    command: list[str]
    """The worker command, e.g. ``["python", "train.py", "--lr", "0.1"]``."""
    num_nodes: int
    accelerators: str | None
    """``"V100:1"``; ``None`` for CPU-only nodes."""
    use_spot: bool
    cloud: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    bucket: str | None = None
    """Checkpoint bucket (``s3://name``, ``gs://name`` or a bare name for SkyPilot storage)."""
    env: dict[str, str] = field(default_factory=dict)
    """``SPOTTRAIN_*`` settings only."""
    setup: str = "pip install spottrain"
    max_restarts: int = 3


def task_from_plan(plan: Plan, *, name: str, command: list[str], bucket: str | None, env: dict[str, str]) -> SkyTask:
    """The plan's largest group becomes the task's resources (a SkyPilot task is homogeneous)."""
    if not plan.groups:
        raise InputError("the plan has no node groups")
    g = max(plan.groups, key=lambda grp: grp.count)
    return SkyTask(name=name, command=command, num_nodes=g.count, accelerators=f"{g.gpu}:{g.gpus_per_node}",
                   use_spot=g.spot, cloud=g.cloud, region=g.region, zone=g.zone, instance_type=g.instance_type,
                   bucket=bucket, env=env)


def _torchrun_args(command: list[str]) -> list[str]:
    """``python train.py a`` -> ``train.py a``; ``python -m pkg`` -> ``-m pkg`` (torchrun's forms)."""
    if not command:
        raise InputError("no command to run: pass --example NAME or -- python train.py ...")
    args = list(command)
    if Path(args[0]).name.startswith("python"):
        args = args[1:]
    if not args:
        raise InputError("the command is only a Python interpreter; name a script or -m module")
    return args


def task_config(task: SkyTask) -> dict[str, Any]:
    """The task as a dict in SkyPilot's task-YAML schema."""
    if not _NAME.match(task.name):
        raise InputError(f"job name {task.name!r} must start with a letter or digit and contain only "
                         "letters, digits, '.', '_' or '-' (at most 63 characters)", column="--job-id")
    if task.num_nodes < 1:
        raise InputError("num_nodes must be >= 1")
    for key in task.env:
        if not _ENV_KEY.match(key):
            raise InputError(f"refusing to put {key!r} into the task: only SPOTTRAIN_* settings are written")
    resources: dict[str, Any] = {"use_spot": bool(task.use_spot)}
    for key in ("cloud", "region", "zone", "instance_type", "accelerators"):
        value = getattr(task, key)
        if value:
            resources[key] = value
    envs = dict(task.env)
    envs["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    config: dict[str, Any] = {"name": task.name, "num_nodes": task.num_nodes, "resources": resources}
    if task.bucket:
        if not _BUCKET.match(task.bucket):
            raise InputError(f"bucket {task.bucket!r} is not a valid bucket name or URL (s3://name, gs://name)",
                             column="--bucket")
        mount: dict[str, Any] = {"mode": "MOUNT"}
        if "://" in task.bucket:
            mount["source"] = task.bucket
        else:
            mount["name"] = task.bucket
        config["file_mounts"] = {CHECKPOINT_MOUNT: mount}
        envs["SPOTTRAIN_CHECKPOINT_DIR"] = f"{CHECKPOINT_MOUNT}/{task.name}"
    config["envs"] = envs
    config["setup"] = task.setup
    nproc = "${SKYPILOT_NUM_GPUS_PER_NODE:-1}" if task.accelerators else "1"
    user = " ".join(shlex.quote(a) for a in _torchrun_args(task.command))
    config["run"] = "\n".join([
        "set -e",
        'HEAD_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)',
        f'torchrun --nnodes="$SKYPILOT_NUM_NODES" --nproc-per-node="{nproc}" --node-rank="$SKYPILOT_NODE_RANK" '
        f'--rdzv-backend=c10d --rdzv-endpoint="$HEAD_IP:{RDZV_PORT}" --rdzv-id="$SKYPILOT_TASK_ID" '
        f"--max-restarts={int(task.max_restarts)} {user}",
        "",
    ])
    return config


def write_task(task: SkyTask, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write the YAML; refuse to replace an existing file unless ``overwrite``."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise InputError("file exists; pass --force to overwrite it", file=str(path))
    text = "# SkyPilot managed-job task written by `spottrain run --backend skypilot`\n"
    text += yaml.safe_dump(task_config(task), sort_keys=False, default_flow_style=False)
    path.write_text(text)
    return path


def launch_command(path: str | Path, name: str) -> list[str]:
    return ["sky", "jobs", "launch", "--yes", "--name", name, str(path)]


def launch(path: str | Path, name: str) -> int:
    """Run ``sky jobs launch``; raises when SkyPilot is not installed."""
    if shutil.which("sky") is None:
        raise SpottrainError("SkyPilot is not installed (pip install skypilot); the task YAML was written to "
                             f"{path}; launch it with: {' '.join(shlex.quote(a) for a in launch_command(path, name))}")
    return subprocess.call(launch_command(path, name))
