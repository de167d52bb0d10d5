"""SkyPilot task YAMLs: one per node of an elastic job, or one ``torchrun`` managed job.

Two modes (``spottrain run --backend skypilot --skypilot-mode ...``):

- ``elastic`` (default): every node is a one-node SkyPilot cluster (:func:`node_task_config`)
  whose worker joins the job's controller at ``SPOTTRAIN_RDZV``; the controller
  (:mod:`spottrain.runtime.fleet`) buys and gives back nodes through SkyPilot's Python API
  (:mod:`spottrain.runtime.cloud_sky`).
- ``managed-torchrun`` (fallback): one managed job (:func:`task_config`) that runs ``torchrun``
  on every node of the plan's largest group with a static group per attempt; SkyPilot's
  managed-job recovery restarts the whole cluster from the newest checkpoint after a preemption.

Both tasks carry the user's code (``workdir``: the directory the command runs in, uploaded by
SkyPilot) and install spottrain from what the user has (:class:`SpottrainInstall`): a wheel built
from this checkout and uploaded through ``file_mounts``, a wheel the user names, or a pip
requirement (e.g. a git URL pinned to a commit). The setup assumes SkyPilot's default images:
``conda`` on the PATH; it creates a Python 3.11 environment ``spottrain`` and installs spottrain
with its pinned torch there.

Safety: every user-given token is ``shlex.quote``'d into the scripts, names are checked against
SkyPilot's pattern, and only ``SPOTTRAIN_*`` settings we chose go into ``envs`` - no variable of
the caller's environment (credentials included) is ever copied into the spec.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spottrain.errors import InputError, SpottrainError
from spottrain.plan_file import Plan

RDZV_PORT = 29500
RDZV_PORT_ENV = "SPOTTRAIN_RDZV_PORT"
"""Environment variable that moves the head node's rendezvous port off RDZV_PORT (a port in use)."""
_NAME = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9._-]{0,62})$")
_CLUSTER = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_BUCKET = re.compile(r"^(?:(?:s3|gs|r2|cos)://)?[a-z0-9][a-z0-9._-]{1,61}[a-z0-9](?:/[A-Za-z0-9._/-]*)?$")
_ENV_KEY = re.compile(r"^SPOTTRAIN_[A-Z0-9_]+$")
_AWS_ZONE_ID = re.compile(r"^[a-z]{2,5}\d+-az\d+$")
CHECKPOINT_MOUNT = "/spottrain-checkpoints"
DIST_MOUNT = "/spottrain-dist"
CONDA_ENV = "spottrain"
INPUT_ERROR_ENV = "SPOTTRAIN_INPUT_ERROR_FILE"
"""Names the node-local file in which a worker under torchrun reports the user's input error
(spottrain.runtime.torchrun_guard; the managed-torchrun task's run script reads it)."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spottrain")
    except PackageNotFoundError:
        return "0.1.0"


@dataclass(frozen=True, kw_only=True)
class SpottrainInstall:
    """How the nodes get spottrain: a local wheel (uploaded), or a pip requirement."""

    wheel: str | None = None
    """Local path of a spottrain wheel; ``None`` with no ``source``: the wheel built from this
    checkout (:func:`build_wheel`) at ``default_wheel_path``."""
    source: str | None = None
    """A pip requirement instead of a wheel, e.g. ``git+https://github.com/you/spottrain@<commit>``."""
    python: str = "3.11"

    def wheel_path(self, default_dir: str | Path) -> str:
        return self.wheel or str(Path(default_dir) / f"spottrain-{_version()}-py3-none-any.whl")

    def file_mounts(self, default_dir: str | Path) -> dict[str, str]:
        if self.source:
            return {}
        local = self.wheel_path(default_dir)
        return {f"{DIST_MOUNT}/{Path(local).name}": str(Path(local).resolve())}

    def setup_script(self, default_dir: str | Path) -> str:
        if self.source:
            target = self.source
            requirement = f"spottrain[torch] @ {target}" if "://" in target and " @ " not in target else target
        else:
            requirement = f"{DIST_MOUNT}/{Path(self.wheel_path(default_dir)).name}[torch]"
        return "\n".join([
            "set -e",
            "# spottrain and its pinned torch in a conda env (conda: as on SkyPilot's default images)",
            f"conda env list | grep -q '^{CONDA_ENV} ' || "
            f"conda create -y -q -n {CONDA_ENV} python={shlex.quote(self.python)}",
            f"conda activate {CONDA_ENV}",
            f"pip install -q {shlex.quote(requirement)}",
            "",
        ])


