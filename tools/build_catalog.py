"""Build the catalog data shipped in ``spottrain/data/catalog/`` from the raw sources.

Run at build time only (never at run time), with an interpreter that has ``moto`` installed:

    python3 tools/build_catalog.py [--data ../shared/data] [--moto-old-wheel PATH]

What it writes (see ``spottrain/data/catalog/SOURCE.md`` for provenance):

- ``aws_vms.csv``, ``gcp_vms.csv``, ``azure_vms.csv``: SkyPilot catalog rows (vms.csv schema)
  of GPUs that have a row in ``gpu_specs.csv``; original text lines, except the corrections
  listed in ``CORRECTIONS``.
- ``fsdl_cloud_gpus.csv``: the AWS/GCP/Azure rows of the Full Stack Deep Learning table.
- ``gcp_n1_hosts.csv``: N1 host prices for T4/V100/P100/P4 VMs, derived from fsdl (estimated).
- ``aws_instance_types.csv``: vCPUs, memory, GPUs and network bandwidth per AWS GPU instance
  type, extracted from moto's copy of EC2 DescribeInstanceTypes.
- ``aws_spot_2022-05-31.tsv``: a copy of the 2022-05-31 per-zone spot price snapshot.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import gzip
import io
import json
import re
import shutil
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "spottrain" / "data" / "catalog"

# Accelerator names that are not in gpu_specs.csv and are dropped, and why.
DROPPED = {
    "Inferentia": "not a GPU", "Inferentia2": "not a GPU", "Trainium": "not a GPU",
    "Trainium2": "not a GPU", "Gaudi HL-205": "not a GPU",
    "Virtex UltraScale (VU9P)": "FPGA", "Virtex UltraScale+ (VU47P)": "FPGA",
    "Radeon Pro V520": "AMD graphics GPU, no CUDA", "Radeon MI25": "AMD GPU, no CUDA",
    "RTX PRO Server 6000": "no published dense FP16/TF32 datasheet figures yet",
    "B300": "no published per-GPU datasheet figures yet",
}

# (cloud, instance type, column) -> (value in source, corrected value, reason)
CORRECTIONS = {
    ("azure", "Standard_ND96isr_H100_v5", "AcceleratorCount"): (
        "12", "8", "the VM has 8 H100 GPUs (learn.microsoft.com/azure/virtual-machines/nd-h100-v5-series)"),
}

# fsdl rows fill (cloud, GPU) pairs that SkyPilot no longer lists (retired types); region assumed.
FSDL_REGION = {"AWS": "us-east-1", "GCP": "us-central1", "Azure": "eastus"}


def _has_spec(name: str) -> bool:
    sys.path.insert(0, str(ROOT))
    from spottrain.catalog.gpus import canonical_gpu
    from spottrain.errors import UnknownNameError

    try:
        canonical_gpu(name)
    except UnknownNameError:
        return False
    return True


def _filter_vms(src: Path, dst: Path, cloud: str, keep_hosts: bool) -> int:
    """Copy header + the rows of GPUs with a spec (whole GPUs only); return the row count."""
    lines = src.read_text().splitlines()
    header = next(csv.reader([lines[0]]))
    out = [lines[0]]
    for line in lines[1:]:
        row = dict(zip(header, next(csv.reader([line]))))
        name = row["AcceleratorName"]
        if not name:
            if keep_hosts and row["InstanceType"]:
                out.append(line)
            continue
        if not _has_spec(name):
            assert name in DROPPED, f"{cloud}: accelerator {name!r} has no spec and no drop reason"
            continue
        if float(row["AcceleratorCount"]) < 1:
            continue  # fractional GPU slices (AWS g6f/gr6f)
        for (c, itype, col), (old, new, _) in CORRECTIONS.items():
            if c == cloud and row["InstanceType"] == itype:
                assert row[col] == old, (itype, col, row[col])
                row[col] = new
                buf = io.StringIO()
                csv.writer(buf, lineterminator="").writerow([row[h] for h in header])
                line = buf.getvalue()
        out.append(line)
    dst.write_text("\n".join(out) + "\n")
    return len(out) - 1


def _fsdl(data: Path) -> list[dict[str, str]]:
    src = data / "fsdl-cloud-gpus" / "cloud-gpus.csv"
    with src.open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["Cloud"] in FSDL_REGION]
    with (OUT / "fsdl_cloud_gpus.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    shutil.copy(data / "fsdl-cloud-gpus" / "LICENSE.txt", OUT / "fsdl_LICENSE.txt")
    return rows


def _gcp_n1_hosts(fsdl_rows: list[dict[str, str]]) -> int:
    """N1 host price = fsdl full VM price - SkyPilot GPU price in us-central1 (same GPU, count).

    The host's spot price assumes the VM-wide spot discount fsdl shows for that row.
    """
    with (OUT / "gcp_vms.csv").open(newline="") as fh:
        gpu_price = {
            (r["AcceleratorName"], int(float(r["AcceleratorCount"]))): float(r["Price"])
            for r in csv.DictReader(fh)
            if not r["InstanceType"] and r["Region"] == "us-central1" and r["Price"]
        }
    out = []
    for r in fsdl_rows:
        if r["Cloud"] != "GCP" or not r["Name"].startswith("n1-"):
            continue
        gpu = r["GPU Type"].split(" (")[0]
        key = (gpu, int(r["GPUs"]))
        if key not in gpu_price:
            continue
        total, spot_total = float(r["On-demand"]), float(r["Spot"])
        host = round(total - gpu_price[key], 4)
        host_spot = round(host * spot_total / total, 4)
        out.append({
            "AcceleratorName": gpu, "AcceleratorCount": key[1], "InstanceType": r["Name"],
            "vCPUs": r["vCPUs"], "MemoryGiB": r["RAM"], "HostPrice": host, "HostSpotPrice": host_spot,
            "derivation": f"fsdl {total} - SkyPilot us-central1 GPU {gpu_price[key]}; spot x {spot_total}/{total}",
        })
    with (OUT / "gcp_n1_hosts.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(out[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(out)
    return len(out)


def _network_gbps(info: dict) -> tuple[float, str]:
    """Sustained network bandwidth and the rule used (documented in docs/catalog.md)."""
    text = info.get("NetworkPerformance", "")
    cards = info.get("NetworkCards") or []
    baseline = sum(c.get("BaselineBandwidthInGbps", 0.0) for c in cards)
    m = re.fullmatch(r"(?:(\d+)x )?(\d+(?:\.\d+)?) Gigabit", text)
    if m:
        return float(m.group(1) or 1) * float(m.group(2)), "fixed"
    if baseline:
        return baseline, "baseline"  # "Up to N Gigabit", "High": bursts need credits; baseline is sustained
    m = re.fullmatch(r"Up to (\d+(?:\.\d+)?) Gigabit", text)
    if m:
        return float(m.group(1)) / 4, "burst/4"
    raise ValueError(f"cannot read network performance {text!r}")


def _moto_tables(old_wheel: Path | None) -> tuple[dict, str]:
    import moto

    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    table = json.loads(gzip.decompress(path.read_bytes()))
    version = f"moto {moto.__version__}"
    if old_wheel is not None:
        # Previous-generation types (p3, p2) were dropped from newer moto releases.
        with zipfile.ZipFile(old_wheel) as zf:
            old = json.loads(zf.read("moto/ec2/resources/instance_types.json"))
        version += f" (+ {old_wheel.name.split('-py')[0].replace('-', ' ')} for types missing there)"
        for k, v in old.items():
            table.setdefault(k, {**v, "_from_old": True})
    return table, version


def _aws_instance_types(old_wheel: Path | None, fsdl_rows: list[dict[str, str]]) -> int:
    table, version = _moto_tables(old_wheel)
    with (OUT / "aws_vms.csv").open(newline="") as fh:
        types = {r["InstanceType"] for r in csv.DictReader(fh)}
    types |= {r["Name"] for r in fsdl_rows if r["Cloud"] == "AWS"}
    out = []
    for itype in sorted(types):
        info = table.get(itype)
        if info is None:
            print(f"warning: {itype} not in moto data")
            continue
        net = info["NetworkInfo"]
        gbps, rule = _network_gbps(net)
        gpus = (info.get("GpuInfo") or {}).get("Gpus") or [{}]
        out.append({
            "instance_type": itype,
            "vcpus": info["VCpuInfo"]["DefaultVCpus"],
            "memory_gib": round(info["MemoryInfo"]["SizeInMiB"] / 1024, 3),
            "gpu_name": gpus[0].get("Name", ""),
            "gpu_count": sum(g.get("Count", 0) for g in gpus),
            "gpu_memory_mib": gpus[0].get("MemoryInfo", {}).get("SizeInMiB", ""),
            "network_performance": net.get("NetworkPerformance", ""),
            "baseline_gbps": sum(c.get("BaselineBandwidthInGbps", 0.0) for c in net.get("NetworkCards") or []),
            "peak_gbps": sum(c.get("PeakBandwidthInGbps", 0.0) for c in net.get("NetworkCards") or []),
            "network_gbps": gbps,
            "network_rule": rule,
            "efa_supported": net.get("EfaSupported", False),
            "from": "old" if info.get("_from_old") else "new",
        })
    today = dt.date.today().isoformat()
    with (OUT / "aws_instance_types.csv").open("w", newline="") as fh:
        fh.write(f"# Extracted {today} from {version}: moto/ec2/resources/instance_types.json(.gz), "
                 "a copy of EC2 DescribeInstanceTypes. from=old: taken from the older release.\n")
        writer = csv.DictWriter(fh, fieldnames=list(out[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(out)
    return len(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--moto-old-wheel", type=Path, default=None,
                        help="an older moto wheel (e.g. moto-4.2.14) for types newer moto lacks")
    args = parser.parse_args()
    sky = args.data / "skypilot-catalog"
    print("aws rows", _filter_vms(sky / "aws_gpu_vms.csv", OUT / "aws_vms.csv", "aws", False))
    print("gcp rows", _filter_vms(sky / "gcp_gpu_vms.csv", OUT / "gcp_vms.csv", "gcp", True))
    print("azure rows", _filter_vms(sky / "azure_gpu_vms.csv", OUT / "azure_vms.csv", "azure", False))
    fsdl_rows = _fsdl(args.data)
    print("gcp n1 hosts", _gcp_n1_hosts(fsdl_rows))
    print("aws instance types", _aws_instance_types(args.moto_old_wheel, fsdl_rows))
    shutil.copy(args.data / "aws-spot-price-history" / "prices" / "2022" / "05.gpu-linux.tsv",
                OUT / "aws_spot_2022-05-31.tsv")


if __name__ == "__main__":
    main()
