"""Loaders for the real spot traces shipped in ``spottrain/data/traces`` (see each SOURCE.md).

Every loader returns a :class:`~spottrain.transience.events.Trace`:

- ``skypilot-*``: SkyPilot "Can't Be Late" (NSDI'24) AWS V100/K80 availability (launch
  attempts) and preemption (instances kept alive) counts per zone, sampled every ``gap_seconds``;
- ``bamboo-aws-p3`` / ``bamboo-aws-g4dn``: Bamboo (NSDI'23) AWS spot clusters, node add/remove;
- ``bamboo-gcp-v100-us-east1-c`` / ``bamboo-gcp-a100-us-east1-b``: live GCP preemptible VMs;
- ``bamboo-aws-*-2020-*``: AWS p2/g4dn spot cluster sizes of Nov 2020;
- ``transient-dl-lifetime-{k80,p100,v100}``: GCP preemptible VM lifetimes (ICAC'19), 24 h cap;
- ``transient-dl-training-*``: GCP preemptible workers inside real training clusters;
- ``aws-spot-prices-2022-05``: AWS spot prices per availability zone (partial snapshot).
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import json
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import numpy as np

from spottrain.clouds import GCP_PREEMPTIBLE_CAP_S
from spottrain.errors import UnknownNameError
from spottrain.transience.events import Trace, TraceEvent, check_sorted, load_user_trace

_CAP_HIT_S = 23.5 * 3600.0  # lifetimes this long ended at the cap (GCP stops them a few minutes late)


def data_dir() -> Path:
    """Folder of the shipped traces."""
    return Path(str(resources.files("spottrain") / "data" / "traces"))


# ---------------------------------------------------------------- SkyPilot spot-traces
_SKY_INSTANCE = {
    "v100_1": ("V100", "p3.2xlarge", 1), "v100_8": ("V100", "p3.16xlarge", 8),
    "k80_1": ("K80", "p2.xlarge", 1), "k80_8": ("K80", "p2.16xlarge", 8),  # as the README says
    "intel_64": (None, "r5.16xlarge", 0), "c3-88": (None, "c3-highcpu-88", 0),
}


def _skypilot_files() -> dict[str, Path]:
    root = data_dir() / "skypilot-spot-traces"
    out = {}
    for p in sorted(root.glob("*/*/*/*.json")):
        what, nodes, date = p.parts[-4], p.parts[-3], p.parts[-2]
        out[f"skypilot-{what}-{nodes}-{date}-{p.stem}"] = p
    return out


def _load_skypilot(path: Path, name: str) -> Trace:
    doc = json.loads(path.read_text())
    gap = float(doc["metadata"]["gap_seconds"])
    data = doc["data"]
    what, nodes, date = path.parts[-4], path.parts[-3], path.parts[-2]
    zone, _, itype_key = path.stem.partition("_")
    gpu, itype, _ = _SKY_INSTANCE[itype_key]
    cloud = date.split("-")[0]
    # one event where the count changes (and at the start): a day of minutes holds a few dozen
    counts = np.asarray(data, float)
    steps = np.flatnonzero(np.r_[True, counts[1:] != counts[:-1]]) if counts.size else np.zeros(0, int)
    events = [TraceEvent(time_s=i * gap, source=zone, event="available", value=v)
              for i, v in zip(steps.tolist(), counts[steps].tolist())]
    start = dt.datetime.strptime(date.split("-", 1)[1], "%m-%d-%Y").replace(tzinfo=dt.timezone.utc)
    return Trace(
        name=name, cloud=cloud, gpu=gpu, instance_type=itype, zone=zone,
        kind="availability" if what == "availability" else "alive",
        events=tuple(events), duration_s=len(data) * gap,
        capacity=int(nodes.split("-")[0]), start_unix_s=start.timestamp(),
        provenance=f"skypilot-org/spot-traces@221da1a {what}/{nodes}/{date}/{path.name} "
                   "(Wu et al., Can't Be Late, NSDI'24)",
        meta={"gap_s": gap},
    )


# ---------------------------------------------------------------- Bamboo
def _load_bamboo_nodes(fname: str, name: str, gpu: str, family: str) -> Trace:
    path = data_dir() / "bamboo-spot-traces" / "traces" / fname
    events = []
    with path.open(newline="") as fh:
        for row in csv.reader(fh):
            if not row:
                continue
            t_ms, ev, node = (c.strip() for c in row)
            events.append(TraceEvent(time_s=float(t_ms) / 1000.0, source=node,
                                     event="start" if ev == "add" else "revoke"))
    events.sort(key=lambda e: e.time_s)
    check_sorted(events)
    return Trace(
        name=name, cloud="aws", gpu=gpu, instance_type=None, zone=None, kind="nodes",
        events=tuple(events), duration_s=events[-1].time_s,
        provenance=f"uclasystem/bamboo@8080929 traces/{fname} (Thorpe et al., Bamboo, NSDI'23)",
        meta={"family": family},
    )


def _load_bamboo_gcloud(fname: str, name: str, gpu: str, zone: str, capacity: int) -> Trace:
    path = data_dir() / "bamboo-spot-traces" / "traces" / "gcloud" / fname
    by_time: dict[dt.datetime, float] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        day, hms, n = (c.strip() for c in line.split(","))
        # The V100 file repeats each observation on three lines (t, t+1 min, t+2 min), so
        # timestamps overlap; a later line wins, which recovers the observed step function.
        by_time[dt.datetime.strptime(f"{day} {hms}", "%Y-%m-%d %H:%M:%S")] = float(n)
    times = sorted(by_time)
    t0 = times[0]
    events, prev = [], None
    for t in times:
        if by_time[t] != prev:
            events.append(TraceEvent(time_s=(t - t0).total_seconds(), source=zone,
                                     event="available", value=by_time[t]))
            prev = by_time[t]
    return Trace(
        name=name, cloud="gcp", gpu=gpu, instance_type=None, zone=zone, kind="alive",
        events=tuple(events), duration_s=(times[-1] - t0).total_seconds(), capacity=capacity,
        start_unix_s=t0.replace(tzinfo=dt.timezone.utc).timestamp(),
        provenance=f"uclasystem/bamboo@8080929 traces/gcloud/{fname} (Bamboo, NSDI'23)",
    )


_BAMBOO_2020 = re.compile(
    r"aws-spot-instances-(?P<type>[a-z0-9]+)-(?P<size>[a-z0-9]+)-(?P<zone>us-[a-z]+-\d[a-z])-"
    r"(?P<start>\d{4}-\d\d-\d\d-\d{4})-to-(?P<end>\d{4}-\d\d-\d\d-\d{4})\.csv"
)


def _bamboo_2020_files() -> dict[str, Path]:
    out = {}
    for p in sorted((data_dir() / "bamboo-spot-traces" / "doc" / "data").glob("aws-spot-*.csv")):
        m = _BAMBOO_2020.fullmatch(p.name)
        if m and len(p.read_text().splitlines()) > 1:  # two files hold a single row: nothing to replay
            out[f"bamboo-aws-{m['type']}.{m['size']}-{m['zone']}-2020-{m['start'][5:10]}"] = p
    return out


def _load_bamboo_2020(path: Path, name: str) -> Trace:
    m = _BAMBOO_2020.fullmatch(path.name)
    assert m is not None
    start = dt.datetime.strptime(m["start"], "%Y-%m-%d-%H%M")
    end = dt.datetime.strptime(m["end"], "%Y-%m-%d-%H%M")
    events, prev = [], None
    for row in csv.reader(path.read_text().splitlines()):
        t, n = float(row[0]), float(row[1])
        if n != prev:
            events.append(TraceEvent(time_s=t, source=m["zone"], event="available", value=n))
            prev = n
    itype = f"{m['type']}.{m['size']}"
    return Trace(
        name=name, cloud="aws", gpu={"p2": "K80", "g4dn": "T4"}[m["type"]],
        instance_type=itype, zone=m["zone"], kind="alive", events=tuple(events),
        duration_s=max((end - start).total_seconds(), events[-1].time_s),
        start_unix_s=start.replace(tzinfo=dt.timezone.utc).timestamp(),
        provenance=f"uclasystem/bamboo@8080929 doc/data/{path.name}",
    )


# ---------------------------------------------------------------- transient-dl (GCP)
_LIFETIME_ZONE = re.compile(r"a-(?:(?:p100|v100)-)?(?P<zone>[a-z]+-[a-z]+\d-[a-z])-\d+(?:less)?")


def _load_transient_lifetime(gpu: str, name: str) -> Trace:
    path = data_dir() / "transient-dl" / "lifetime" / "lifetime.csv"
    section, rows = None, []
    for row in csv.reader(path.read_text().splitlines()):
        head = row[0].strip() if row else ""
        if head in ("K80", "P100", "V100", "Previous experiments"):
            section = head
            continue
        if section != gpu or head in ("", "VM name"):
            continue
        m = _LIFETIME_ZONE.fullmatch(head)
        start = dt.datetime.strptime(row[1].strip(), "%m/%d/%y %H:%M")
        stop = dt.datetime.strptime(row[2].strip(), "%m/%d/%y %H:%M")
        rows.append((head, m["zone"] if m else None, start, stop))
    t0 = min(r[2] for r in rows)
    events, zones = [], {}
    for vm, zone, start, stop in rows:
        life = (stop - start).total_seconds()
        a = (start - t0).total_seconds()
        zones[vm] = zone
        events.append(TraceEvent(time_s=a, source=vm, event="start"))
        if life >= _CAP_HIT_S:  # hit the 24 h cap: censored at the cap, not revoked
            events.append(TraceEvent(time_s=a + GCP_PREEMPTIBLE_CAP_S, source=vm, event="end"))
        else:
            events.append(TraceEvent(time_s=a + life, source=vm, event="revoke"))
    events.sort(key=lambda e: e.time_s)
    return Trace(
        name=name, cloud="gcp", gpu=gpu, instance_type=None, zone=None, kind="nodes",
        events=tuple(events), duration_s=events[-1].time_s,
        start_unix_s=t0.replace(tzinfo=dt.timezone.utc).timestamp(),
        provenance="cake-lab/transient-deep-learning@87c6717 data/lifetime/lifetime.csv "
                   "(Li et al., ICAC'19), 2019 sections",
        meta={"node_zone": zones, "max_lifetime_s": GCP_PREEMPTIBLE_CAP_S},
    )


_TRAINING = {
    "k80-2": ("K80", "k80_spot/2-spot", "train_data.csv"),
    "k80-4": ("K80", "k80_spot/4-spot", "4-spot-train_data.csv"),
    "k80-8": ("K80", "k80_spot/8-spot", "train_data.csv"),
    "p100-1": ("P100", "p100_v100_spot/p100", "train_data.csv"),
    "v100-1": ("V100", "p100_v100_spot/v100", "train_data.csv"),
}
_VM_NAME = re.compile(r"(?:[a-z0-9]+-)*?(?:spot\d?-)?(?P<zone>[a-z]+-[a-z]+\d-[a-z])-run(?P<run>\d+)-"
                      r"(?P<role>master|worker-\d+)")


def _load_transient_training(key: str, name: str) -> Trace:
    gpu, folder, train_file = _TRAINING[key]
    root = data_dir() / "transient-dl" / "training" / folder
    run_start: dict[tuple[str, int], float] = {}
    for r in csv.DictReader((root / train_file).read_text().splitlines()):
        k = (r["Zone"].strip(), int(r["Run"]))
        run_start[k] = min(run_start.get(k, float("inf")), float(r["Wall Time"]))
    t0 = min(run_start.values())
    events, zones, runs, roles = [], {}, {}, {}
    for r in csv.DictReader((root / "vm_data.csv").read_text().splitlines()):
        vm = r["VM_name"].strip()
        m = _VM_NAME.fullmatch(vm)
        assert m is not None, vm
        zone, run, role = m["zone"], int(m["run"]), m["role"]
        start = run_start.get((zone, run), t0) - t0
        up = float(r["Uptime"])
        reason = (r.get("Revoked") or "").strip().lower()
        # The chief ("master") being revoked stopped the whole job: for the master that line
        # is a revocation, for the workers a censored lifetime.
        revoked = reason == "revoked" or (reason.startswith("manually stopped") and role == "master")
        zones[vm], runs[vm], roles[vm] = zone, f"{zone}-run{run}", role
        events.append(TraceEvent(time_s=start, source=vm, event="start"))
        events.append(TraceEvent(time_s=start + up, source=vm, event="revoke" if revoked else "end"))
    events.sort(key=lambda e: e.time_s)
    return Trace(
        name=name, cloud="gcp", gpu=gpu, instance_type=None, zone=None, kind="nodes",
        events=tuple(events), duration_s=events[-1].time_s, start_unix_s=t0,
        provenance=f"cake-lab/transient-deep-learning@87c6717 data/training/{folder}/vm_data.csv "
                   "(Li et al., ICAC'19)",
        meta={"node_zone": zones, "node_run": runs, "node_role": roles,
              "max_lifetime_s": GCP_PREEMPTIBLE_CAP_S},
    )


# ---------------------------------------------------------------- AWS spot prices
def _load_aws_prices(name: str) -> Trace:
    path = data_dir() / "aws-spot-price-history" / "05.gpu-linux.tsv"
    rows = []
    for line in path.read_text().splitlines():
        az, itype, _, price, ts = line.split("\t")
        rows.append((dt.datetime.fromisoformat(ts), f"{az}/{itype}", float(price)))
    rows.sort(key=lambda r: r[0])
    t0 = rows[0][0]
    events = tuple(TraceEvent(time_s=(t - t0).total_seconds(), source=s, event="price", value=p)
                   for t, s, p in rows)
    return Trace(
        name=name, cloud="aws", gpu=None, instance_type=None, zone=None, kind="price",
        events=events, duration_s=events[-1].time_s, start_unix_s=t0.timestamp(),
        provenance="ericpauley/aws-spot-price-history@489ad94 prices/2022/05.tsv.zst "
                   "(GPU Linux rows, 2022-05-31)",
    )


# ---------------------------------------------------------------- registry
@functools.cache
def _registry() -> dict[str, Callable[[], Trace]]:
    reg: dict[str, Callable[[], Trace]] = {}
    for name, path in _skypilot_files().items():
        reg[name] = functools.partial(_load_skypilot, path, name)
    reg["bamboo-aws-p3"] = functools.partial(_load_bamboo_nodes, "p3-trace.csv", "bamboo-aws-p3", "V100", "p3")
    reg["bamboo-aws-g4dn"] = functools.partial(_load_bamboo_nodes, "g4dn-trace.csv", "bamboo-aws-g4dn", "T4", "g4dn")
    reg["bamboo-gcp-v100-us-east1-c"] = functools.partial(
        _load_bamboo_gcloud, "v100x1-east1c.txt", "bamboo-gcp-v100-us-east1-c", "V100", "us-east1-c", 80)
    reg["bamboo-gcp-a100-us-east1-b"] = functools.partial(
        _load_bamboo_gcloud, "a100x1-east1b.txt", "bamboo-gcp-a100-us-east1-b", "A100", "us-east1-b", 64)
    for name, path in _bamboo_2020_files().items():
        reg[name] = functools.partial(_load_bamboo_2020, path, name)
    for gpu in ("K80", "P100", "V100"):
        n = f"transient-dl-lifetime-{gpu.lower()}"
        reg[n] = functools.partial(_load_transient_lifetime, gpu, n)
    for key in _TRAINING:
        n = f"transient-dl-training-{key}"
        reg[n] = functools.partial(_load_transient_training, key, n)
    reg["aws-spot-prices-2022-05"] = functools.partial(_load_aws_prices, "aws-spot-prices-2022-05")
    return reg


def list_traces() -> list[str]:
    """Names of the shipped traces, for :func:`load_trace`."""
    return sorted(_registry())


@functools.cache
def load_trace(name: str) -> Trace:
    """Load a shipped trace by name (see :func:`list_traces`), or a user CSV by path.

    >>> load_trace("bamboo-aws-p3").gpu
    'V100'
    """
    reg = _registry()
    if name in reg:
        return reg[name]()
    if name.endswith(".csv") or Path(name).is_file():
        return load_user_trace(name)
    raise UnknownNameError("trace", name, reg)
