"""GPU names as benchmark tables spell them resolve to one device; unknown names still fail.

The device table is a view over the catalog's GPU registry: both resolve every name alike."""

import csv
from importlib import resources

import pytest

from spottrain.catalog import canonical_gpu, gpu_spec, known_gpus
from spottrain.errors import UnknownNameError
from spottrain.perf import Workload, predict_throughput
from spottrain.perf.hardware import device


@pytest.mark.parametrize(("spelling", "name"), [
    ("H100 SXM5", "H100"), ("H100-SXM5-80GB", "H100"), ("NVIDIA GeForce RTX 4090", "RTX4090"),
    ("GeForce RTX 3090", "RTX3090"), ("NVIDIA RTX A6000", "RTXA6000"), ("A100-SXM4-80GB", "A100-80GB"),
    ("A100-PCIe-40GB", "A100-PCIe"), ("H100-PCIe-80GB", "H100-PCIe"), ("RTX 6000 Ada", "RTX6000-Ada"),
    ("Quadro RTX 6000", "RTX6000"), ("V100-SXM2-32GB", "V100-32GB"), ("Tesla V100", "V100"),
    ("RTX 2080 Ti", "RTX2080Ti"), ("TITAN RTX", "TitanRTX"), ("A40", "A40"), ("L40S", "L40S"), ("L40", "L40"),
])
def test_board_spellings_resolve(spelling, name):
    assert device(spelling).name == name


def test_board_words_do_not_merge_different_boards():
    # The PCIe boards keep their own (lower) bandwidth; the 80 GB SXM board its own memory speed.
    assert device("A100-PCIe").memory_bandwidth_gbs < device("A100-80GB").memory_bandwidth_gbs
    assert device("H100-PCIe").fp32_tflops < device("H100").fp32_tflops
    assert device("RTX6000").fp32_tflops < device("RTX6000-Ada").fp32_tflops


def test_unknown_gpu_still_names_the_near_miss():
    with pytest.raises(UnknownNameError, match="V100"):
        device("V10")


@pytest.mark.parametrize("gpu", ["A40", "A30", "RTXA5000", "RTXA4000", "RTX3080", "RTX2080Ti", "RTX2080", "RTX2070",
                                 "TitanRTX", "TitanV", "GTX1080Ti", "P40", "P4000", "L40", "H100-NVL"])
def test_added_boards_predict_in_order_of_their_peaks(gpu):
    """Every added board predicts a finite speed between the slowest and fastest cloud GPUs' speeds."""
    w = Workload.from_zoo("resnet50", 64)
    x = predict_throughput(w, f"1x{gpu}").throughput
    assert predict_throughput(w, "1xK80").throughput < x < predict_throughput(w, "1xB200").throughput


def _registry_names() -> list[str]:
    """Every canonical name and alias written in the registry's data file."""
    text = resources.files("spottrain").joinpath("data", "catalog", "gpu_specs.csv").read_text()
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return [n for row in rows for n in (row["name"], *filter(None, row["aliases"].split("|")))]


SPELLINGS = ["H100 SXM5", "RTX 4090", "V100", "Tesla K80", "NVIDIA GeForce RTX 4090", "GeForce RTX 3090",
             "NVIDIA H100 80GB HBM3", "A100 80GB PCIe", "H100 NVL", "RTX 2080 Ti", "TITAN V", "Quadro P4000"]


def test_catalog_and_device_lookup_agree_on_every_alias():
    names = [*_registry_names(), *SPELLINGS]
    for spelling in names:
        for variant in (spelling, spelling.upper(), spelling.lower(), f"NVIDIA {spelling}", spelling.replace("-", " ")):
            assert canonical_gpu(variant) == device(variant).name, variant
    assert len(names) > 2 * len(known_gpus())  # aliases were read, not only the canonical names


