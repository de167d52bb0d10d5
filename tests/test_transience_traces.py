"""Trace loaders on the shipped real traces, the normalized event model, user trace CSV errors."""

import csv
from pathlib import Path

import pytest

from spottrain.errors import InputError
from spottrain.transience import TraceEvent, list_traces, load_trace, load_user_trace, node_lifetimes
from spottrain.transience.traces import data_dir

TRACES = data_dir()


def test_bamboo_p3_counts_match_raw_file():
    raw = [r for r in csv.reader((TRACES / "bamboo-spot-traces/traces/p3-trace.csv").open()) if r]
    adds = sum(r[1].strip() == "add" for r in raw)
    removes = sum(r[1].strip() == "remove" for r in raw)
    assert removes == 167  # as documented for the Bamboo p3 trace
    tr = load_trace("bamboo-aws-p3")
    kinds = [e.event for e in tr.events]
    assert kinds.count("revoke") == removes and kinds.count("start") == adds
    assert tr.cloud == "aws" and tr.gpu == "V100" and tr.kind == "nodes"
    assert "bamboo" in tr.provenance
    times = [e.time_s for e in tr.events]
    assert times == sorted(times) and times[0] >= 0
    # first event of the raw file (ms) is the first event of the trace (s)
    assert times[0] == pytest.approx(min(float(r[0]) for r in raw) / 1000.0)


def test_transient_dl_training_vm_rows_and_revocations():
    path = TRACES / "transient-dl/training/k80_spot/8-spot/vm_data.csv"
    rows = list(csv.DictReader(path.open()))
    tr = load_trace("transient-dl-training-k80-8")
    starts = [e for e in tr.events if e.event == "start"]
    assert len(starts) == len(rows)
    revoked_raw = sum(r["Revoked"].strip().lower() == "revoked" for r in rows)
    revokes = sum(e.event == "revoke" for e in tr.events)
    assert revokes >= revoked_raw  # plus masters whose job was stopped by hand
    lt = node_lifetimes(tr)
    assert len(lt) == len(rows) and int(lt.observed.sum()) == revokes


def test_transient_dl_lifetime_cap_is_censoring():
    text = (TRACES / "transient-dl/lifetime/lifetime.csv").read_text().splitlines()
    # K80 section: rows until the next GPU header
    tr = load_trace("transient-dl-lifetime-k80")
    lt = node_lifetimes(tr)
    assert tr.cloud == "gcp" and tr.gpu == "K80"
    assert len(lt) > 0 and (lt.durations_s <= 24 * 3600 + 1).all()
    capped = lt.durations_s >= 23.5 * 3600
    assert capped.any() and not lt.observed[capped].any()  # hit the 24 h cap: not a revocation
    assert any(line.startswith("K80") for line in text)


def test_every_shipped_trace_loads_sorted():
    names = list_traces()
    assert len(names) > 10
    for n in names:
        tr = load_trace(n)
        assert len(tr) > 0 and tr.provenance and tr.duration_s >= 0
        t = [e.time_s for e in tr.events]
        assert t == sorted(t) and t[0] >= 0, n


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "trace.csv"
    p.write_text(text)
    return p


def test_user_trace_roundtrip(tmp_path):
    p = _write(tmp_path, "# cloud: aws\n# gpu: v100\n# zone: us-east-1a\n# duration_s: 10000\n"
                         "time_s,source,event,value\n0,n1,start,\n0,n2,start,\n3600,n1,revoke,\n"
                         "5000,us-east-1a,price,0.91\n")
    tr = load_user_trace(p)
    assert tr.cloud == "aws" and tr.gpu == "V100" and tr.zone == "us-east-1a" and tr.duration_s == 10000
    assert tr.events[2] == TraceEvent(time_s=3600.0, source="n1", event="revoke", value=None)
    lt = node_lifetimes(tr)
    assert sorted(zip(lt.durations_s.tolist(), lt.observed.tolist())) == [(3600.0, True), (10000.0, False)]


@pytest.mark.parametrize("text, line, needle", [
    ("", 1, "empty"),
    ("time_s,source,event,value\n", 1, "empty"),
    ("time_s,source,event,value\n0,n1,start,\n100,n2,start,\n50,n1,revoke,\n", 4, "out of order"),
    ("time_s,source,event,value\n-5,n1,start,\n", 2, ">= 0"),
    ("time_s,source,event,zone\n0,n1,start,x\n", 1, "unknown column"),
    ("time_s,source,event,value\n0,n1,boom,\n", 2, "unknown event"),
    ("time_s,source,event,value\n0,n1,revoke,\n", 2, "not running"),
    ("time_s,source,event,value\nabc,n1,start,\n", 2, "number"),
])
def test_user_trace_bad_input_names_file_and_line(tmp_path, text, line, needle):
    p = _write(tmp_path, text)
    with pytest.raises(InputError) as ei:
        load_user_trace(p)
    msg = str(ei.value)
    assert str(p) in msg and f"{line}" in msg and needle in msg
    assert ei.value.line == line
