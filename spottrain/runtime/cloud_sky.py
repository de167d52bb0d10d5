"""The SkyPilot provider: every node of an elastic job is a one-node SkyPilot cluster.

Why one cluster per node, not one per plan group: SkyPilot provisions, recovers and tears down
a cluster as a unit; one node of a multi-node cluster can be neither given back nor replaced
alone (a preempted node leaves the whole cluster to be relaunched, the restart-everything
behaviour this runtime exists to avoid). So a plan group of ``count`` nodes becomes ``count``
clusters with the group's resources, named ``<job>-<group>-n<k>``, and a policy's decisions
map onto single calls of SkyPilot's Python API (skypilot 0.14: every call returns a request id,
``sky.get`` waits for its result):

- request a node: ``sky.launch(task, cluster_name=..., down=True)`` (``down``: the cluster is
  torn down when its worker exits, so a finished or fenced worker stops costing money);
- release a node: ``sky.down(cluster_name)``;
- switch to on-demand: launches of the on-demand group, then ``sky.down`` of the spot nodes
  once a replacement has joined (the fleet controller orders them);
- checkpoint now: no SkyPilot call (the controller's store tells the workers);
- a node's state: ``sky.status(cluster_names=[...], refresh=AUTO)`` and ``sky.job_status``.

Launches and downs run in background threads: a launch takes minutes and must not stall the
controller. ``api`` is the ``sky`` module by default; :class:`RecordingSky` stands in for it in
``--dry-run`` (it records the calls and launches nothing).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from spottrain.runtime.cloud import LOST, RUNNING, STARTING, SUCCEEDED, NodeGroup
from spottrain.runtime.skypilot import cluster_name

TaskFor = Callable[[NodeGroup, str, str, Mapping[str, str]], dict[str, Any]]
"""``(group, node_id, cluster, env) -> task config`` (see :func:`~spottrain.runtime.skypilot.node_task_config`)."""


class RecordingSky:
    """Records SkyPilot API calls in the form they would be made; launches nothing."""

    class Task:
        def __init__(self, config: dict[str, Any]) -> None:
            self.config = config

        @classmethod
        def from_yaml_config(cls, config: dict[str, Any]) -> "RecordingSky.Task":
            return cls(config)

    def __init__(self) -> None:
        self.calls: list[str] = []

    def launch(self, task: Any, *, cluster_name: str, down: bool = False, **kw: Any) -> str:
        self.calls.append(f"sky.launch(task, cluster_name={cluster_name!r}, down={down!r})"
                          f"   # task = sky.Task.from_yaml_config(<{task.config['name']}.yaml>)")
        return "request"

    def down(self, cluster: str) -> str:
        self.calls.append(f"sky.down({cluster!r})")
        return "request"

    def get(self, request: Any) -> Any:
        return (None, None)


class SkyPilotProvider:
    """A :class:`~spottrain.runtime.cloud.Provider` over SkyPilot clusters (one per node)."""

    def __init__(self, *, job_id: str, task_for: TaskFor, api: Any = None, status_every_s: float = 30.0,
                 max_parallel_launches: int = 8) -> None:
        if api is None:
            import sky as api  # noqa: PLC0415 - optional dependency, imported only to launch
        self.api = api
        self.job_id = job_id
        self.task_for = task_for
        self.status_every_s = status_every_s
        self._pool = ThreadPoolExecutor(max_workers=max_parallel_launches, thread_name_prefix="sky")
        self._lock = threading.Lock()
        self.clusters: dict[str, str] = {}
        """node id -> cluster name."""
        self._state: dict[str, str] = {}
        self._job: dict[str, int | None] = {}
        self._down: set[str] = set()
        self._last_status = -1e18
        self.errors: dict[str, str] = {}
        """node id -> why its launch failed (no capacity, quota ...)."""

    # ------------------------------------------------------------------ Provider
    def launch(self, group: NodeGroup, node_ids: Sequence[str], env: Mapping[str, str]) -> None:
        for node_id in node_ids:
            cluster = cluster_name(self.job_id, node_id)
            config = self.task_for(group, node_id, cluster, {**env, "SPOTTRAIN_WORKER_ID": node_id})
            with self._lock:
                self.clusters[node_id] = cluster
                self._state[node_id] = STARTING
            self._pool.submit(self._launch_one, node_id, cluster, config)

    def _launch_one(self, node_id: str, cluster: str, config: dict[str, Any]) -> None:
        try:
            task = self.api.Task.from_yaml_config(config)
            job_id, _handle = self.api.get(self.api.launch(task, cluster_name=cluster, down=True))
        except Exception as exc:  # noqa: BLE001 - no capacity, quota, credentials: the node is lost
            with self._lock:
                self.errors[node_id] = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
                self._state[node_id] = LOST
            return
        with self._lock:
            self._job[node_id] = job_id
            if self._state.get(node_id) == STARTING:
                self._state[node_id] = RUNNING

    def terminate(self, node_id: str) -> None:
        with self._lock:
            cluster = self.clusters.get(node_id)
            if cluster is None or cluster in self._down:
                return
            self._down.add(cluster)
            self._state[node_id] = LOST
        self._pool.submit(self._down_one, cluster)

    def _down_one(self, cluster: str) -> None:
        try:
            self.api.get(self.api.down(cluster))
        except Exception:  # noqa: BLE001 - already gone
            pass

    def poll(self, now_s: float | None = None) -> dict[str, str]:
        import time

        now_s = time.monotonic() if now_s is None else now_s
        if now_s - self._last_status >= self.status_every_s:
            self._last_status = now_s
            self._refresh()
        with self._lock:
            return dict(self._state)

    def _refresh(self) -> None:
        """Clusters SkyPilot no longer reports UP (preempted, torn down) are lost; a worker whose
        job succeeded is done; a failed or cancelled job is lost."""
        with self._lock:
            running = {n: c for n, c in self.clusters.items() if self._state.get(n) == RUNNING}
        if not running:
            return
        try:
            records = self.api.get(self.api.status(cluster_names=list(running.values()),
                                                   refresh=self.api.StatusRefreshMode.AUTO))
        except Exception:  # noqa: BLE001 - the API server is unreachable: keep the last states
            return
        up = {_field(r, "name"): _value(_field(r, "status")) for r in records}
        for node_id, cluster in running.items():
            status = up.get(cluster)
            new = RUNNING
            if status != "UP":  # gone, or INIT: a preempted node leaves its cluster INIT
                new = LOST
            else:
                job = self._job.get(node_id)
                if job is not None:
                    try:
                        js = self.api.get(self.api.job_status(cluster, [job])).get(job)
                    except Exception:  # noqa: BLE001
                        js = None
                    text = _value(js) or ""
                    if text == "SUCCEEDED":
                        new = SUCCEEDED
                    elif text.startswith("FAILED") or text == "CANCELLED":
                        new = LOST
            with self._lock:
                if self._state.get(node_id) == RUNNING:
                    self._state[node_id] = new

    def shutdown(self) -> None:
        with self._lock:
            held = [n for n, c in self.clusters.items() if c not in self._down]
        for node_id in held:
            self.terminate(node_id)
        self._pool.shutdown(wait=True)


def _field(record: Any, name: str) -> Any:
    return record.get(name) if isinstance(record, dict) else getattr(record, name, None)


def _value(status: Any) -> str | None:
    """``ClusterStatus.UP`` / ``JobStatus.SUCCEEDED`` (or their text) -> ``"UP"`` / ``"SUCCEEDED"``."""
    if status is None:
        return None
    return str(getattr(status, "value", status)).rsplit(".", 1)[-1]
