"""What a plain `spottrain plan` imports (which modules, not how long they take).

Planning must stay lean: no torch, no plotting, no simulator without refine, no runtime. The
list comes from ``python -X importtime`` of a real `spottrain plan` process.
"""

from __future__ import annotations

import subprocess
import sys

REQUEST = ["plan", "--model", "resnet50", "--batch-size", "64", "--samples", "2M", "--deadline", "4h",
           "--clouds", "aws", "--regions", "us-west-2", "--gpus", "V100", "--max-nodes", "4", "--no-baselines",
           "--json"]


def imported(*args: str) -> set[str]:
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "spottrain.cli.main", *args],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    names = set()
    for line in r.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    assert "spottrain.planner" in names  # the parse worked
    return names


def _under(names: set[str], *packages: str) -> set[str]:
    return {n for n in names if any(n == p or n.startswith(p + ".") for p in packages)}


NEVER = ("torch", "matplotlib", "pandas", "sklearn", "spottrain.runtime", "spottrain.report", "spottrain.profiler.profile",
         "spottrain.demo", "spottrain.demo_stages", "scipy.stats", "scipy.interpolate", "scipy.integrate")


def test_a_plan_without_refine_imports_no_simulator_no_torch():
    names = imported(*REQUEST, "--no-refine")
    assert not _under(names, *NEVER), sorted(_under(names, *NEVER))
    assert not _under(names, "spottrain.sim"), sorted(_under(names, "spottrain.sim"))
    # what it does need: the planner, its perf and transience models; its mixes are few enough to
    # enumerate, so no MILP solver (scipy.optimize loads only for larger searches)
    assert {"spottrain.planner.engine", "spottrain.perf.throughput", "spottrain.transience.select"} <= names
    assert not _under(names, "scipy.optimize"), sorted(_under(names, "scipy.optimize"))


def test_a_refined_plan_adds_the_array_engine_and_nothing_heavy():
    names = imported(*REQUEST)
    assert not _under(names, *NEVER), sorted(_under(names, *NEVER))
    assert {"spottrain.sim.vector", "spottrain.planner.refine"} <= names


def test_the_planner_imports_no_optimizer_until_a_milp_runs():
    # shipped lifetime fits (Weibull and bathtub) and a golden-section checkpoint-interval search:
    # scipy.optimize loads only with the MILP (formulation.MixProblem.solve)
    code = ("import sys, spottrain.planner.api, spottrain.transience.select, spottrain.transience.checkpoint_interval; "
            "print(sorted(m for m in sys.modules if m.startswith('scipy.optimize')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]"
