"""Trace loaders, user trace CSV errors, lifetime_model fallback, availability, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from spottrain.errors import InputError, UnknownNameError
from spottrain.transience import (
    availability,
    lifetime_model,
    list_traces,
    load_trace,
    load_user_trace,
    node_lifetimes,
    replacement_delay,
)
from spottrain.transience.availability import acquisition_waits_s
from spottrain.transience.traces import GCP_PREEMPTIBLE_CAP_S


def test_every_shipped_trace_loads_sorted_with_provenance():
    names = list_traces()
    assert len(names) >= 40
    for n in names:
        tr = load_trace(n)
        times = [e.time_s for e in tr.events]
        assert times == sorted(times) and times[0] >= 0
        assert tr.provenance and tr.duration_s >= times[-1]


def test_bamboo_p3_node_counts_match_source():
    tr = load_trace("bamboo-aws-p3")
    ev = [e.event for e in tr.events]
    assert ev.count("start") == 177 and ev.count("revoke") == 167  # SOURCE.md figures
    life = node_lifetimes(tr)
    assert len(life) == 177 and life.observed.sum() == 167


def test_transient_dl_lifetimes_cap_is_censored():
    life = node_lifetimes(load_trace("transient-dl-lifetime-v100"))
    assert len(life) == 48
    # About 10 % of the 2019 V100 VMs were revoked before 24 h (SOURCE.md).
    assert 0.05 < life.observed.mean() < 0.2
    assert life.durations_s[~life.observed].max() == pytest.approx(GCP_PREEMPTIBLE_CAP_S)


def test_vm_data_master_stopped_counts_as_revocation_only_for_master():
    tr = load_trace("transient-dl-training-k80-8")
    life = node_lifetimes(tr)
    roles = np.array([tr.meta["node_role"][n] for n in life.node])
    # 6 workers marked Revoked plus the masters that were revoked; no worker with
    # "Manually stopped due to revoked master" counts.
    assert life.observed[roles != "master"].sum() == 6
    assert life.observed[roles == "master"].sum() >= 1


def test_gcloud_overlapping_triples_are_recovered():
    tr = load_trace("bamboo-gcp-v100-us-east1-c")
    values = [e.value for e in tr.events[:4]]
    assert values == [80.0, 70.0, 60.0, 58.0]


def test_acquisition_waits_fifo():
    from spottrain.transience.events import Trace, TraceEvent

    ev = [TraceEvent(time_s=t, source="z", event="available", value=v)
          for t, v in [(0, 2), (10, 0), (15, 1), (40, 2), (50, 1)]]
    tr = Trace(name="synthetic", cloud="aws", gpu="V100", instance_type=None, zone="z",
               kind="alive", events=tuple(ev), duration_s=100.0, provenance="synthetic")
    w, o = acquisition_waits_s(tr)
    assert w.tolist() == [5.0, 30.0, 50.0] and o.tolist() == [True, True, False]


def test_group_losses_count_the_drops_that_empty_a_group():
    from spottrain.transience.availability import group_losses
    from spottrain.transience.events import Trace, TraceEvent

    # 4 -> 2 (two nodes, the group survives), 2 -> 0 (two, in a drop that empties it), 0 -> 1 -> 0
    # (a lone node: says nothing about nodes falling together)
    ev = [TraceEvent(time_s=t, source="z", event="available", value=v)
          for t, v in [(0, 4), (10, 2), (20, 0), (30, 1), (40, 0)]]
    tr = Trace(name="synthetic", cloud="aws", gpu="V100", instance_type=None, zone="z",
               kind="alive", events=tuple(ev), duration_s=100.0, provenance="synthetic")
    assert group_losses(tr) == (4, 2)


def test_group_losses_of_a_node_trace_count_revocations_only():
    from spottrain.transience.availability import group_losses
    from spottrain.transience.events import Trace, TraceEvent

    def trace(rows):
        ev = tuple(TraceEvent(time_s=t, source=n, event=k) for t, n, k in rows)
        return Trace(name="synthetic", cloud="aws", gpu="V100", instance_type=None, zone="z",
                     kind="nodes", events=ev, duration_s=100.0, provenance="synthetic")

    start = [(0, "a", "start"), (0, "b", "start"), (0, "c", "start")]
    # two of three revoked at one instant (one drop, a survivor); the rest end their job, which
    # is no revocation, though it leaves no node
    assert group_losses(trace(start + [(10, "a", "revoke"), (10, "b", "revoke"), (20, "d", "start"),
                                       (30, "c", "end"), (30, "d", "end")])) == (2, 0)
    # all three revoked at one instant: the drop empties the group
    assert group_losses(trace(start + [(10, "a", "revoke"), (10, "b", "revoke"), (10, "c", "revoke")])) == (3, 3)


def test_group_outages_differ_by_market_on_the_shipped_traces():
    from spottrain.transience import group_outage

    # SkyPilot's 4- and 16-node AWS V100 traces: most revocations take the whole group ...
    aws = group_outage("aws", "V100")
    assert aws.pooled_from is None and aws.revocations > 1000 and aws.share > 0.5
    # ... Bamboo's GCP preemptible V100 clusters of up to 80 VMs never dropped to zero
    gcp = group_outage("gcp", "V100")
    assert gcp.pooled_from is None and gcp.revocations > 100 and gcp.share == 0.0
    # too few revocations of its own (AWS K80: 3): pooled, and said
    assert "aws all GPUs" in group_outage("aws", "K80").pooled_from


def _write(tmp_path, text, name="synthetic_trace.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_user_trace_roundtrip(tmp_path):
    p = _write(tmp_path, "# cloud: aws\n# gpu: v100\n# duration_s: 100\n"
                         "time_s,source,event,value\n0,a,start,\n0,b,start,\n30,a,revoke,\n")
    tr = load_user_trace(p)
    assert tr.cloud == "aws" and tr.gpu == "V100" and tr.kind == "nodes"
    life = node_lifetimes(tr)
    assert sorted(life.durations_s.tolist()) == [30.0, 100.0]
    assert life.observed.sum() == 1


@pytest.mark.parametrize("text, where", [
    ("", "line 1"),
    ("time_s,source,event,value\n", "line 1"),
    ("time_s,source,event,colour\n0,a,start,\n", "column colour"),
    ("time_s,source,event\n0,a,start\n-5,a,revoke\n", "line 3, column time_s"),
    ("time_s,source,event\n10,a,start\n5,a,revoke\n", "line 3, column time_s"),
    ("time_s,source,event\n0,a,start\n5,a,explode\n", "line 3, column event"),
    ("time_s,source,event\n0,a,revoke\n", "line 2, column source"),
    ("time_s,source,event,value\n0,z,available,lots\n", "line 2, column value"),
    ("# colour: red\ntime_s,source,event\n0,a,start\n", "line 1"),
])
def test_user_trace_errors_name_file_and_line(tmp_path, text, where):
    p = _write(tmp_path, text)
    with pytest.raises(InputError) as exc:
        load_user_trace(p)
    msg = str(exc.value)
    assert str(p) in msg and where in msg


def test_unknown_trace_suggests():
    with pytest.raises(UnknownNameError, match="did you mean"):
        load_trace("bamboo-aws-p33")


def test_lifetime_model_choice_and_fallbacks():
    m = lifetime_model("aws", "V100")
    assert m.pooled_from is None and m.name in ("weibull", "bathtub")
    assert m.candidates[m.name].aic_ <= m.candidates["exponential"].aic_
    # Spot V100 on AWS shows infant mortality: more revocations in the first hour than T/MTBF.
    assert m.cdf(3600.0) > 1 - np.exp(-3600.0 / m.mean_lifetime_s())
    g = lifetime_model("gcp", "V100")
    assert g.max_lifetime_s == GCP_PREEMPTIBLE_CAP_S and g.survival(GCP_PREEMPTIBLE_CAP_S) == 0.0
    h = lifetime_model("gcp", "H100")
    assert h.pooled_from and "gcp all GPUs" in h.pooled_from
    z = lifetime_model("gcp", "V100", "mars-central1-a")
    assert z.pooled_from and "mars-central1-a" in z.pooled_from
    zz = lifetime_model("aws", "V100", "us-east-1f")
    assert zz.pooled_from is None and set(zz.data.zone) == {"us-east-1f"}
    assert lifetime_model("aws", "V100") is m  # cached


def test_availability_and_replacement_delay():
    a = availability("aws", "V100", "us-east-1a")
    b = availability("aws", "V100", "us-west-2c")
    assert 0 < a.p_obtain(1) < b.p_obtain(1) <= 1
    assert a.p_obtain(8) <= a.p_obtain(1)
    assert availability("aws", "H100").pooled_from
    r = replacement_delay("aws", "V100")
    assert r.p95_s > r.mean_s > r.mean_startup_s > 60
    s = r.sample(100, 1)
    assert s.shape == (100,) and (s > 0).all()


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "spottrain.cli.main", "transience", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_json_and_plot_no_overwrite(tmp_path):
    png = tmp_path / "v100.png"
    r = _cli("--gpu", "V100", "--cloud", "gcp", "--nodes", "4", "--json", "--plot", str(png))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["chosen"] in ("exponential", "weibull", "bathtub")
    assert {row["model"] for row in out["models"]} >= {"kaplan-meier", "exponential", "weibull"}
    assert out["job"]["optimal_interval_s"] > 0 and out["job"]["expected_slowdown"] >= 1
    assert png.stat().st_size > 10_000
    before = png.read_bytes()
    r2 = _cli("--gpu", "V100", "--cloud", "gcp", "--plot", str(png))
    assert r2.returncode == 2 and "--force" in r2.stderr and "Traceback" not in r2.stderr
    assert png.read_bytes() == before


def test_cli_bad_cloud_is_one_line_error():
    r = _cli("--gpu", "V100", "--cloud", "gpc")
    assert r.returncode == 2 and "did you mean gcp" in r.stderr and "Traceback" not in r.stderr