def test_device_figures_are_the_registrys():
    for name in known_gpus():
        d, spec = device(name), gpu_spec(name)
        assert (d.fp32_tflops, d.fp16_tflops, d.tf32_tflops) == (spec.fp32_tflops, spec.fp16_tflops, spec.tf32_tflops)
        assert (d.memory_bandwidth_gbs, d.pcie_gbs, d.nvlink_gbs) == (spec.memory_bandwidth_gbs, spec.pcie_gbs,
                                                                     spec.nvlink_gbs)


def test_unknown_names_fail_alike():
    for name in ("V10", "MI300X", "p3.2xlargex"):
        with pytest.raises(UnknownNameError):
            canonical_gpu(name)
        with pytest.raises(UnknownNameError):
            device(name)


def test_an_instance_type_is_a_device_but_not_a_gpu_name():
    assert device("p3.2xlarge").name == "V100"
    with pytest.raises(UnknownNameError):
        canonical_gpu("p3.2xlarge")


def test_every_board_has_its_power_and_memory_or_says_none():
    """The registry's board power and memory technology: a vendor figure, or empty where none is published."""
    for name in known_gpus():
        spec = gpu_spec(name)
        assert spec.memory in ("HBM2", "HBM2e", "HBM3", "HBM3e", "GDDR5", "GDDR5X", "GDDR6", "GDDR6X"), name
        assert spec.tdp_w is None or 50 <= spec.tdp_w <= 1200, name
    assert gpu_spec("T4").tdp_w == 70 and gpu_spec("A10G").tdp_w is None


def test_only_gddr_boards_with_a_published_power_are_power_limited():
    import math

    # An RTX 6000 Ada feeds 364 dense fp16 TFLOPS from 300 W, a T4 65 from 70 W: both power-limited.
    assert device("RTX6000-Ada").log_power_density == pytest.approx(math.log(300 / 364.2))
    assert device("T4").log_power_density == pytest.approx(math.log(70 / 65))
    # HBM data-centre boards stay out of the rule (their training rows do not follow it, spottrain/perf/hardware.py);
    # A10G has no vendor power figure.
    for name in ("A100-PCIe", "H100-PCIe", "V100", "B200", "A10G"):
        assert math.isnan(device(name).log_power_density), name


def test_a_power_limited_board_loses_more_on_compute_bound_work():
    """The fitted power limit scales the compute term only: a GEMM-bound model (BERT-large, long
    sequences) loses more of its datasheet speed on an RTX 6000 Ada (0.8 W per TFLOPS) than a model
    that is partly bound by memory traffic, and an RTX 4090 (2.7 W per TFLOPS) loses less than it."""
    import math

    import numpy as np

    from spottrain.perf import analytical as an

    theta = np.array([an.PRIOR[n][0] for n in an.GLOBALS])
    assert an.throttle(theta, math.nan) == 0.0
    assert an.throttle(theta, math.log(10.0)) == 0.0  # above the threshold: no limit
    ada, geforce = device("RTX6000-Ada").log_power_density, device("RTX4090").log_power_density
    assert an.throttle(theta, ada) < an.throttle(theta, geforce) <= 0.0

    def speed(log_pd: float, flops: float, grad: float, ntens: int) -> float:
        g = an.GroupInput(count=1, gpn=1, log_p=math.log(364.2), log_p32=math.log(91.1), log_bw=math.log(960.0),
                          link_gbs=32.0, net_gbs=3.0, effect=0.0, log_pd=log_pd)
        return an.predict_one(theta, [g], b=64, flops=flops, grad=grad, ntens=ntens, fp16=True, ps=0, asyn=False,
                              model_effect=0.0)[0]

    gemm = (1.2e12, 4 * 335e6, 390)  # BERT-large at 384 tokens: wide layers, many FLOPs per byte moved
    narrow = (3.3e9, 4 * 11e6, 62)  # CIFAR ResNet-18: narrow layers, memory traffic matters
    loss = [speed(ada, *m) / speed(math.nan, *m) for m in (gemm, narrow)]
    assert loss[0] < loss[1] < 1.0
