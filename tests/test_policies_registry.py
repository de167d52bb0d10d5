"""Every registered policy is available to `simulate` and to `run`, without importing the simulator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim_plans import make_plan

LITERATURE = {"checkpoint-restart", "skypilot-managed", "on-demand", "deepvm-anchor", "replan-on-price"}


def test_the_registry_is_complete_before_the_simulator_is_imported() -> None:
    code = """
import json, sys
from spottrain.policies import POLICIES
before = {name: f"{f.__module__}.{f.__qualname__}" for name, f in POLICIES.items()}
sim_loaded = "spottrain.sim" in sys.modules
import spottrain.sim.plan_transforms as b
after = {name: f"{f.__module__}.{f.__qualname__}" for name, f in POLICIES.items()}
print(json.dumps({"before": before, "after": after, "sim_loaded": sim_loaded, "baselines": list(b.BASELINES)}))
"""
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                    timeout=120).stdout)
    assert not out["sim_loaded"]
    assert LITERATURE <= set(out["before"]) and set(out["baselines"]) <= set(out["before"])
    # importing the simulator adds nothing and replaces nothing: one set of policy functions
    assert out["after"] == out["before"]
    assert out["before"]["checkpoint-restart"] == "spottrain.literature_policies.checkpoint_restart"


def _plan_file(tmp: Path) -> Path:
    path = tmp / "plan.json"
    make_plan(nodes=2, zone="use1-az1", region="us-east-1", deadline_h=None, interval_s=900.0).save(path, overwrite=True)
    return path


def _run(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp: Path, *args: str) -> tuple[int, str, str]:
    """``spottrain run ...`` in this process (the same entry point as the console script)."""
    from spottrain.cli.main import main

    monkeypatch.chdir(tmp)
    code = 0
    try:
        main(["run", "--backend", "skypilot", "--plan", str(_plan_file(tmp)), "--dry-run", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_run_accepts_every_registered_policy(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    from spottrain.policies import POLICIES

    for policy in sorted(POLICIES):
        code, out, err = _run(capsys, monkeypatch, tmp_path, "--json", "--policy", policy, "--example", "mlp")
        assert code == 0, (policy, err)
        assert json.loads(out)["policy"] == policy


def test_an_unknown_policy_names_the_near_miss_before_anything_starts(capsys: pytest.CaptureFixture[str],
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    code, out, err = _run(capsys, monkeypatch, tmp_path, "--policy", "checkpoint-restar", "--example", "mlp")
    assert code == 2 and "Traceback" not in err
    assert "unknown policy 'checkpoint-restar': did you mean checkpoint-restart?" in err
    assert out == ""  # no task printed, nothing launched


def test_run_starts_the_clusters_the_policy_assumes(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """on-demand buys the plan's nodes on-demand, deepvm-anchor adds an on-demand anchor node:
    the same plan transforms the simulator applies."""
    def spot(policy: str) -> list[bool]:
        code, out, err = _run(capsys, monkeypatch, tmp_path, "--json", "--policy", policy, "--example", "mlp")
        assert code == 0, err
        return sorted(t["resources"]["use_spot"] for t in json.loads(out)["tasks"].values())

    assert spot("replace-same") == [True, True]
    assert spot("on-demand") == [False, False]
    assert spot("deepvm-anchor") == [False, True, True]
