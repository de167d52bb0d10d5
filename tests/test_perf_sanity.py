"""Smoke tests of the default model on common configurations, against physically grounded bounds.

No published throughput is fitted or asserted here: each bound follows from datasheet figures
(a roofline step time a / P + b / BW can only speed up between the peak-FLOPS ratio and the
memory-bandwidth ratio of two GPUs) or from what data parallelism can do (never super-linear;
NVLink rings move 2 (n-1)/n of the gradient per GPU, small next to ResNet-50's compute).
"""

from __future__ import annotations

import pytest

from spottrain.perf import Workload, predict_throughput
from spottrain.perf.hardware import device


def _thr(model: str, batch: int, cluster: str, precision: str = "fp16", **kw) -> float:
    return predict_throughput(Workload.from_zoo(model, batch, precision=precision), cluster, **kw).throughput


def _bounds(a: str, b: str, precision: str) -> tuple[float, float]:
    """Ratio range a / b allowed by the roofline: between the peak ratio and the bandwidth ratio."""
    da, db = device(a), device(b)
    peak = da.tensor_tflops(precision) / db.tensor_tflops(precision)
    bw = da.memory_bandwidth_gbs / db.memory_bandwidth_gbs
    return min(peak, bw), max(peak, bw)


# Batches large enough that the step is GPU work: the fixed per-step overhead (launches, hooks,
# per-tensor optimizer calls) takes the same time on every GPU and pulls any ratio towards 1.
@pytest.mark.parametrize("model,batch", [("resnet50", 256), ("bert-base", 128)])
def test_a100_over_v100_amp_within_roofline_bounds(model, batch):
    lo, hi = _bounds("A100", "V100", "fp16")  # tensor 312 / 125 = 2.5, HBM 1555 / 900 = 1.7
    r = _thr(model, batch, "1xA100") / _thr(model, batch, "1xV100")
    assert 0.9 * lo <= r <= 1.1 * hi, (r, lo, hi)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("model,batch", [("resnet50", 128), ("bert-base", 32), ("gpt2-small", 8)])
def test_generations_are_ordered(model, batch, precision):
    t4, v100, a100, h100 = (_thr(model, batch, f"1x{g}", precision) for g in ("T4", "V100", "A100", "H100"))
    assert t4 < v100 < a100 < h100


def test_tf32_makes_ampere_fp32_much_faster_than_volta_fp32():
    # FP32 training in NGC / PyTorch convolutions runs on TF32 tensor cores on Ampere (156 TFLOPS
    # dense against V100's 15.7 FP32): BERT's GEMMs gain far more than the 1.24x FP32 peak ratio.
    r = _thr("bert-base", 32, "1xA100", "fp32") / _thr("bert-base", 32, "1xV100", "fp32")
    assert r > 2.0


def test_amp_faster_than_fp32_on_tensor_core_gpus():
    for g in ("T4", "V100", "A100", "H100"):
        assert _thr("bert-base", 128, f"1x{g}", "fp16") > 1.3 * _thr("bert-base", 128, f"1x{g}", "fp32")


def test_eight_gpus_over_nvlink_scale_resnet50_well():
    for g in ("V100", "A100", "H100"):
        one = _thr("resnet50", 256, f"1x{g}")
        eight = _thr("resnet50", 256, f"1x{g}:8")
        assert 6.5 * one <= eight <= 8.0 * one * 1.0001, (g, eight / one)


def test_never_superlinear_and_more_gpus_never_slower_inside_a_node():
    for model, batch in (("resnet50", 64), ("bert-base", 32), ("gpt2-small", 8)):
        for g in ("T4", "A10G", "L4", "A100"):
            rates = [_thr(model, batch, f"1x{g}:{n}" if n > 1 else f"1x{g}") for n in (1, 2, 4, 8)]
            assert all(b >= a for a, b in zip(rates, rates[1:])), (model, g, rates)
            assert all(r <= n * rates[0] * 1.0001 for r, n in zip(rates, (1, 2, 4, 8))), (model, g, rates)


def test_pcie_scales_worse_than_nvlink_for_a_large_model():
    # Same GPU silicon, gradient ring over PCIe (32 GB/s) instead of NVLink (600 GB/s).
    sxm = _thr("bert-base", 32, "1xA100:8") / _thr("bert-base", 32, "1xA100")
    pcie = _thr("bert-base", 32, "1xA100-PCIe:8") / _thr("bert-base", 32, "1xA100-PCIe")
    assert pcie < sxm


def test_multi_node_allreduce_is_network_bound_and_tcp_does_not_reach_the_nominal_rate():
    w = Workload.from_zoo("bert-base", 32, precision="fp16")
    slow = predict_throughput(w, "4xV100", network_gbps=10.0)
    tcp = predict_throughput(w, "4xV100", network_gbps=100.0)
    rdma = predict_throughput(w, "4xV100", network_gbps=400.0)
    assert slow.bottleneck == "network"
    # Over TCP a 10x faster NIC buys far less than 10x: collectives reach a few Gbit/s per node
    # (Pollux's g4dn all-reduce: ~5 of 50); an RDMA fabric (EFA, InfiniBand) does reach its line rate.
    assert slow.throughput < tcp.throughput < 2 * slow.throughput
    assert rdma.throughput > 2 * slow.throughput
    # A mixed-precision step all-reduces at least fp16 gradients (2 bytes per parameter, 219 MB):
    # 2 (n-1)/n x 219 MB over 10 Gbit/s take at least ~0.26 s per step: an upper bound.
    S = Workload.from_zoo("bert-base", 32).gradient_bytes / 2.0
    assert slow.throughput <= 4 * 32 / (1.5 * S / 1.25e9) * 1.0001


