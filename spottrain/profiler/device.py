"""What device a profile ran on, and its peak FLOPS.

GPU peaks come from :func:`spottrain.catalog.gpu_spec` (datasheet figures): fp32 for
``--precision fp32`` and dense fp16 tensor-core for ``amp``. A CPU has no catalog entry; its
fp32 peak is estimated as ``threads x clock x FLOPs/cycle/core``, where FLOPs/cycle follows
the widest vector FMA the CPU advertises (AVX-512: 2 FMA units x 16 lanes x 2 = 64, but 32 on
AMD Zen 4 whose 512-bit FMAs use two 256-bit pipes; AVX2+FMA: 2 x 8 x 2 = 32; AVX: 16;
otherwise SSE: 8). The estimate is labelled as such in the profile.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

import torch

from spottrain import __version__
from spottrain.errors import SpottrainError


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if ":" in line:
                key, value = (s.strip() for s in line.split(":", 1))
                info.setdefault(key, value)
    except OSError:
        pass
    return info


def _cpu_clock_ghz(info: dict[str, str]) -> float | None:
    try:
        khz = int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text().strip())
        return khz / 1e6
    except (OSError, ValueError):
        pass
    for key in ("cpu MHz",):
        if key in info:
            try:
                return float(info[key]) / 1e3
            except ValueError:
                pass
    match = re.search(r"@\s*([\d.]+)\s*GHz", info.get("model name", ""))
    return float(match.group(1)) if match else None


def _flops_per_cycle(flags: set[str], vendor: str = "") -> tuple[int, str]:
    if "avx512f" in flags:
        if vendor == "AuthenticAMD":
            # Zen 4 executes 512-bit FMAs on two 256-bit pipes: no gain over AVX2 in peak.
            return 32, "AVX-512 on 256-bit FMA pipes (AMD)"
        return 64, "AVX-512 FMA"
    if "avx2" in flags and "fma" in flags:
        return 32, "AVX2 + FMA"
    if "avx" in flags:
        return 16, "AVX"
    return 8, "SSE"


def cpu_device_info() -> dict[str, Any]:
    """CPU name, threads torch uses and an estimated fp32 peak (TFLOPS)."""
    info = _cpuinfo()
    name = info.get("model name") or platform.processor() or platform.machine() or "cpu"
    threads = torch.get_num_threads()
    ghz = _cpu_clock_ghz(info)
    fpc, isa = _flops_per_cycle(set(info.get("flags", "").split()), info.get("vendor_id", ""))
    out: dict[str, Any] = {
        "kind": "cpu",
        "name": name,
        "count": 1,
        "threads": threads,
        "logical_cpus": os.cpu_count(),
        "clock_ghz": ghz,
    }
    if ghz:
        out["peak_tflops"] = threads * ghz * fpc / 1e3
        out["peak_source"] = f"estimate: {threads} threads x {ghz:.2f} GHz x {fpc} FLOP/cycle ({isa}), fp32"
    else:
        out["peak_tflops"] = None
        out["peak_source"] = "unknown: CPU clock not readable"
    return out


def catalog_gpu_spec(device_name: str) -> Any | None:
    """The catalog's GpuSpec for a CUDA device name such as ``NVIDIA H100 80GB HBM3``, or None."""
    try:
        from spottrain.catalog import gpu_spec
    except ImportError:
        return None

    stripped = re.sub(r"^(NVIDIA|Tesla|GeForce)\s+", "", device_name.strip(), flags=re.I)
    candidates = [device_name, stripped]
    tokens = stripped.replace("-", " ").split()
    # 'A100-SXM4-80GB' -> 'A100 80GB', then 'A100'; 'H100 80GB HBM3' -> 'H100'.
    size = next((t for t in tokens if re.fullmatch(r"\d+GB", t, flags=re.I)), None)
    if tokens:
        if size:
            candidates.append(f"{tokens[0]}-{size}")
        candidates.append(tokens[0])
    for candidate in candidates:
        try:
            return gpu_spec(candidate)
        except SpottrainError:
            continue
    return None


def cuda_device_info(device: torch.device, precision: str) -> dict[str, Any]:
    """GPU name, memory, capability and catalog peak for ``precision``."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    out: dict[str, Any] = {
        "kind": "cuda",
        "name": props.name,
        "count": 1,
        "memory_bytes": int(props.total_memory),
        "capability": f"{props.major}.{props.minor}",
        "multiprocessors": int(props.multi_processor_count),
        "peak_tflops": None,
        "peak_source": f"unknown: {props.name!r} not in the GPU catalog",
    }
    spec = catalog_gpu_spec(props.name)
    if spec is not None:
        out["catalog_gpu"] = spec.name
        if precision == "amp":
            out["peak_tflops"] = float(spec.fp16_tflops)
            out["peak_source"] = f"catalog {spec.name} fp16 tensor-core dense ({spec.source})"
        else:
            out["peak_tflops"] = float(spec.fp32_tflops)
            out["peak_source"] = f"catalog {spec.name} fp32 ({spec.source})"
    return out


def device_info(device: torch.device, precision: str) -> dict[str, Any]:
    """Device description for the profile's ``device`` key."""
    if device.type == "cuda":
        return cuda_device_info(device, precision)
    return cpu_device_info()


def available_memory_bytes(device: torch.device) -> int | None:
    """Memory the step may still use: free GPU memory, or the host's MemAvailable."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def library_versions() -> dict[str, str | None]:
    """Versions that affect speed: Python, torch, CUDA, cuDNN, spottrain, OS."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": str(cudnn) if cudnn else None,
        "spottrain": __version__,
        "platform": platform.platform(),
    }