def assumptions(install: SpottrainInstall, *, workdir: str | None, dist_dir: str | Path) -> str:
    """What the tasks assume, in one line (printed with every task spottrain writes)."""
    if install.source:
        how = f"spottrain from pip requirement {install.source!r}"
    elif install.wheel:
        how = f"spottrain from the wheel {install.wheel} (uploaded)"
    else:
        how = (f"spottrain from a wheel built from this checkout into {Path(install.wheel_path(dist_dir)).parent} "
               "(uploaded)")
    code = f"your code from {workdir} (workdir, uploaded)" if workdir else "no code uploaded (a built-in example)"
    return (f"the nodes need conda on their image (SkyPilot's default images have it) for a Python "
            f"{install.python} env; {how}; {code}")


def build_wheel(dest_dir: str | Path) -> Path:
    """Build spottrain's wheel from the checkout this module was imported from."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():
        raise SpottrainError("spottrain is not installed from a source checkout, so no wheel can be built here; "
                             "pass --spottrain-wheel PATH or --spottrain-source REQUIREMENT")
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                          str(dest), str(root)], capture_output=True, text=True)
    wheel = dest / f"spottrain-{_version()}-py3-none-any.whl"
    if out.returncode != 0 or not wheel.is_file():
        raise SpottrainError(f"building the spottrain wheel failed: {(out.stderr or out.stdout).strip()[-300:]}")
    return wheel


@dataclass(frozen=True, kw_only=True)
class SkyTask:
    """What goes into the managed-torchrun YAML."""

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
    workdir: str | None = None
    """The user's code directory (uploaded by SkyPilot; the command runs there)."""
    install: SpottrainInstall = field(default_factory=SpottrainInstall)
    dist_dir: str = "dist"
    """Where the default wheel is (built there at launch)."""
    max_restarts: int = 3


def task_from_plan(plan: Plan, *, name: str, command: list[str], bucket: str | None, env: dict[str, str],
                   workdir: str | None = None, install: SpottrainInstall | None = None,
                   dist_dir: str = "dist") -> SkyTask:
    """The plan's largest group becomes the task's resources (a SkyPilot task is homogeneous)."""
    if not plan.groups:
        raise InputError("the plan has no node groups")
    g = max(plan.groups, key=lambda grp: grp.count)
    return SkyTask(name=name, command=command, num_nodes=g.count, accelerators=f"{g.gpu}:{g.gpus_per_node}",
                   use_spot=g.spot, cloud=g.cloud, region=g.region, zone=g.zone, instance_type=g.instance_type,
                   bucket=bucket, env=env, workdir=workdir, install=install or SpottrainInstall(), dist_dir=dist_dir)


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


def resources_config(*, cloud: str | None, region: str | None, zone: str | None, instance_type: str | None,
                     accelerators: str | None, use_spot: bool) -> dict[str, Any]:
    """SkyPilot ``resources``. An AWS zone *ID* (``use1-az1``, the catalog's form) is left out:
    SkyPilot takes zone names, which differ per account; the region is kept and SkyPilot picks the zone."""
    resources: dict[str, Any] = {"use_spot": bool(use_spot)}
    if zone and (cloud or "").lower() == "aws" and _AWS_ZONE_ID.match(zone):
        zone = None
    for key, value in (("cloud", cloud), ("region", region), ("zone", zone), ("instance_type", instance_type),
                       ("accelerators", accelerators)):
        if value:
            resources[key] = value
    return resources


def _check_env(env: dict[str, str]) -> None:
    for key in env:
        if not _ENV_KEY.match(key):
            raise InputError(f"refusing to put {key!r} into the task: only SPOTTRAIN_* settings are written")


