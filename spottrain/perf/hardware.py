"""Device figures the performance model needs, looked up by GPU name or instance type.

A view over the GPU registry (:mod:`spottrain.catalog.gpus`): names, aliases and peak figures
come from there, benchmark boards that are not cloud offers included. This module adds what
only the performance model needs: a node's default network and the sustained fraction of peak.

Per-node network bandwidth defaults to what a typical single-GPU instance of that GPU gets
(the catalog's ``network_gbps_for_gpu`` when it has one).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

from spottrain.catalog import gpu_spec, load_catalog, network_gbps_for_gpu
from spottrain.errors import UnknownNameError

# Default per-node network (Gbit/s) of the usual single-GPU instance, used when the catalog has none:
# GCE n1-standard-8 with 1 GPU gets 16 Gbps egress; AWS p3.2xlarge "up to 10", g4dn/g5.xlarge "up to 25".
_DEFAULT_NETWORK_GBPS = {"K80": 16.0, "P100": 16.0, "V100": 10.0, "V100-32GB": 10.0, "T4": 25.0, "A10G": 25.0,
                         "L4": 16.0, "A100": 100.0, "A100-80GB": 100.0, "H100": 200.0, "H200": 200.0, "B200": 400.0}
_FALLBACK_NETWORK_GBPS = 10.0
# Per-node network (Gbit/s) of the usual multi-GPU instance of each GPU, used for "NxGPU:G" clusters
# (G > 1) named by GPU rather than instance type: AWS p3.16xlarge (8 V100) 25, p4d.24xlarge (8 A100)
# 400, p5.48xlarge (8 H100) 3200 (EFA), g4dn.12xlarge (4 T4) 50, g5.48xlarge (8 A10G) 100,
# g6.48xlarge (8 L4) 100 (https://aws.amazon.com/ec2/instance-types/ accelerated computing tables).
_MULTI_GPU_NETWORK_GBPS = {"V100": 25.0, "V100-32GB": 100.0, "A100": 400.0, "A100-80GB": 400.0, "H100": 3200.0,
                           "H200": 3200.0, "T4": 50.0, "A10G": 100.0, "L4": 100.0}
# Sustained fraction of the datasheet FP32 peak that dense kernels can reach, by architecture.
# Kepler's SMX needs dual issue from a banked register file to reach peak: cuBLAS SGEMM reaches
# about 70 % of it on GK110/GK210 (hand-tuned assembly ~77 %), against > 90 % from Maxwell on
# (S. Gray, "maxas: SGEMM", https://github.com/NervanaSystems/maxas/wiki/SGEMM; NVIDIA Kepler
# tuning guide), and K80 boards seldom hold their 875 MHz boost clock under load.
_ARCH_SUSTAINED = {"Kepler": 0.7}
# Which boards' clocks their power limit holds down by the rule of analytical.throttle: GDDR boards
# (workstation, inference and GeForce cards) boost opportunistically and their memory draws a
# large, fixed part of the board power. HBM data-centre boards hit their power limit too under a
# pure matrix-product load (our H100 and H200 at 700 W: fp16 GEMMs at 1.30-1.43 GHz of 1.98, 65-66 %
# of the datasheet's 989 TFLOPS; bench/data/gpu_power_*.csv), but training steps stay below it: on
# the H100, BERT-base, GPT-2 small, ResNet-50 and VGG-16 in fp16 train at the full 1.98 GHz drawing
# 49-91 % of the 700 W (gpu_power_train_h100.csv). Their training rows do not follow the GDDR boards'
# rule either (an A100 PCIe at 250 W trains as fast as the 400 W SXM board in Lambda's rows; the
# rule applied to them takes Lambda held out from 14 % to 30 %): their shortfall stays in the
# fitted per-GPU and per-architecture effects.
_POWER_LIMITED_MEMORY = ("GDDR",)


@dataclass(frozen=True, kw_only=True)
class Device:
    """What the throughput model uses of one GPU type."""

    name: str
    fp32_tflops: float
    fp16_tflops: float
    tf32_tflops: float | None
    memory_bandwidth_gbs: float
    pcie_gbs: float
    nvlink_gbs: float | None
    network_gbps: float
    """Default per-node network bandwidth (Gbit/s) of a typical instance with this GPU."""
    sustained: float = 1.0
    """Fraction of the datasheet peak that dense kernels sustain on this architecture."""
    log_power_density: float = math.nan
    """log(board power W / fast-path peak TFLOPS) of a power-limited (GDDR) board; NaN for the others."""

    def tensor_tflops(self, precision: str) -> float:
        """Peak of the fast path used at ``precision`` (fp16 tensor cores, TF32 for fp32 where it exists)."""
        if precision == "fp16":
            return max(self.fp16_tflops, self.fp32_tflops)
        return self.tf32_tflops if self.tf32_tflops else self.fp32_tflops


def node_network_gbps(name: str, gpus_per_node: int) -> float:
    """Default per-node network of a node with ``gpus_per_node`` GPUs ``name`` (Gbit/s).

    Instance types carry their own figure; a GPU name with several GPUs per node gets the usual
    multi-GPU instance's NIC, when it is larger than the single-GPU default.
    """
    d = device(name)
    if gpus_per_node > 1 and instance_gpu_count(name) is None:
        return max(d.network_gbps, _MULTI_GPU_NETWORK_GBPS.get(d.name, d.network_gbps))
    return d.network_gbps


@functools.lru_cache(maxsize=256)
def device(name: str) -> Device:
    """Device figures for a GPU name (any registry alias) or an instance type.

    Raises :class:`~spottrain.errors.UnknownNameError` with the near miss for unknown names.
    """
    try:
        spec = gpu_spec(name)
    except UnknownNameError:
        inst = _instance(name)
        if inst is None:
            raise
        return inst
    dev = Device(name=spec.name, fp32_tflops=spec.fp32_tflops, fp16_tflops=spec.fp16_tflops, tf32_tflops=spec.tf32_tflops,
                 memory_bandwidth_gbs=spec.memory_bandwidth_gbs, pcie_gbs=spec.pcie_gbs, nvlink_gbs=spec.nvlink_gbs,
                 network_gbps=_catalog_network(spec.name) or _DEFAULT_NETWORK_GBPS.get(spec.name, _FALLBACK_NETWORK_GBPS),
                 sustained=_ARCH_SUSTAINED.get(spec.architecture, 1.0))
    return dataclasses.replace(dev, log_power_density=_log_power_density(spec, dev))


def _log_power_density(spec, dev: Device) -> float:
    """log(W per dense fp16 tensor TFLOPS) of a GDDR board with a published board power, else NaN.

    The tensor path's peak measures what the board's power must feed at full load: an RTX 6000 Ada
    (300 W, 364 TFLOPS) has 0.8 W per TFLOPS, an RTX 4090 (450 W, 165: GeForce halves FP16 with FP32
    accumulate) 2.7, a T4 (70 W, 65) 1.1."""
    if spec.tdp_w is None or not spec.memory.startswith(_POWER_LIMITED_MEMORY):
        return math.nan
    return math.log(spec.tdp_w / dev.tensor_tflops("fp16"))


def _catalog_network(gpu: str) -> float | None:
    """The shipped catalog's typical network for ``gpu``; ``None`` when no offer has that GPU."""
    try:
        return float(network_gbps_for_gpu(gpu))
    except UnknownNameError:  # a benchmark board: no instance of it in the catalog
        return None


