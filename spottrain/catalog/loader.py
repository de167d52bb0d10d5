"""Load the catalog: SkyPilot ``vms.csv`` files (shipped or the user's) into :class:`Offer` rows.

The schema is SkyPilot's ``vms.csv`` (catalog v6-v8): one row per instance type, region and
zone; ``Price`` and ``SpotPrice`` in USD per hour. Required columns: ``InstanceType``,
``AcceleratorName``, ``AcceleratorCount``, ``vCPUs``, ``MemoryGiB``, ``Price``, ``SpotPrice``,
``Region``; ``AvailabilityZone`` is optional (Azure has none); others are ignored. The cloud
of a row is the ``Cloud`` column if present, else inferred from the name (``Standard_*`` is
Azure, names with a dot are AWS, others GCP).

GCP prices a GPU VM as two rows: a host row (machine type, empty ``AcceleratorName``) and an
accelerator row (empty ``InstanceType``) in the same zone. A2/A3/A4/G2 host types pair with
their built-in GPUs (``GCP_HOST_GPUS``); T4/V100/P100/P4 attach to N1 hosts whose prices are
derived from the fsdl table (``gcp_n1_hosts.csv``) and marked as such in ``Offer.source``.

Rows with an empty ``Price`` are skipped (as SkyPilot does), and so are accelerators that are
not GPUs with a spec row; both are counted in ``Catalog.skipped``. Bad values raise
:class:`~spottrain.errors.InputError` naming the file, line and column.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import os
from collections import Counter
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from spottrain.catalog.gpus import canonical_gpu
from spottrain.catalog.network import instance_network_gbps
from spottrain.catalog.offers import Catalog, Offer, Snapshot
from spottrain.errors import InputError, UnknownNameError

REQUIRED_COLUMNS = (
    "InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB",
    "Price", "SpotPrice", "Region",
)

# GCP host machine types with built-in GPUs -> (accelerator name as SkyPilot spells it, count).
GCP_HOST_GPUS: dict[str, tuple[str, int]] = {
    **{f"a2-highgpu-{n}g": ("A100", n) for n in (1, 2, 4, 8)},
    "a2-megagpu-16g": ("A100", 16),
    **{f"a2-ultragpu-{n}g": ("A100-80GB", n) for n in (1, 2, 4, 8)},
    **{f"a3-highgpu-{n}g": ("H100", n) for n in (1, 2, 4, 8)},
    "a3-edgegpu-8g": ("H100", 8), "a3-edgegpu-8g-nolssd": ("H100", 8),
    "a3-megagpu-8g": ("H100-MEGA", 8),
    "a3-ultragpu-8g": ("H200", 8), "a3-ultragpu-8g-nolssd": ("H200", 8),
    "a4-highgpu-8g": ("B200", 8),
    **{f"g2-standard-{v}": ("L4", 1) for v in (4, 8, 12, 16, 32)},
    "g2-standard-24": ("L4", 2), "g2-standard-48": ("L4", 4), "g2-standard-96": ("L4", 8),
}

SHIPPED_FILES = {"aws": "aws_vms.csv", "gcp": "gcp_vms.csv", "azure": "azure_vms.csv"}
FSDL_REGION = {"AWS": "us-east-1", "GCP": "us-central1", "Azure": "eastus"}

SNAPSHOTS = (
    Snapshot("skypilot-v8", "2026-11-22", "retrieved",
             "SkyPilot catalog v8 (AWS, GCP) at fixed commits; the source stores no date, its newest "
             "types suggest late 2025 or later"),
    Snapshot("skypilot-azure-v6", "2026-11-22", "retrieved",
             "SkyPilot catalog v6 Azure (older; 8 US regions, no zones)"),
    Snapshot("fsdl-cloud-gpus", "2023-10-30", "prices reviewed",
             "Full Stack Deep Learning cloud GPU table: fills GPUs SkyPilot no longer lists, and GCP N1 hosts"),
    Snapshot("aws-2022-05-31", "2022-05-31", "observed",
             "AWS per-zone spot prices, 2022-05-31 18:20-23:59 UTC (E. Pauley's spot price history)"),
)


def _data(name: str):
    return resources.files("spottrain").joinpath("data", "catalog", name)


def _infer_cloud(row: dict[str, str]) -> str:
    cloud = (row.get("Cloud") or "").strip().lower()
    if cloud:
        return cloud
    name = row["InstanceType"]
    if name.startswith("Standard_"):
        return "azure"
    if "." in name:
        return "aws"
    return "gcp"


class _Reader:
    """Validating reader of one vms.csv file; yields (line, row) with numbers parsed."""

    def __init__(self, text: str, file: str) -> None:
        self.text, self.file = text, file

    def _number(self, row: dict, column: str, line: int, *, required: bool) -> float | None:
        raw = (row.get(column) or "").strip()
        if not raw:
            if required:
                raise InputError("expected a number, got an empty value", file=self.file, line=line, column=column)
            return None
        try:
            value = float(raw)
        except ValueError:
            raise InputError(f"expected a number, got {raw!r}", file=self.file, line=line, column=column) from None
        if not 0 <= value < float("inf"):  # also rejects NaN
            raise InputError(f"expected a number >= 0 (finite), got {raw!r}", file=self.file, line=line, column=column)
        if column == "AcceleratorCount" and (value != int(value) or value > 16):
            raise InputError(f"expected a whole number of GPUs per node (0-16), got {raw!r}", file=self.file,
                             line=line, column=column)
        return value

    def rows(self) -> Iterator[tuple[int, dict]]:
        reader = csv.DictReader(self.text.splitlines())
        header = reader.fieldnames or []
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise InputError(
                f"missing column(s) {', '.join(missing)}; a SkyPilot vms.csv needs {', '.join(REQUIRED_COLUMNS)}",
                file=self.file, line=1, column=missing[0],
            )
        seen: dict[tuple, int] = {}
        for row in reader:
            line = reader.line_num
            if None in row or any(v is None for v in row.values()):
                raise InputError(f"expected {len(header)} fields", file=self.file, line=line)
            key = tuple(row.get(c, "") for c in ("Cloud", "InstanceType", "AcceleratorName",
                                                 "AcceleratorCount", "Region", "AvailabilityZone"))
            if key in seen:
                raise InputError(f"duplicate row (same as line {seen[key]})", file=self.file, line=line,
                                 column="InstanceType")
            seen[key] = line
            parsed = dict(row)
            parsed["_price"] = self._number(row, "Price", line, required=False)
            parsed["_spot"] = self._number(row, "SpotPrice", line, required=False)
            parsed["_count"] = self._number(row, "AcceleratorCount", line, required=False)
            parsed["_vcpus"] = self._number(row, "vCPUs", line, required=False)
            parsed["_mem"] = self._number(row, "MemoryGiB", line, required=False)
            if not row["Region"].strip():
                raise InputError("expected a region, got an empty value", file=self.file, line=line, column="Region")
            cloud = _infer_cloud(row)
            if cloud not in SHIPPED_FILES:
                raise UnknownNameError("cloud", cloud, SHIPPED_FILES)
            parsed["_cloud"] = cloud
            yield line, parsed


def _gpu_or_none(name: str) -> str | None:
    try:
        return canonical_gpu(name)
    except UnknownNameError:
        return None


@functools.lru_cache(maxsize=1)
def _n1_hosts() -> dict[tuple[str, int], dict[str, str]]:
    with _data("gcp_n1_hosts.csv").open() as fh:
        return {(canonical_gpu(r["AcceleratorName"]), int(r["AcceleratorCount"])): r for r in csv.DictReader(fh)}


def _offer(cloud: str, itype: str, gpu: str, count: int, vcpus: float, mem: float, region: str,
           zone: str | None, price: float, spot: float | None, source: str) -> Offer:
    gbps, estimated = instance_network_gbps(cloud, itype, vcpus)
    return Offer(cloud=cloud, instance_type=itype, gpu=gpu, gpu_count=count, vcpus=vcpus, memory_gib=mem,
                 region=region, zone=zone or None, price_usd_per_hour=round(price, 6),
                 spot_price_usd_per_hour=None if spot is None else round(spot, 6),
                 network_gbps=gbps, network_estimated=estimated, source=source)


def parse_vms(text: str, file: str, source: str, skipped: Counter) -> list[Offer]:
    """Offers of one SkyPilot vms.csv text (any mix of AWS, GCP and Azure rows)."""
    offers: list[Offer] = []
    gcp_hosts: list[tuple[int, dict]] = []
    gcp_gpus: dict[tuple[str, int, str], dict] = {}
    for line, row in _Reader(text, file).rows():
        cloud, itype, accel = row["_cloud"], row["InstanceType"].strip(), row["AcceleratorName"].strip()
        zone = (row.get("AvailabilityZone") or "").strip() or None
        if row["_price"] is None:
            skipped["no on-demand price"] += 1
            continue
        if cloud == "gcp" and not accel:
            if itype in GCP_HOST_GPUS:
                gcp_hosts.append((line, row))
            else:
                skipped["GCP host without GPUs"] += 1
            continue
        if cloud == "gcp" and not itype:
            gpu = _gpu_or_none(accel)
            if gpu is None:
                skipped["not a GPU with a spec"] += 1
                continue
            gcp_gpus[(accel, int(row["_count"] or 0), zone or row["Region"])] = row
            continue
        gpu = _gpu_or_none(accel) if accel else None
        if gpu is None:
            skipped["not a GPU with a spec"] += 1
            continue
        count = row["_count"] or 0
        if count < 1 or count != int(count):
            skipped["fractional GPU"] += 1
            continue
        if row["_vcpus"] is None or row["_mem"] is None:
            column = "vCPUs" if row["_vcpus"] is None else "MemoryGiB"
            raise InputError("expected a number, got an empty value", file=file, line=line, column=column)
        offers.append(_offer(cloud, itype, gpu, int(count), row["_vcpus"], row["_mem"], row["Region"], zone,
                             row["_price"], row["_spot"], source))
    used: set[tuple] = set()
    for line, host in gcp_hosts:
        accel, count = GCP_HOST_GPUS[host["InstanceType"]]
        zone = (host.get("AvailabilityZone") or "").strip() or None
        key = (accel, count, zone or host["Region"])
        gpu_row = gcp_gpus.get(key)
        if gpu_row is None:
            skipped["GCP host without a GPU price in its zone"] += 1
            continue
        used.add(key)
        spot = None
        if host["_spot"] is not None and gpu_row["_spot"] is not None:
            spot = host["_spot"] + gpu_row["_spot"]
        offers.append(_offer("gcp", host["InstanceType"], canonical_gpu(accel), count, host["_vcpus"] or 0.0,
                             host["_mem"] or 0.0, host["Region"], zone, host["_price"] + gpu_row["_price"], spot,
                             source + " (host + GPU rows)"))
    n1 = _n1_hosts()
    for key, gpu_row in gcp_gpus.items():
        if key in used:
            continue
        accel, count, zone = key
        host = n1.get((canonical_gpu(accel), count))
        if host is None:
            skipped["GCP GPU without a host price"] += 1
            continue
        spot = None
        if gpu_row["_spot"] is not None:
            spot = gpu_row["_spot"] + float(host["HostSpotPrice"])
        offers.append(_offer("gcp", host["InstanceType"], canonical_gpu(accel), count, float(host["vCPUs"]),
                             float(host["MemoryGiB"]), gpu_row["Region"], gpu_row.get("AvailabilityZone") or None,
                             gpu_row["_price"] + float(host["HostPrice"]), spot,
                             source + " GPU + N1 host derived from fsdl-cloud-gpus (estimated)"))
    return offers


def _fsdl_fill(present: set[tuple[str, str]]) -> list[Offer]:
    """fsdl rows for (cloud, GPU) pairs the SkyPilot snapshot lacks (retired types: K80, P100)."""
    offers, seen = [], set()
    with _data("fsdl_cloud_gpus.csv").open() as fh:
        for r in csv.DictReader(fh):
            base, _, mem = r["GPU Type"].partition(" (")
            gpu = _gpu_or_none(f"{base}-{mem.split()[0]}GB") or _gpu_or_none(base)
            cloud = r["Cloud"].lower()
            if gpu is None or (cloud, gpu) in present:
                continue
            itype = r["Name"]
            if cloud == "azure":
                itype = "Standard_" + itype.replace(" ", "_")
            if (cloud, itype, gpu) in seen:
                continue  # the fsdl table repeats some rows
            seen.add((cloud, itype, gpu))
            offers.append(_offer(cloud, itype, gpu, int(r["GPUs"]), float(r["vCPUs"]), float(r["RAM"]),
                                 FSDL_REGION[r["Cloud"]], None, float(r["On-demand"]),
                                 float(r["Spot"]) if r["Spot"] else None,
                                 "fsdl-cloud-gpus (one US price per type, ~2023; region assumed)"))
    return offers


@functools.lru_cache(maxsize=1)
def _shipped() -> Catalog:
    skipped: Counter = Counter()
    offers: list[Offer] = []
    for cloud, name in SHIPPED_FILES.items():
        label = "skypilot-azure-v6" if cloud == "azure" else "skypilot-v8"
        offers += parse_vms(_data(name).read_text(), f"spottrain/data/catalog/{name}", label, skipped)
    offers += _fsdl_fill({(o.cloud, o.gpu) for o in offers})
    return Catalog(offers=tuple(offers), snapshot_date=SNAPSHOTS[0].date,
                   source="shipped: SkyPilot catalog (AWS, GCP v8; Azure v6) + fsdl-cloud-gpus fill",
                   snapshots=SNAPSHOTS, skipped=dict(skipped))


def load_catalog(path: str | os.PathLike | None = None) -> Catalog:
    """The catalog: the shipped one (``path=None``, parsed once per process) or a vms.csv file.

    Example::

        >>> cat = load_catalog()
        >>> [o.gpu_count for o in cat.instance("p3.2xlarge")][:1]
        [1]
    """
    if path is None:
        return _shipped()
    # lazy: the catalog loads at CLI start-up; spottrain.files only when a catalog is read
    from spottrain.files import parse_csv, read_text

    p = Path(path)
    text = read_text(p, what="catalog")
    # The header (duplicated, unnamed or missing columns) and the CSV syntax, with line numbers.
    parse_csv(text, file=str(path), required=REQUIRED_COLUMNS, comments=False, what="catalog", pad=False)
    text = text.lstrip("\ufeff")
    skipped: Counter = Counter()
    offers = parse_vms(text, str(path), f"user catalog {p.name}", skipped)
    if not offers:
        raise InputError("no GPU offers with a price found", file=str(path))
    date = dt.date.fromtimestamp(p.stat().st_mtime).isoformat()
    snap = Snapshot(p.name, date, "file modified", f"user catalog {path}")
    return Catalog(offers=tuple(offers), snapshot_date=date, source=str(path), snapshots=(snap,),
                   skipped=dict(skipped))


def spot_price_snapshot(name: str = "aws-2022-05-31") -> list[tuple[str, str, float, str]]:
    """A named historical spot price snapshot: (zone id, instance type, USD/h, ISO timestamp) rows."""
    files = {"aws-2022-05-31": "aws_spot_2022-05-31.tsv"}
    if name not in files:
        raise UnknownNameError("spot price snapshot", name, files)
    rows = []
    for line in _data(files[name]).read_text().splitlines():
        zone, itype, _product, price, stamp = line.split("\t")
        rows.append((zone, itype, float(price), stamp))
    return rows


def network_gbps_for_gpu(gpu: str) -> float:
    """Typical per-node network (Gbps) of a 1-GPU instance of ``gpu``: the median over the
    shipped 1-GPU instance types of that GPU (all clouds), else over all its instance types."""
    canonical = canonical_gpu(gpu)
    offers = [o for o in _shipped().offers if o.gpu == canonical]
    if not offers:
        raise UnknownNameError("GPU in the catalog", gpu, {o.gpu for o in _shipped().offers})
    single = [o for o in offers if o.gpu_count == 1] or offers
    by_type = sorted({(o.cloud, o.instance_type): o.network_gbps for o in single}.values())
    mid = len(by_type) // 2
    return by_type[mid] if len(by_type) % 2 else (by_type[mid - 1] + by_type[mid]) / 2