def test_lookup_table_parameters_do_not_speed_up_a_step():
    # A recommendation model (NCF, DLRM) holds most of its parameters in embedding tables: a
    # sample reads a few rows and does no arithmetic with the rest. Its arithmetic intensity is
    # that of the layers that do multiply-adds (at most F / 6 parameters: 2 FLOPs forward and 4
    # backward per weight and sample), not of its parameters per tensor. Adding 1.5 M table
    # parameters to the same FLOPs must not make one GPU's step faster, as it did when the
    # intensity followed the parameter count (Pollux's NCF on T4: 2x over at batch 32k).
    flops = 2.6e5  # Pollux's NeuMF, forward + backward per sample
    dense = Workload(model="rec-custom", batch_size=8192, flops_per_sample=flops, param_count=int(flops / 6),
                     gradient_bytes=4 * flops / 6, tensor_count=12)
    tables = Workload(model="rec-custom", batch_size=8192, flops_per_sample=flops, param_count=1_600_000,
                      gradient_bytes=4 * 1_600_000, tensor_count=12)
    for gpu in ("1xT4", "1xA100"):
        a, b = predict_throughput(dense, gpu).throughput, predict_throughput(tables, gpu).throughput
        assert b == pytest.approx(a, rel=1e-9), (gpu, a, b)
    # Where every parameter does arithmetic, wider layers still raise the intensity.
    wide = Workload(model="rec-custom", batch_size=8192, flops_per_sample=flops * 40, param_count=1_600_000,
                    gradient_bytes=4 * 1_600_000, tensor_count=12)
    narrow = Workload(model="rec-custom", batch_size=8192, flops_per_sample=flops * 40, param_count=int(flops / 6),
                      gradient_bytes=4 * flops / 6, tensor_count=12)
    assert predict_throughput(wide, "1xA100").throughput > predict_throughput(narrow, "1xA100").throughput


def _pred(model: str, batch: int, cluster: str, precision: str):
    return predict_throughput(Workload.from_zoo(model, batch, precision=precision), cluster)


def test_the_bottleneck_says_which_part_of_the_gpu_side_limits_the_step():
    # Each label is checked against what it claims: what relieves the step and what does not.
    # host: ResNet-50 at batch 1 waits on the host's per-step work; a GPU with 7.9x the fp16 peak
    # (H100 against V100) hardly speeds it up.
    one = _pred("resnet50", 1, "1xH100", "fp16")
    assert one.bottleneck == "host"
    assert one.throughput < 1.5 * _pred("resnet50", 1, "1xV100", "fp16").throughput
    assert _pred("resnet50", 64, "1xH100", "fp16").throughput > 10 * one.throughput  # a larger batch does
    # input: ImageNet decoding on the host caps ResNet-50 near 3,000 images/s per GPU on a B200
    # (2.3x an H100's fp16 peak): the B200 gains little over the H100.
    b200 = _pred("resnet50", 256, "1xB200", "fp16")
    assert b200.bottleneck == "input"
    assert b200.throughput < 1.3 * _pred("resnet50", 256, "1xH100", "fp16").throughput
    # memory: a CIFAR ResNet's narrow layers on an L4 (121 fp16 TFLOPS, 300 GB/s) against a T4
    # (65 TFLOPS, 320 GB/s): 1.9x the FLOPS buys far less than 1.9x.
    l4 = _pred("resnet32", 1024, "1xL4", "fp16")
    assert l4.bottleneck == "memory"
    assert l4.throughput < 1.4 * _pred("resnet32", 1024, "1xT4", "fp16").throughput
    # compute: BERT-large's wide GEMMs in fp32 on a V100 (no tensor cores for fp32).
    assert _pred("bert-large", 32, "1xV100", "fp32").bottleneck == "compute"


def test_the_scalar_and_vectorised_paths_name_the_same_gpu_side_bottleneck():
    from spottrain.perf import default_model
    from spottrain.perf.throughput import _Query
    from spottrain.types import ClusterSpec

    m = default_model()
    seen = set()
    for model, batch, prec in (("resnet50", 1, "fp16"), ("resnet50", 256, "fp16"), ("resnet32", 1024, "fp16"),
                               ("bert-large", 32, "fp32")):
        w = Workload.from_zoo(model, batch, precision=prec)
        for cluster in ("1xB200", "1xL4", "1xV100", "1xH100+1xT4", "2xL4:4"):
            q = _Query(model=w.model, batch_size=batch, cluster=ClusterSpec.parse(cluster), ps=0, sync="sync",
                       flops=w.flops_per_sample, grad=w.gradient_bytes, precision=prec, tensors=w.tensor_count)
            fast, vec = m.predict_one(q), m.predict([q], warn=False)[0]
            assert fast.bottleneck == vec.bottleneck, (model, batch, cluster)
            seen.add(fast.bottleneck)
    assert {"host", "input", "memory", "compute"} <= seen