def _instance(name: str) -> Device | None:
    """An instance type (``p3.2xlarge``): its GPU with the instance's network bandwidth."""
    offers = _instance_offers(name)
    if not offers:
        return None
    base = device(offers[0].gpu)
    return dataclasses.replace(base, network_gbps=float(offers[0].network_gbps))


@functools.lru_cache(maxsize=1024)
def instance_gpu_count(name: str) -> int | None:
    """GPUs per node of an instance type, or ``None`` when ``name`` is a GPU name."""
    offers = _instance_offers(name)
    return int(offers[0].gpu_count) if offers else None


@functools.lru_cache(maxsize=1024)
def instance_cloud(name: str) -> str | None:
    """The cloud (``aws``, ``gcp``, ``azure``) of an instance type, or ``None`` when ``name`` is a GPU name."""
    offers = _instance_offers(name)
    return str(offers[0].cloud) if offers else None


def clouds_name(clouds) -> str | None:
    """How a cluster names the clouds its nodes are on: one cloud's name, several joined by '+'
    (sorted), ``None`` when none is said."""
    return "+".join(sorted(set(clouds))) or None


def _instance_offers(name: str) -> list:
    """The shipped catalog's offers of instance type ``name``; empty when it is not one."""
    try:
        return load_catalog().instance(name)
    except UnknownNameError:
        return []