def _bucket_mount(bucket: str) -> dict[str, Any]:
    if not _BUCKET.match(bucket):
        raise InputError(f"bucket {bucket!r} is not a valid bucket name or URL (s3://name, gs://name)",
                         column="--bucket")
    mount: dict[str, Any] = {"mode": "MOUNT"}
    if "://" in bucket:
        mount["source"] = bucket
    else:
        mount["name"] = bucket
    return mount


def task_config(task: SkyTask) -> dict[str, Any]:
    """The managed-torchrun task as a dict in SkyPilot's task-YAML schema."""
    if not _NAME.match(task.name):
        raise InputError(f"job name {task.name!r} must start with a letter or digit and contain only "
                         "letters, digits, '.', '_' or '-' (at most 63 characters)", column="--job-id")
    if task.num_nodes < 1:
        raise InputError("num_nodes must be >= 1")
    _check_env(task.env)
    resources = resources_config(cloud=task.cloud, region=task.region, zone=task.zone,
                                 instance_type=task.instance_type, accelerators=task.accelerators,
                                 use_spot=task.use_spot)
    envs = dict(task.env)
    envs["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    config: dict[str, Any] = {"name": task.name, "num_nodes": task.num_nodes, "resources": resources}
    if task.workdir:
        config["workdir"] = task.workdir
    mounts: dict[str, Any] = dict(task.install.file_mounts(task.dist_dir))
    if task.bucket:
        mounts[CHECKPOINT_MOUNT] = _bucket_mount(task.bucket)
        envs["SPOTTRAIN_CHECKPOINT_DIR"] = f"{CHECKPOINT_MOUNT}/{task.name}"
    if mounts:
        config["file_mounts"] = mounts
    config["envs"] = envs
    config["setup"] = task.install.setup_script(task.dist_dir)
    nproc = "${SKYPILOT_NUM_GPUS_PER_NODE:-1}" if task.accelerators else "1"
    user = " ".join(shlex.quote(a) for a in _torchrun_args(task.command))
    # Each worker runs under spottrain.runtime.torchrun_guard: on the user's input error it writes
    # the one-line message to a node-local file and stops the agent, so torchrun does not restart
    # it; the script then exits 87, which SkyPilot takes for a user-code failure (no relaunch).
    config["run"] = "\n".join([
        "set -e",
        f"conda activate {CONDA_ENV}",
        'HEAD_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)',
        f'export {INPUT_ERROR_ENV}="$(mktemp -u "${{TMPDIR:-/tmp}}/spottrain-input-error.XXXXXX")"',
        "rc=0",
        f'torchrun --nnodes="$SKYPILOT_NUM_NODES" --nproc-per-node="{nproc}" --node-rank="$SKYPILOT_NODE_RANK" '
        f'--rdzv-backend=c10d --rdzv-endpoint="$HEAD_IP:${{{RDZV_PORT_ENV}:-{RDZV_PORT}}}" --rdzv-id="$SKYPILOT_TASK_ID" '
        f"--max-restarts={int(task.max_restarts)} -m spottrain.runtime.torchrun_guard {user} || rc=$?",
        f'if [ -s "${INPUT_ERROR_ENV}" ]; then',
        f'  head -n1 "${INPUT_ERROR_ENV}" >&2; rm -f "${INPUT_ERROR_ENV}"',
        "  echo 'spottrain: stopped on the input error above; not restarted' >&2",
        "  exit 87",
        "fi",
        'exit "$rc"',
        "",
    ])
    return config


def cluster_name(job_id: str, node_id: str) -> str:
    """SkyPilot cluster name of a node: lower case, letters, digits and '-' (SkyPilot's rule)."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"{job_id}-{node_id}".lower()).strip("-")
    if not name or not name[0].isalpha():
        name = "st-" + name
    name = name[:63].rstrip("-")
    if not _CLUSTER.match(name):
        raise InputError(f"cannot make a SkyPilot cluster name from job id {job_id!r}", column="--job-id")
    return name


@dataclass(frozen=True, kw_only=True)
class NodeTask:
    """One node of an elastic job: what :func:`node_task_config` writes."""

    cluster: str
    node_id: str
    command: list[str]
    cloud: str | None
    region: str | None
    zone: str | None
    instance_type: str | None
    accelerators: str | None
    use_spot: bool
    env: dict[str, str]
    """``SPOTTRAIN_*`` settings (the controller address and the node id included)."""
    workdir: str | None = None
    bucket: str | None = None
    install: SpottrainInstall = field(default_factory=SpottrainInstall)
    dist_dir: str = "dist"


def node_task_config(task: NodeTask) -> dict[str, Any]:
    """A one-node SkyPilot task whose worker joins the elastic job (elastic mode)."""
    if not task.command:
        raise InputError("no command to run: pass --example NAME or -- python train.py ...")
    _check_env(task.env)
    envs = dict(task.env)
    if task.use_spot and (task.cloud or "").lower() in ("aws", "gcp"):
        # the worker polls the metadata service for the 2-minute / 30-second notice
        envs.setdefault("SPOTTRAIN_NOTICE_SOURCE", task.cloud.lower())  # type: ignore[union-attr]
    config: dict[str, Any] = {"name": task.cluster, "num_nodes": 1,
                              "resources": resources_config(cloud=task.cloud, region=task.region, zone=task.zone,
                                                            instance_type=task.instance_type,
                                                            accelerators=task.accelerators, use_spot=task.use_spot)}
    if task.workdir:
        config["workdir"] = task.workdir
    mounts: dict[str, Any] = dict(task.install.file_mounts(task.dist_dir))
    if task.bucket:
        mounts[CHECKPOINT_MOUNT] = _bucket_mount(task.bucket)
        envs["SPOTTRAIN_CHECKPOINT_DIR"] = f"{CHECKPOINT_MOUNT}/{envs.get('SPOTTRAIN_JOB_ID', task.cluster)}"
    if mounts:
        config["file_mounts"] = mounts
    config["envs"] = envs
    config["setup"] = task.install.setup_script(task.dist_dir)
    config["run"] = "\n".join(["set -e", f"conda activate {CONDA_ENV}",
                               " ".join(shlex.quote(a) for a in task.command), ""])
    return config


def validate_with_skypilot(config: dict[str, Any]) -> str:
    """Validate a task dict with SkyPilot's own task and resources schemas; returns SkyPilot's
    version. Raises ``ImportError`` when SkyPilot is not installed, :class:`InputError` when invalid."""
    import sky
    from sky.utils import common_utils, schemas

    try:
        common_utils.validate_schema(config, schemas.get_task_schema(), "Invalid task YAML: ")
        common_utils.validate_schema(config.get("resources", {}), schemas.get_resources_schema(),
                                     "Invalid resources YAML: ")
    except Exception as exc:  # noqa: BLE001 - SkyPilot's own error class varies by version
        raise InputError(f"SkyPilot refuses task {config.get('name')!r}: {str(exc).splitlines()[0]}") from None
    return str(sky.__version__)


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the scripts) as ``|`` blocks, as a person writes a task YAML."""


_Dumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def to_yaml(config: dict[str, Any]) -> str:
    return yaml.dump(config, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def write_task(task: SkyTask, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write the managed-torchrun YAML; refuse to replace an existing file unless ``overwrite``."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise InputError("file exists; pass --force to overwrite it", file=str(path))
    text = "# SkyPilot managed-job task written by `spottrain run --backend skypilot --skypilot-mode managed-torchrun`\n"
    text += to_yaml(task_config(task))
    path.write_text(text)
    return path


def launch_command(path: str | Path, name: str) -> list[str]:
    return ["sky", "jobs", "launch", "--yes", "--name", name, str(path)]


def launch(path: str | Path, name: str) -> int:
    """Run ``sky jobs launch``; raises when SkyPilot is not installed."""
    if shutil.which("sky") is None:
        raise SpottrainError("SkyPilot is not installed (pip install 'spottrain[skypilot]'); the task YAML was "
                             f"written to {path}; launch it with: "
                             f"{' '.join(shlex.quote(a) for a in launch_command(path, name))}")
    return subprocess.call(launch_command(path, name))
