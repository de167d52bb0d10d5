"""simulate --alternatives: only types a policy could buy at the job's price scale, and a note
when the option reaches no policy."""

import subprocess
import sys

from sim_plans import make_plan
from spottrain.sim.markets import PRICE_SCALE, resolve_alternatives, within_price_scale


def _alt(name, price, gpu="V100"):
    return dict(cloud="aws", instance_type=name, gpu=gpu, gpus_per_node=1, region="us-west-2", zone="us-west-2b",
                price_usd_per_hour=price, on_demand_price_usd_per_hour=price * 3, network_gbps=10.0)


def test_alternatives_beyond_the_price_scale_are_not_offered():
    cheap, near, dear = _alt("g4dn.xlarge", 0.2, "T4"), _alt("p3.2xlarge-b", 1.8), _alt("p5.48xlarge", 98.0, "H100")
    plan = make_plan(nodes=4, price=0.918, extra={"alternatives": [dear, cheap, near]})
    got = [a["instance_type"] for a in resolve_alternatives(plan, None, 4)]
    assert got == ["g4dn.xlarge", "p3.2xlarge-b"]
    assert not within_price_scale(plan, dear) and within_price_scale(plan, _alt("x", PRICE_SCALE * 0.918))
    # explicitly given alternatives are the caller's choice and stay
    assert len(resolve_alternatives(plan, [dear], 4)) == 1


def test_catalog_alternatives_of_a_shipped_plan_stay_at_its_price_scale():
    plan = make_plan(nodes=4, price=0.918, zone="us-east-1a")
    top = max(g.price_usd_per_hour for g in plan.groups)
    for a in resolve_alternatives(plan, None, 4):
        assert a["price_usd_per_hour"] <= PRICE_SCALE * top


def test_option_says_when_it_has_no_effect(tmp_path):
    import dataclasses

    path = tmp_path / "plan.json"
    p = make_plan(nodes=2, hours=1.0, deadline_h=2.0, policy="deadline-margin")
    p = dataclasses.replace(p, groups=(dataclasses.replace(p.groups[0], region="us-west-2", zone="usw2-az1"),))
    p.save(path)
    run = [sys.executable, "-m", "spottrain.cli.main", "simulate", "--plan", str(path), "--runs", "5",
           "--alternatives", "3"]
    r = subprocess.run([*run, "--policy", "deadline-margin"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "--alternatives 3 had no effect" in " ".join(r.stdout.split()) and "--policy replace-cheapest" in r.stdout
    r = subprocess.run([*run, "--policy", "replace-cheapest"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "--alternatives 3: replace-cheapest" in " ".join(r.stdout.split())
