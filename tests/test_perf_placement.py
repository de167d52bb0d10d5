"""Round-robin variable placement over parameter servers (spottrain.perf.placement)."""

import pytest

from spottrain.perf import default_model, load_shipped, predict_throughput, Workload
from spottrain.perf.placement import known_layout, ps_load_share, round_robin_share


def test_rebuilt_layouts_match_the_measured_models():
    # Every model of the tables whose construction is rebuilt has its exact parameter and tensor counts.
    seen = set()
    for m in load_shipped(("cmdare", "transient_dl")):
        layout = known_layout(m.model)
        if layout is None:
            continue
        seen.add(m.model)
        trained = [n for n, t in layout if t]
        assert sum(trained) == m.param_count, m.model
        assert len(trained) == m.tensor_count, m.model
    assert {"t2t-res15", "t2t-res32", "t2t-shakesmall", "t2t-shakebig"} <= seen


def test_round_robin_shares():
    assert round_robin_share([(10, True)] * 4, 1) == (1.0, 1.0)
    # global step first, then a, b, c, d on servers 1, 0, 1, 0
    assert round_robin_share([(1, True), (3, True), (1, True), (3, True)], 2) == (0.75, 0.5)
    # a non-trainable variable takes its turn but carries no gradient bytes
    assert round_robin_share([(5, True), (100, False), (5, True)], 2) == (1.0, 1.0)
    for model in ("t2t-res32", "t2t-shakebig"):
        for k in (2, 3, 4, 8):
            b, t = ps_load_share(model, k)
            assert 1.0 / k - 1e-12 <= b <= 1.0 and 1.0 / k - 1e-12 <= t <= 1.0
    assert ps_load_share("t2t-res32", 2)[0] < 0.55  # ResNets split about evenly
    assert ps_load_share("t2t-shakebig", 2)[0] > 0.99  # Shake-Shake: every 3x3 kernel on one server
    assert ps_load_share("resnet50", 2) is None and ps_load_share("resnet50", 1) == (1.0, 1.0)
    # a model that only borrows the name (another size) gets the generic split
    assert ps_load_share("t2t-res32", 2, 1_857_722) == ps_load_share("t2t-res32", 2)
    assert ps_load_share("t2t-res32", 2, 5_000_000) is None


def test_second_server_helps_shake_shake_little_and_resnet_much():
    m = default_model()
    res = Workload(model="t2t-res32", batch_size=128, flops_per_sample=1.66e9, param_count=1_857_722,
                   gradient_bytes=4 * 1_857_722, tensor_count=104)
    shake = Workload(model="t2t-shakebig", batch_size=128, flops_per_sample=2.1e10, param_count=26_204_362,
                     gradient_bytes=4 * 26_204_362, tensor_count=216)
    gain = {}
    for w in (res, shake):
        x1, x2 = (predict_throughput(w, "16xV100", ps=k, sync="async", model=m).throughput for k in (1, 2))
        assert x1 <= x2 <= 2.0 * x1 * 1.001
        gain[w.model] = x2 / x1
    assert gain["t2t-res32"] > 1.5 and gain["t2t-shakebig"] < 1.15
