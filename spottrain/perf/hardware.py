"""Device figures the performance model needs, looked up by GPU name or instance type.

Peak figures come from :func:`spottrain.catalog.gpu_spec`. A few GPUs measured in the shipped
benchmark tables are not cloud offers and are not in the catalog (workstation cards, PCIe
variants of data-centre parts); their datasheet figures live in ``_EXTRA`` below.

Per-node network bandwidth defaults to what a typical single-GPU instance of that GPU gets
(the catalog's ``network_gbps_for_gpu`` when it has one).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from spottrain.errors import UnknownNameError

# name: (architecture, fp32, fp16 tensor dense, tf32 dense or None, memory GB/s, pcie GB/s, nvlink GB/s or None)
_EXTRA: dict[str, tuple[str, float, float, float | None, float, float, float | None]] = {
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
    "A100-PCIe": ("Ampere", 19.5, 312.0, 156.0, 1555.0, 32.0, None),
    "A100-80GB-PCIe": ("Ampere", 19.5, 312.0, 156.0, 1935.0, 32.0, None),
    # https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
    "H100-PCIe": ("Hopper", 51.0, 756.0, 378.0, 2000.0, 64.0, None),
    # https://resources.nvidia.com/en-us-grace-cpu/grace-hopper-superchip (96 GB HBM3)
    "GH200": ("Hopper", 67.0, 989.5, 494.5, 4000.0, 450.0, 900.0),
    # https://www.nvidia.com/content/dam/en-zz/Solutions/design-visualization/quadro-product-literature/quadro-rtx-8000-us-nvidia-946977-r1-web.pdf
    "RTX8000": ("Turing", 16.3, 130.5, None, 672.0, 16.0, None),
    # https://images.nvidia.com/aem-dam/en-zz/Solutions/geforce/ampere/pdf/NVIDIA-ampere-GA102-GPU-Architecture-Whitepaper-V1.pdf
    "RTX3090": ("Ampere", 35.6, 71.0, 35.6, 936.0, 32.0, None),
    "RTXA6000": ("Ampere", 38.7, 154.8, 77.4, 768.0, 32.0, None),
    # https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf
    "RTX4090": ("Ada Lovelace", 82.6, 165.2, 82.6, 1008.0, 32.0, None),
    "RTX6000-Ada": ("Ada Lovelace", 91.1, 364.2, 182.1, 960.0, 32.0, None),
    # More boards that appear in published training benchmarks (dense rates; datasheets that print
    # sparse tensor rates are halved). NVLink bridges that join only pairs of boards are left out
    # (None): a ring over 4 or 8 such boards runs at PCIe speed.
    # https://images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf
    "A40": ("Ampere", 37.4, 149.7, 74.8, 696.0, 32.0, None),
    # https://www.nvidia.com/content/dam/en-zz/Solutions/data-center/products/a30-gpu/pdf/a30-datasheet.pdf
    "A30": ("Ampere", 10.3, 165.0, 82.0, 933.0, 32.0, None),
    # https://www.nvidia.com/content/dam/en-zz/Solutions/design-visualization/rtx-a5000/nvidia-rtx-a5000-datasheet.pdf
    # (tensor 222.2 sparse; TF32 at half the FP16 rate on GA102)
    "RTXA5000": ("Ampere", 27.8, 111.1, 55.6, 768.0, 32.0, None),
    # https://www.nvidia.com/content/dam/en-zz/Solutions/gtcs21/rtx-a4000/nvidia-rtx-a4000-datasheet.pdf (tensor 153.4 sparse)
    "RTXA4000": ("Ampere", 19.2, 76.7, 38.4, 448.0, 32.0, None),
    # https://images.nvidia.com/aem-dam/en-zz/Solutions/geforce/ampere/pdf/NVIDIA-ampere-GA102-GPU-Architecture-Whitepaper-V1.pdf
    # (GeForce: FP16 tensor with FP32 accumulate, as mixed-precision training uses, runs at half rate)
    "RTX3080": ("Ampere", 29.8, 59.5, 29.8, 760.0, 32.0, None),
    # https://images.nvidia.com/aem-dam/en-zz/Solutions/design-visualization/technologies/turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf
    # (reference boost clocks; GeForce FP16 tensor with FP32 accumulate at half rate; TITAN and Quadro at full rate)
    "RTX2080Ti": ("Turing", 13.4, 53.8, None, 616.0, 16.0, None),
    "RTX2080": ("Turing", 10.1, 40.3, None, 448.0, 16.0, None),
    "RTX2070": ("Turing", 7.5, 29.9, None, 448.0, 16.0, None),
    "TitanRTX": ("Turing", 16.3, 130.5, None, 672.0, 16.0, None),
    "RTX6000": ("Turing", 16.3, 130.5, None, 672.0, 16.0, None),
    # https://www.nvidia.com/en-us/titan/titan-v/ (110 TFLOPS deep-learning tensor), 652.8 GB/s HBM2
    "TitanV": ("Volta", 14.9, 110.0, None, 652.8, 16.0, None),
    # https://www.nvidia.com/en-gb/geforce/graphics-cards/geforce-gtx-1080-ti/specifications/ (Pascal GP102: no fast FP16)
    "GTX1080Ti": ("Pascal", 11.3, 11.3, None, 484.0, 16.0, None),
    # https://images.nvidia.com/content/pdf/tesla/184427-Tesla-P40-Datasheet-NV-Final-Letter-Web.pdf
    "P40": ("Pascal", 12.0, 12.0, None, 346.0, 16.0, None),
    # https://www.nvidia.com/content/dam/en-zz/Solutions/design-visualization/productspage/quadro/quadro-desktop/quadro-pascal-p4000-data-sheet-a4-nvidia-704358-r2-web.pdf
    "P4000": ("Pascal", 5.3, 5.3, None, 243.0, 16.0, None),
    # https://images.nvidia.com/content/Solutions/data-center/vgpu-L40-datasheet.pdf (FP16 362 / TF32 181 sparse)
    "L40": ("Ada Lovelace", 90.5, 181.0, 90.5, 864.0, 32.0, None),
    # https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet (H100 NVL, per GPU; sparse halved)
    "H100-NVL": ("Hopper", 60.0, 835.5, 417.5, 3938.0, 64.0, None),
}
_EXTRA_ALIASES = {
    "a100pcie": "A100-PCIe", "a10040gbpcie": "A100-PCIe", "a100pcie40gb": "A100-PCIe",
    "a10080gbpcie": "A100-80GB-PCIe", "a100pcie80gb": "A100-80GB-PCIe",
    "h100pcie": "H100-PCIe", "h10080gbpcie": "H100-PCIe", "gh200": "GH200", "gh20096gb": "GH200",
    "rtx8000": "RTX8000", "quadrortx8000": "RTX8000", "rtx3090": "RTX3090", "rtxa6000": "RTXA6000",
    "a6000": "RTXA6000", "rtx4090": "RTX4090", "rtx6000ada": "RTX6000-Ada",
    "a40": "A40", "a30": "A30", "rtxa5000": "RTXA5000", "a5000": "RTXA5000", "rtxa4000": "RTXA4000",
    "a4000": "RTXA4000", "rtx3080": "RTX3080", "rtx2080ti": "RTX2080Ti", "2080ti": "RTX2080Ti",
    "rtx2080": "RTX2080", "rtx2070": "RTX2070", "titanrtx": "TitanRTX", "quadrortx6000": "RTX6000",
    "rtx6000": "RTX6000", "titanv": "TitanV", "gtx1080ti": "GTX1080Ti", "1080ti": "GTX1080Ti", "p40": "P40",
    "p4000": "P4000", "quadrop4000": "P4000", "l40": "L40", "h100nvl": "H100-NVL",
}
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
    sustained: float = 1.0
    """Fraction of the datasheet peak that dense kernels sustain on this architecture."""
    """Default per-node network bandwidth (Gbit/s) of a typical instance with this GPU."""

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


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


_VENDOR_WORDS = re.compile(r"nvidia|geforce|tesla")
# Memory size, form factor and memory type, which several boards of one GPU share: the catalog's
# canonical name is tried without them when the full name is unknown ("H100-SXM5" -> H100).
_BOARD_WORDS = re.compile(r"\d+gb|sxm\d?|hbm\d?e?")


def _name_variants(name: str) -> list[str]:
    """``name``, then without vendor words, then also without memory / form-factor words."""
    key = _key(name)
    bare = _VENDOR_WORDS.sub("", key)
    return list(dict.fromkeys([key, bare, _BOARD_WORDS.sub("", bare)]))


def _catalog_network(gpu: str) -> float | None:
    try:
        from spottrain import catalog

        fn = getattr(catalog, "network_gbps_for_gpu", None)
        return float(fn(gpu)) if fn is not None else None
    except Exception:  # noqa: BLE001 - the catalog may not know this GPU; fall back to our default
        return None


@functools.lru_cache(maxsize=256)
def device(name: str) -> Device:
    """Device figures for a GPU name (any catalog alias) or an instance type.

    Raises :class:`~spottrain.errors.UnknownNameError` with the near miss for unknown names.
    """
    from spottrain.catalog import gpu_spec, known_gpus

    variants = _name_variants(name)
    extra = next((_EXTRA_ALIASES[v] for v in variants if v in _EXTRA_ALIASES), None) or (name if name in _EXTRA else None)
    if extra is not None:
        arch, fp32, fp16, tf32, bw, pcie, nvl = _EXTRA[extra]
        return Device(name=extra, fp32_tflops=fp32, fp16_tflops=fp16, tf32_tflops=tf32, memory_bandwidth_gbs=bw,
                      pcie_gbs=pcie, nvlink_gbs=nvl, network_gbps=_DEFAULT_NETWORK_GBPS.get(extra, _FALLBACK_NETWORK_GBPS))
    spec = None
    for v in (name, *variants[1:]):
        try:
            spec = gpu_spec(v)
            break
        except UnknownNameError:
            continue
    if spec is None:
        inst = _instance(name)
        if inst is not None:
            return inst
        raise UnknownNameError("GPU", name, [*known_gpus(), *_EXTRA])
    net = _catalog_network(spec.name) or _DEFAULT_NETWORK_GBPS.get(spec.name, _FALLBACK_NETWORK_GBPS)
    return Device(name=spec.name, fp32_tflops=spec.fp32_tflops, fp16_tflops=spec.fp16_tflops, tf32_tflops=spec.tf32_tflops,
                  memory_bandwidth_gbs=spec.memory_bandwidth_gbs, pcie_gbs=spec.pcie_gbs, nvlink_gbs=spec.nvlink_gbs,
                  network_gbps=net, sustained=_ARCH_SUSTAINED.get(spec.architecture, 1.0))


def _instance(name: str) -> Device | None:
    """An instance type (``p3.2xlarge``): its GPU with the instance's network bandwidth."""
    try:
        from spottrain.catalog import load_catalog  # type: ignore[attr-defined]

        offers = load_catalog().instance(name)
    except Exception:  # noqa: BLE001 - no catalog yet, or not an instance type
        return None
    if not offers:
        return None
    base = device(offers[0].gpu)
    return Device(**{**base.__dict__, "network_gbps": float(offers[0].network_gbps)})


@functools.lru_cache(maxsize=1024)
def instance_gpu_count(name: str) -> int | None:
    """GPUs per node of an instance type, or ``None`` when ``name`` is a GPU name."""
    try:
        from spottrain.catalog import load_catalog  # type: ignore[attr-defined]

        offers = load_catalog().instance(name)
        return int(offers[0].gpu_count) if offers else None
    except Exception:  # noqa: BLE001
        return None
