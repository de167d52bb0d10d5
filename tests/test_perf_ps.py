"""Parameter-server model: what more servers and a busy server can and cannot do."""

from __future__ import annotations

import numpy as np

from spottrain.perf import Workload, default_model, predict_throughput
from spottrain.perf import analytical as an


def _ps_bound_workload() -> Workload:
    # ResNet-32 (104 variables, 1.9 M parameters) on V100s: the case where one PS saturates.
    return Workload(model="t2t-res32", batch_size=128, flops_per_sample=1.66e9, param_count=1_857_722,
                    gradient_bytes=4 * 1_857_722, tensor_count=104)


def test_more_servers_help_at_most_in_proportion():
    m = default_model()
    w = _ps_bound_workload()
    xs = [predict_throughput(w, "32xV100", ps=k, sync="async", model=m).throughput for k in (1, 2, 4, 8)]
    assert all(b >= a for a, b in zip(xs, xs[1:]))  # never slower with more servers
    for k, x in zip((2, 4, 8), xs[1:]):
        assert x <= k * xs[0] * 1.001, (k, x / xs[0])  # k servers divide the work by k at best


def test_servers_time_is_not_hidden_behind_compute():
    # A worker overlaps its own transfers with compute, but the servers' response time R is part of
    # every cycle: with one worker and a slow server, the cycle is at least compute + server demand.
    g = dict(zip(an.GLOBALS, default_model().theta_))
    theta = np.array([g[n] for n in an.GLOBALS])
    slow_ps = theta.copy()
    slow_ps[an.G_INDEX["log_ps_t"]] += np.log(50.0)  # per-tensor server cost x50
    grp = [an.GroupInput(count=1, gpn=1, log_p=np.log(15.7), log_p32=np.log(15.7), log_bw=np.log(900.0),
                         link_gbs=150.0, net_gbs=2.0, effect=0.0)]
    kw = dict(b=128, flops=1.66e9, grad=4 * 1_857_722.0, ntens=104.0, fp16=False, ps=1, asyn=True, model_effect=0.0)
    fast_x, fast_parts, _ = an.predict_one(theta, grp, **kw)
    slow_x, slow_parts, _ = an.predict_one(slow_ps, grp, **kw)
    extra_demand = 49.0 * np.exp(g["log_ps_t"]) * 104.0
    cycle_fast, cycle_slow = 128 / fast_x, 128 / slow_x
    assert cycle_slow - cycle_fast >= 0.999 * extra_demand  # all of the extra server time shows
    assert slow_parts["t_ps"] >= extra_demand


def test_fixed_cost_per_update_is_not_divided_by_servers():
    # Every server takes part in every worker step: its fixed cost per update caps the update rate
    # whatever the number of servers.
    m = default_model()
    f = float(np.exp(dict(zip(an.GLOBALS, m.theta_))["log_ps_f"]))
    tiny = Workload(model="tiny-mlp", batch_size=32, flops_per_sample=1e6, param_count=1000, gradient_bytes=4000,
                    tensor_count=2)
    for k in (1, 2, 8):
        x = predict_throughput(tiny, "256xV100", ps=k, sync="async", model=m).throughput
        assert x <= 32 / f * 1.0001
