"""Network bandwidth per instance type, in Gbit/s of sustained VM egress.

- **AWS**: measured-by-the-vendor figures from EC2 DescribeInstanceTypes (extracted at build
  time from the ``moto`` package into ``aws_instance_types.csv``). ``"N Gigabit"`` and
  ``"Kx N Gigabit"`` are taken as written. ``"Up to N Gigabit"`` (and the old ``"High"``) is a
  burst rate that runs on network credits, which a training job exhausts in minutes, so we
  use the card's sustained ``BaselineBandwidthInGbps`` instead (p3.2xlarge: 2.5, not 10).
  Not estimated.
- **GCP**: the documented per-VM egress caps (cloud.google.com/compute/docs/network-bandwidth
  and .../gpus/gpu-network-bandwidth): N1 hosts get 2 Gbps per vCPU up to 32 Gbps; A2, A3,
  A4 and G2 machine types have a fixed documented figure per shape. Estimated (a cap, not a
  measured rate).
- **Azure**: the "expected network bandwidth" of the size's documentation page where we know
  it (learn.microsoft.com/azure/virtual-machines/sizes), InfiniBand for ND sizes; other sizes
  get ``AZURE_DEFAULT_GBPS``. Estimated.
"""

from __future__ import annotations

import csv
import functools
import re
from importlib import resources

GCP_N1_GBPS_PER_VCPU = 2.0
GCP_N1_MAX_GBPS = 32.0

# Documented maximum egress bandwidth per machine type (Gbps), including GPU NICs for A3/A4.
GCP_FIXED_GBPS = {
    "a2-highgpu-1g": 24, "a2-highgpu-2g": 32, "a2-highgpu-4g": 50, "a2-highgpu-8g": 100,
    "a2-megagpu-16g": 100,
    "a2-ultragpu-1g": 24, "a2-ultragpu-2g": 32, "a2-ultragpu-4g": 50, "a2-ultragpu-8g": 100,
    "a3-highgpu-1g": 25, "a3-highgpu-2g": 50, "a3-highgpu-4g": 100, "a3-highgpu-8g": 1000,
    "a3-edgegpu-8g": 1000, "a3-edgegpu-8g-nolssd": 1000,
    "a3-megagpu-8g": 1800, "a3-ultragpu-8g": 3600, "a3-ultragpu-8g-nolssd": 3600,
    "a4-highgpu-8g": 3600,
    "g2-standard-4": 10, "g2-standard-8": 16, "g2-standard-12": 16, "g2-standard-16": 32,
    "g2-standard-24": 32, "g2-standard-32": 32, "g2-standard-48": 50, "g2-standard-96": 100,
}

# Azure "expected network bandwidth" (Gbps) from the size pages; ND sizes: GPU InfiniBand total.
AZURE_GBPS = {
    "Standard_NC4as_T4_v3": 8, "Standard_NC8as_T4_v3": 8, "Standard_NC16as_T4_v3": 8,
    "Standard_NC64as_T4_v3": 32,
    "Standard_NC24ads_A100_v4": 20, "Standard_NC48ads_A100_v4": 40, "Standard_NC96ads_A100_v4": 80,
    "Standard_NC40ads_H100_v5": 40, "Standard_NC80adis_H100_v5": 80,
    "Standard_ND40rs_v2": 100, "Standard_ND96asr_v4": 1600, "Standard_ND96amsr_A100_v4": 1600,
    "Standard_ND96isr_H100_v5": 3200,
}
AZURE_DEFAULT_GBPS = 10.0
"""Sizes without a published figure (NC K80, NCv3, NV M60/A10) get this."""


@functools.lru_cache(maxsize=1)
def aws_instance_types() -> dict[str, dict[str, str]]:
    """Rows of ``aws_instance_types.csv`` by instance type (vCPUs, memory, GPUs, network)."""
    text = resources.files("spottrain").joinpath("data", "catalog", "aws_instance_types.csv").read_text()
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return {r["instance_type"]: r for r in rows}


def instance_network_gbps(cloud: str, instance_type: str, vcpus: float) -> tuple[float, bool]:
    """(sustained network Gbps, estimated?) of one instance type; see the module docstring."""
    if cloud == "aws":
        row = aws_instance_types().get(instance_type)
        if row is not None:
            return float(row["network_gbps"]), False
        # A type newer than our extract: AWS's smallest current GPU sizes sustain >= 2.5 Gbps.
        return 2.5, True
    if cloud == "gcp":
        if instance_type in GCP_FIXED_GBPS:
            return float(GCP_FIXED_GBPS[instance_type]), True
        return min(GCP_N1_GBPS_PER_VCPU * vcpus, GCP_N1_MAX_GBPS), True
    if cloud == "azure":
        key = re.sub(r"_Promo$", "", instance_type)
        return float(AZURE_GBPS.get(key, AZURE_DEFAULT_GBPS)), True
    raise ValueError(f"unknown cloud {cloud!r}")
