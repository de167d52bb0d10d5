"""The end-to-end demo: every stage of spottrain on embedded defaults, on this machine.

Stages, each calling the real library of its part:

1. **profile** a built-in small model (ResNet-32 on CIFAR-10 shapes) on this CPU;
2. **predict** its throughput on every GPU type of the shipped catalog;
3. **transience**: fit lifetime models on the shipped revocation traces;
4. **plan** the cheapest cluster that finishes the paper's ResNet-32 training by a deadline at
   95% confidence, beside the planner's baselines;
5. **simulate** the plan under each recovery policy (node lifetimes from the laws fitted on
   the real traces);
6. **run** a small model on a local 4-worker elastic cluster, injecting the revocations of one
   simulated run (placed at the same share of progress, see
   :func:`spottrain.demo_stages.revocation_schedule`), and compare what happened with what
   was predicted.

A stage whose input is missing is recorded as ``not available`` and one that fails as
``failed``, each with the reason; nothing is made up in its place. :func:`run_demo` returns plain data (JSON-ready), from
which :func:`spottrain.report.demo_report.build_demo_report` renders the HTML report.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from spottrain.demo_stages import STAGES, StageContext, StageUnavailable

STATUS_OK = "ok"
STATUS_UNAVAILABLE = "not available"
STATUS_FAILED = "failed"


@dataclass(frozen=True, kw_only=True)
class DemoConfig:
    """What the demo runs. Defaults finish in a few minutes on 2 CPU cores."""

    model: str = "resnet32"
    """Zoo model that is profiled and planned (the CM-DARE / transient-dl study's model)."""
    profile_batch_size: int = 32
    """Batch size of the CPU profile (small: the profile should take seconds)."""
    plan_batch_size: int = 128
    """Per-GPU batch size of the planned cloud job (the paper's ResNet-32 recipe)."""
    profile_iterations: int = 10
    epochs: float = 160.0
    """Epochs of CIFAR-10 the planned job trains (64k steps x 128 / 50k, as in the paper)."""
    deadline_s: float = 30 * 60.0
    """Deadline of the planned cloud job: tight enough that the cheapest plan is a multi-node cluster."""
    confidence: float = 0.95
    max_nodes: int = 16
    """Largest cluster the planner considers (keeps the search to about a second)."""
    sim_runs: int = 300
    workers: int = 4
    steps: int = 400
    """Steps of the local elastic training run (about 0.05 s each with 4 workers on 2 cores)."""
    example: str = "cifar-resnet"
    """Built-in job of the local run (``spottrain run --example``)."""
    max_injected_revocations: int = 3
    """Cap on revocations replayed into the local run, so that it stays short."""
    seed: int = 0
    quick: bool = False

    def effective(self) -> "DemoConfig":
        """``quick`` shrinks the expensive knobs (used by tests and ``--quick``)."""
        if not self.quick:
            return self

        # the simulation keeps its runs (300 take under a second): an outage of a short run's young
        # group counts every node, so 60 runs' mean revocation count erred by a third
        return replace(self, profile_iterations=min(self.profile_iterations, 3),
                       steps=min(self.steps, 100), profile_batch_size=min(self.profile_batch_size, 16))


@dataclass(kw_only=True)
class StageResult:
    key: str
    title: str
    status: str = STATUS_OK
    reason: str = ""
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)


ProgressFn = Callable[[str, str, StageResult | None], None]
"""``progress(key, title, result)``: called with ``result=None`` when a stage starts and with
its result when it ends."""


def run_demo(config: DemoConfig | None = None, *, progress: ProgressFn | None = None,
             detail: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every stage; return ``{"config": ..., "stages": {key: result-dict}, "wall_s": ...}``.

    >>> result = run_demo(DemoConfig(quick=True))       # doctest: +SKIP
    >>> result["stages"]["plan"]["status"]               # doctest: +SKIP
    'ok'
    """
    config = (config or DemoConfig()).effective()
    ctx = StageContext(config=config)
    if detail is not None:
        ctx.objects["detail"] = detail  # finer progress inside long stages ("step 40/150")
    t0 = time.perf_counter()
    results: dict[str, StageResult] = {}
    for key, title, fn in STAGES:
        res = StageResult(key=key, title=title)
        if progress:
            progress(key, title, None)
        start = time.perf_counter()
        try:
            res.data = fn(ctx) or {}
        except StageUnavailable as exc:
            res.status, res.reason = STATUS_UNAVAILABLE, str(exc)
        except Exception as exc:  # noqa: BLE001 - a failing part must not stop the other stages
            res.status = STATUS_FAILED
            res.reason = f"{type(exc).__name__}: {exc}"
            res.data = {"traceback": traceback.format_exc(limit=6)}
        res.seconds = time.perf_counter() - start
        results[key] = res
        ctx.results[key] = res
        if progress:
            progress(key, title, res)
    return {
        "kind": "spottrain.demo",
        "config": asdict(config),
        "stages": {k: asdict(v) for k, v in results.items()},
        "wall_s": time.perf_counter() - t0,
    }

