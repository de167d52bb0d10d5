"""The hostile-input table: bad (and valid but unusual) invocations of every command.

Shared by tests/test_hostile_cli.py (the fast cases, in `make test`) and bench/hostile_input.py
(all of them, as subprocesses with a time limit). Each case is ``(id, argv, expect)``:
``expect`` is ``"refuse"`` (one line on stderr, exit 2) or ``"accept"`` (exit 0). ``{name}`` in an
argument is replaced by the path of fixture ``name`` built by :func:`build_fixtures`; fixture
files are synthetic (made here) or copies of shipped real tables, named as such.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

MEASUREMENTS = Path(str(resources.files("spottrain").joinpath("data", "measurements", "transient_dl.csv")))
CURVES = Path(str(resources.files("spottrain").joinpath("data", "measurements", "curves", "pollux_cifar10.csv")))


def _plan_dict() -> dict:
    from spottrain.plan_file import Plan, PlanGroup, PlanPrediction, PlanWorkload

    plan = Plan(
        workload=PlanWorkload(model="resnet50", batch_size=64, samples_total=1.28e6, flops_per_sample=24.6e9,
                              param_count=25_557_032, gradient_bytes=102e6),
        groups=(PlanGroup(cloud="aws", instance_type="p3.2xlarge", gpu="V100", gpus_per_node=1, count=2, spot=True,
                          region="us-east-1", zone=None, price_usd_per_hour=0.92,
                          on_demand_price_usd_per_hour=3.06, network_gbps=10.0),),
        ps=0, sync="sync",
        prediction=PlanPrediction(throughput_samples_per_s=600, throughput_low=500, throughput_high=700,
                                  duration_s=2200, duration_p95_s=2600, cost_usd=1.2, cost_p95_usd=1.5,
                                  p_meet_deadline=0.97, bottleneck="compute", expected_revocations=0.1),
        checkpoint_interval_s=600, deadline_s=8 * 3600,
    )
    return plan.to_dict()


def _profile_dict() -> dict:
    return {"schema_version": 1, "model": "synthetic-mlp", "batch_size": 32, "param_count": 101770,
            "gradient_bytes": 407080, "flops_per_sample_forward": 2.0e5, "flops_per_sample_backward": 4.0e5,
            "step_time_s": 0.001, "samples_per_s": 32000.0,
            "device": {"kind": "cpu", "name": "synthetic", "peak_tflops": None}}


TRACE = "# cloud: aws\n# gpu: V100\ntime_s,source,event,value\n0,n1,start,\n0,n2,start,\n3600,n1,revoke,\n7200,n2,end,\n"


def build_fixtures(root: Path) -> dict[str, Path]:
    """Write every fixture file under ``root``; returns name -> path."""
    root.mkdir(parents=True, exist_ok=True)
    f: dict[str, Path] = {}

    def put(name: str, data: bytes | str) -> None:
        p = root / name
        p.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
        f[name.split(".")[0]] = p

    m = MEASUREMENTS.read_text()
    lines = m.splitlines()
    header = lines[0]
    put("m.csv", m)
    put("m_bom.csv", b"\xef\xbb\xbf" + m.encode())
    put("m_crlf.csv", m.replace("\n", "\r\n"))
    put("m_quoted.csv", header + "\n" + "\n".join('"' + r.replace(",", '","') + '"' for r in lines[1:]) + "\n")
    put("m_dupcol.csv", header + ",throughput\n" + "\n".join(r + ",1.0" for r in lines[1:]) + "\n")
    put("m_nomodel.csv", header.replace("model,", "modle,", 1) + "\n" + "\n".join(lines[1:]) + "\n")
    put("m_header_only.csv", header + "\n")
    cols = header.split(",")

    def with_cell(col: str, value: str) -> str:
        i = cols.index(col)
        row = lines[1].split(",")
        row[i] = value
        return header + "\n" + ",".join(row) + "\n" + "\n".join(lines[2:]) + "\n"

    for col, value, tag in [("throughput", "nan", "thr_nan"), ("throughput", "-5", "thr_neg"),
                            ("throughput", "1e999", "thr_inf"), ("batch_size", "0", "batch0"),
                            ("batch_size", "3.5", "batch_frac"), ("batch_size", "many", "batch_word"),
                            ("cluster", "4xV1000", "cluster_unknown"), ("cluster", "0xV100", "cluster0"),
                            ("cluster", "1xV100:64", "cluster_pernode"), ("ps", "-1", "ps_neg"),
                            ("sync", "maybe", "sync_bad"), ("precision", "fp8", "prec_bad"),
                            ("network_gbps", "inf", "net_inf"), ("param_count", "1.5", "param_frac")]:
        put(f"m_{tag}.csv", with_cell(col, value))
    put("m_extra_fields.csv", header + "\n" + lines[1] + ",x,y\n")
    put("binary.csv", bytes(range(256)) * 4)
    put("nul.csv", header + "\n" + lines[1] + "\x00\n")
    put("latin1.csv", (header + "\n" + lines[1].replace("t2t-res32", "t2t-résumé") + "\n").encode("latin-1"))
    put("empty.csv", "")
    put("blank.csv", "\n\n   \n")
    put("unterminated.csv", header + '\n"t2t-res32,128\n')

    # Plans (synthetic, built from the dataclasses) and hand-edited variants.
    plan = _plan_dict()
    put("plan.json", json.dumps(plan))
    put("plan_bom.json", b"\xef\xbb\xbf" + json.dumps(plan).encode())

    def plan_variant(tag: str, edit) -> None:
        d = json.loads(json.dumps(plan))
        edit(d)
        put(f"plan_{tag}.json", json.dumps(d))

    plan_variant("neg_interval", lambda d: d.update(checkpoint_interval_s=-60))
    plan_variant("neg_price", lambda d: d["groups"][0].update(price_usd_per_hour=-3))
    plan_variant("count0", lambda d: d["groups"][0].update(count=0))
    plan_variant("count_huge", lambda d: d["groups"][0].update(count=10**9))
    plan_variant("count_str", lambda d: d["groups"][0].update(count="2"))
    plan_variant("count_frac", lambda d: d["groups"][0].update(count=2.5))
    plan_variant("gpu_mismatch", lambda d: d["groups"][0].update(gpu="K80"))
    plan_variant("cloud_bad", lambda d: d["groups"][0].update(cloud="aws2"))
    plan_variant("region_bad", lambda d: d["groups"][0].update(region="mars-1"))
    plan_variant("no_groups", lambda d: d.update(groups=[]))
    plan_variant("no_prediction", lambda d: d.pop("prediction"))
    plan_variant("extra_key", lambda d: d.update(colour="blue"))
    plan_variant("sync_bad", lambda d: d.update(sync="sometimes"))
    plan_variant("policy_bad", lambda d: d.update(policy="replace-nothing"))
    plan_variant("deadline_neg", lambda d: d.update(deadline_s=-1))
    plan_variant("groups_dict", lambda d: d.update(groups={"a": 1}))
    plan_variant("confidence_2", lambda d: d.update(confidence=2))
    plan_variant("on_demand_2", lambda d: d["prediction"].update(p_on_demand=1.5))
    plan_variant("gpus_per_node_64", lambda d: d["groups"][0].update(gpus_per_node=64))
    put("plan_inf.json", json.dumps(plan).replace('"checkpoint_interval_s": 600', '"checkpoint_interval_s": 1e999'))
    put("plan_nan.json", json.dumps(plan).replace('"checkpoint_interval_s": 600', '"checkpoint_interval_s": NaN'))
    put("plan_list.json", "[1, 2, 3]")
    put("plan_truncated.json", json.dumps(plan)[:200])
    put("plan_deep.json", "[" * 100000 + "]" * 100000)

    prof = _profile_dict()
    put("profile.json", json.dumps(prof))

    def prof_variant(tag: str, **changes) -> None:
        put(f"profile_{tag}.json", json.dumps({**prof, **changes}))

    prof_variant("step_neg", step_time_s=-1)
    prof_variant("batch0", batch_size=0)
    prof_variant("batch_str", batch_size="32")
    prof_variant("device_str", device="cpu")
    prof_variant("version9", schema_version=9)
    put("profile_list.json", "[]")
    put("profile_inf.json", json.dumps(prof).replace('"step_time_s": 0.001', '"step_time_s": 1e999'))

    put("trace.csv", TRACE)
    put("trace_bom.csv", b"\xef\xbb\xbf" + TRACE.encode())
    put("trace_crlf.csv", TRACE.replace("\n", "\r\n"))
    put("trace_nan.csv", TRACE.replace("3600,n1", "nan,n1"))
    put("trace_neg.csv", TRACE.replace("0,n1,start", "-5,n1,start"))
    put("trace_unsorted.csv", TRACE.replace("7200,n2", "10,n2"))
    put("trace_event.csv", TRACE.replace("n1,revoke", "n1,explode"))
    put("trace_nostart.csv", TRACE.replace("0,n2,start,\n", ""))
    put("trace_duration_nan.csv", "# duration_s: nan\n" + TRACE)
    put("trace_dupcol.csv", TRACE.replace("time_s,source,event,value", "time_s,source,event,time_s"))
    put("trace_meta.csv", "# colour: red\n" + TRACE)
    put("trace_cloud.csv", TRACE.replace("# cloud: aws", "# cloud: mars"))

    c = CURVES.read_text()
    put("curves.csv", c)
    put("curves_bom.csv", b"\xef\xbb\xbf" + c.encode())
    put("curves_nostep.csv", c.replace("model,step,", "model,stp,", 1))
    put("curves_nan.csv", c.replace(",390,0.4455,", ",390,nan,", 1))
    put("curves_dupcol.csv", c.replace("model,step,accuracy,", "model,step,accuracy,accuracy,", 1))

    cat = root / "vms.csv"
    cat.write_text("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
                   "p3.2xlarge,V100,1,8,61,3.06,0.92,us-east-1,us-east-1a\n")
    f["vms"] = cat
    put("vms_dupcol.csv", cat.read_text().replace("Region,", "Region,Region,", 1))
    put("vms_inf.csv", cat.read_text().replace("0.92", "inf"))
    put("vms_count.csv", cat.read_text().replace("V100,1,", "V100,1.5,"))

    (root / "adir").mkdir(exist_ok=True)
    f["adir"] = root / "adir"
    f["missing"] = root / "no_such_file.csv"
    f["out_missing_dir"] = root / "no_such_dir" / "out.json"
    ro = root / "readonly"
    ro.mkdir(exist_ok=True)
    os.chmod(ro, 0o555)
    f["out_readonly"] = ro / "out.json"
    f["out_new"] = root / "new_out.json"
    f["out_png_dir"] = root / "adir"
    return f


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    expect: str = "refuse"
    fast: bool = True
    """Fast cases run in `make test`; slow ones (real work before the refusal, or an accepted run)
    only in the bench."""


def _file_cases(cmd: list[str], flag: str, good: str, kinds: list[str]) -> list[Case]:
    out = []
    for bad in ["missing", "adir", "binary", "nul", "latin1", "empty", "blank", *kinds]:
        out.append(Case(f"{cmd[0]} {flag} {bad}", (*cmd, flag, "{" + bad + "}")))
    return out


def cases() -> list[Case]:
    """Every case of the table."""
    cs: list[Case] = []
    add = cs.append
    # --- files ---------------------------------------------------------------------------------
    meas_bad = ["m_dupcol", "m_nomodel", "m_header_only", "m_thr_nan", "m_thr_neg", "m_thr_inf", "m_batch0",
                "m_batch_frac", "m_batch_word", "m_cluster_unknown", "m_cluster0", "m_cluster_pernode",
                "m_ps_neg", "m_sync_bad", "m_prec_bad", "m_net_inf", "m_param_frac", "m_extra_fields",
                "unterminated"]
    cs += _file_cases(["validate", "--folds", "2"], "--measurements", "m", meas_bad)
    for bad in ["missing", "binary", "m_dupcol", "m_thr_nan", "m_cluster_unknown", "latin1"]:
        add(Case(f"predict --measurements {bad}", ("predict", "--model", "resnet50", "--cluster", "4xV100",
                                                    "--measurements", "{" + bad + "}")))
        add(Case(f"predict --queries {bad}", ("predict", "--queries", "{" + bad + "}")))
    for ok in ["m_bom", "m_crlf", "m_quoted"]:
        add(Case(f"validate --measurements {ok} (valid)", ("validate", "--folds", "2", "--measurements", "{" + ok + "}"),
                 "accept", fast=False))
    plan_bad = ["plan_neg_interval", "plan_neg_price", "plan_count0", "plan_count_huge", "plan_count_str",
                "plan_count_frac", "plan_gpu_mismatch", "plan_cloud_bad", "plan_region_bad", "plan_no_groups",
                "plan_no_prediction", "plan_extra_key", "plan_sync_bad", "plan_policy_bad", "plan_deadline_neg",
                "plan_groups_dict", "plan_confidence_2", "plan_on_demand_2", "plan_gpus_per_node_64", "plan_inf", "plan_nan",
                "plan_list", "plan_truncated", "plan_deep"]
    cs += _file_cases(["simulate", "--runs", "5"], "--plan", "plan", plan_bad)
    for bad in ["binary", "plan_neg_price", "plan_list", "adir"]:
        add(Case(f"run --plan {bad}", ("run", "--plan", "{" + bad + "}", "--example", "mlp", "--steps", "5")))
    add(Case("simulate --plan plan_bom (valid)", ("simulate", "--plan", "{plan_bom}", "--runs", "5", "--workers", "1"),
             "accept", fast=False))
    prof_bad = ["profile_step_neg", "profile_batch0", "profile_batch_str", "profile_device_str", "profile_version9",
                "profile_list", "profile_inf"]
    for bad in ["missing", "adir", "binary", "latin1", "empty", *prof_bad]:
        add(Case(f"predict --profile {bad}", ("predict", "--profile", "{" + bad + "}", "--cluster", "4xV100")))
        add(Case(f"plan --profile {bad}", ("plan", "--profile", "{" + bad + "}", "--deadline", "8h",
                                             "--samples", "1M")))
    trace_bad = ["trace_nan", "trace_neg", "trace_unsorted", "trace_event", "trace_nostart", "trace_duration_nan",
                 "trace_dupcol", "trace_meta", "trace_cloud"]
    cs += _file_cases(["simulate", "--plan", "{plan}", "--runs", "5"], "--trace", "trace", trace_bad)
    curve_bad = ["curves_nostep", "curves_nan", "curves_dupcol", "m"]
    cs += _file_cases(["converge", "--target", "0.8", "--sync", "sync"], "--curves", "curves", curve_bad)
    cat_bad = ["vms_dupcol", "vms_inf", "vms_count"]
    cs += _file_cases(["catalog"], "--catalog", "vms", cat_bad)
    add(Case("catalog --catalog vms (valid)", ("catalog", "--catalog", "{vms}"), "accept"))
    # --- numeric flags ---------------------------------------------------------------------------
    numeric = [
        (["catalog"], "--limit", ["-1", "nan", "1e3", "abc"]),
        (["predict", "--model", "resnet50", "--cluster", "4xV100"], "--batch-size", ["0", "-3", "1e9", "abc"]),
        (["predict", "--model", "resnet50", "--cluster", "4xV100"], "--network-gbps", ["-1", "0", "nan", "inf", "1e9"]),
        (["predict", "--model", "resnet50", "--cluster", "4xV100"], "--ps", ["-1", "100000"]),
        (["validate", "--measurements", "{m}"], "--folds", ["0", "1", "-2", "100000"]),
        (["converge", "--curves", "{curves}", "--sync", "sync"], "--target", ["nan", "inf", "-1"]),
        (["converge", "--curves", "{curves}", "--target", "0.8"], "--batch-size", ["0", "nan", "-4"]),
        (["converge", "--curves", "{curves}", "--target", "0.8"], "--workers", ["0", "-1", "100000000"]),
        (["transience", "--gpu", "V100"], "--nodes", ["0", "-1", "100000000", "1e3"]),
        (["transience", "--gpu", "V100"], "--duration", ["0s", "-1h", "nanh", "infh", "1000000000h", "8"]),
        (["transience", "--gpu", "V100"], "--checkpoint-cost", ["-1s", "nans", "1000000000h"]),
        (["simulate", "--plan", "{plan}"], "--runs", ["0", "-1", "1e9", "100000000000"]),
        (["simulate", "--plan", "{plan}"], "--workers", ["0", "-1", "100000"]),
        (["simulate", "--plan", "{plan}"], "--alternatives", ["-1", "1000000"]),
        (["simulate", "--plan", "{plan}"], "--seed", ["-1", "99999999999999999999"]),
        (["reproduce", "icac19"], "--runs", ["0", "-5", "1000000000"]),
        (["plan", "--model", "resnet50", "--samples", "1M", "--deadline", "8h"], "--batch-size", ["0", "-1", "1e9"]),
        (["plan", "--model", "resnet50", "--samples", "1M", "--deadline", "8h"], "--confidence", ["0", "1", "1.5", "nan"]),
        (["plan", "--model", "resnet50", "--samples", "1M", "--deadline", "8h"], "--max-nodes", ["0", "-1", "100000000"]),
        (["plan", "--model", "resnet50", "--samples", "1M", "--deadline", "8h"], "--max-types", ["0", "1000"]),
        (["plan", "--model", "resnet50", "--samples", "1M", "--deadline", "8h"], "--on-demand-share", ["-0.1", "1", "nan"]),
        (["plan", "--model", "resnet50", "--samples", "1M", "--deadline", "8h"], "--ps", ["-1", "100000"]),
        (["plan", "--model", "resnet50", "--samples", "1M", "--deadline", "8h"], "--refine-runs", ["0", "-1", "1e9"]),
        (["plan", "--model", "resnet50", "--samples", "1M"], "--deadline", ["0h", "-8h", "nanh", "infh"]),
        (["plan", "--model", "resnet50", "--samples", "1M"], "--budget", ["-5", "0", "nan", "inf"]),
        (["plan", "--model", "resnet50", "--deadline", "8h"], "--samples", ["0", "-1M", "nan", "infM"]),
        (["plan", "--model", "resnet50", "--samples", "1M", "--deadline", "8h"], "--target-loss", ["nan", "inf"]),
        (["profile", "--model", "mlp"], "--batch-size", ["0", "-1", "100000000000"]),
        (["profile", "--model", "mlp"], "--iterations", ["0", "-1", "1000000000"]),
        (["profile", "--model", "mlp"], "--warmup", ["-1", "1000000000"]),
        (["profile", "--model", "mlp"], "--lr", ["nan", "inf", "-1", "0"]),
        (["profile", "--model", "mlp"], "--loss-steps", ["-1", "1000000000"]),
        (["profile", "--model", "mlp"], "--max-time", ["0", "-1", "nan", "inf"]),
        (["run", "--example", "mlp"], "--workers", ["0", "-1", "100000"]),
        (["run", "--example", "mlp"], "--steps", ["0", "-1"]),
        (["run", "--example", "mlp", "--steps", "5"], "--global-batch", ["0", "-8"]),
        (["run", "--example", "mlp", "--steps", "5"], "--keep", ["0", "-1"]),
        (["run", "--example", "mlp", "--steps", "5"], "--checkpoint-every", ["0", "-1"]),
        (["run", "--example", "mlp", "--steps", "5"], "--checkpoint-interval", ["0s", "-1s", "nans"]),
        (["run", "--example", "mlp", "--steps", "5"], "--timeout", ["0s", "-5m", "nanm"]),
        (["run", "--example", "mlp", "--steps", "5"], "--controller-port", ["0", "-1", "70000"]),
    ]
    for base, flag, values in numeric:
        for v in values:
            add(Case(f"{base[0]} {flag} {v}", (*base, flag, v)))
    # --- names -------------------------------------------------------------------------------------
    for v in ["V100 💥", "V100 x", "V10O", "", "A" * 300, "V100\n"]:
        add(Case(f"catalog --gpu {v[:20]!r}", ("catalog", "--gpu", v)))
        add(Case(f"transience --gpu {v[:20]!r}", ("transience", "--gpu", v)))
    for v in ["aws2", "AWS!", ""]:
        add(Case(f"catalog --cloud {v!r}", ("catalog", "--cloud", v)))
        add(Case(f"transience --cloud {v!r}", ("transience", "--gpu", "V100", "--cloud", v)))
    add(Case("catalog --sort cost", ("catalog", "--sort", "cost")))
    add(Case("catalog --region mars-1", ("catalog", "--region", "mars-1")))
    add(Case("predict --cluster 4xV1000", ("predict", "--model", "resnet50", "--cluster", "4xV1000")))
    add(Case("predict --cluster 0xV100", ("predict", "--model", "resnet50", "--cluster", "0xV100")))
    add(Case("predict --cluster 100000000xV100", ("predict", "--model", "resnet50", "--cluster", "100000000xV100")))
    add(Case("predict --sync maybe", ("predict", "--model", "resnet50", "--cluster", "4xV100", "--sync", "maybe")))
    add(Case("predict --model resnet5O", ("predict", "--model", "resnet5O", "--cluster", "4xV100")))
    add(Case("predict --precision fp8", ("predict", "--model", "resnet50", "--cluster", "4xV100", "--precision", "fp8")))
    add(Case("validate --group-by colour", ("validate", "--measurements", "{m}", "--group-by", "colour")))
    add(Case("validate --prior none", ("validate", "--measurements", "{m}", "--prior", "none")))
    add(Case("converge --sync maybe", ("converge", "--curves", "{curves}", "--target", "0.8", "--sync", "maybe")))
    add(Case("converge --form other", ("converge", "--curves", "{curves}", "--target", "0.8", "--form", "other")))
    add(Case("simulate --policy nope", ("simulate", "--plan", "{plan}", "--policy", "nope")))
    add(Case("simulate --model other", ("simulate", "--plan", "{plan}", "--model", "other")))
    add(Case("simulate --trace unknown-name", ("simulate", "--plan", "{plan}", "--trace", "no-such-trace")))
    add(Case("simulate --prices unknown", ("simulate", "--plan", "{plan}", "--prices", "no-such-prices")))
    add(Case("reproduce icac20", ("reproduce", "icac20")))
    add(Case("plan --model resnet5O", ("plan", "--model", "resnet5O", "--samples", "1M", "--deadline", "8h")))
    add(Case("plan --clouds aws,mars", ("plan", "--model", "resnet50", "--samples", "1M", "--deadline", "8h",
                                        "--clouds", "aws,mars")))
    add(Case("plan --gpus V100,X", ("plan", "--model", "resnet50", "--samples", "1M", "--deadline", "8h",
                                    "--gpus", "V100,X")))
    add(Case("plan --sync maybe", ("plan", "--model", "resnet50", "--samples", "1M", "--deadline", "8h",
                                   "--sync", "maybe")))
    add(Case("plan --quota bad", ("plan", "--model", "resnet50", "--samples", "1M", "--deadline", "8h",
                                  "--quota", "p3.2xlarge=-1")))
    add(Case("profile --model nosuch", ("profile", "--model", "no_such_model_xyz")))
    add(Case("profile --device tpu", ("profile", "--model", "mlp", "--device", "tpu")))
    add(Case("profile --precision fp8", ("profile", "--model", "mlp", "--precision", "fp8")))
    add(Case("profile --optimizer lion", ("profile", "--model", "mlp", "--optimizer", "lion")))
    add(Case("run --example nosuch", ("run", "--example", "nosuch", "--steps", "5")))
    add(Case("run --backend nosuch", ("run", "--example", "mlp", "--steps", "5", "--backend", "nosuch")))
    add(Case("run --rescale nosuch", ("run", "--example", "mlp", "--steps", "5", "--rescale", "nosuch")))
    add(Case("run --policy nosuch", ("run", "--example", "mlp", "--steps", "5", "--policy", "nosuch")))
    # --- contradictions ---------------------------------------------------------------------------
    add(Case("predict --profile and --model", ("predict", "--profile", "{profile}", "--model", "resnet50",
                                               "--cluster", "4xV100")))
    add(Case("plan --spot-only --on-demand-anchor", ("plan", "--model", "resnet50", "--samples", "1M", "--deadline",
                                                     "8h", "--spot-only", "--on-demand-anchor")))
    add(Case("plan --samples and --epochs", ("plan", "--model", "resnet50", "--samples", "1M", "--epochs", "3",
                                             "--dataset-size", "1M", "--deadline", "8h")))
    add(Case("plan --sync sync --ps 2", ("plan", "--model", "resnet50", "--samples", "1M", "--deadline", "8h",
                                         "--sync", "sync", "--ps", "2")))
    add(Case("simulate --trace and --model fitted", ("simulate", "--plan", "{plan}", "--trace", "{trace}",
                                                     "--model", "fitted")))
    add(Case("run --checkpoint-interval and --checkpoint-every", ("run", "--example", "mlp", "--steps", "5",
                                                                  "--checkpoint-interval", "30s",
                                                                  "--checkpoint-every", "5")))
    add(Case("run --global-batch below --workers", ("run", "--example", "mlp", "--steps", "5", "--workers", "4",
                                                    "--global-batch", "2")))
    # --- output paths -----------------------------------------------------------------------------
    for out in ["adir", "out_missing_dir", "out_readonly", "plan"]:
        add(Case(f"plan --out {out}", ("plan", "--model", "resnet50", "--samples", "1M", "--deadline", "8h",
                                       "--out", "{" + out + "}")))
        add(Case(f"predict --out {out}", ("predict", "--queries", "{m}", "--out", "{" + out + "}")))
    for out in ["adir", "out_missing_dir", "out_readonly"]:
        add(Case(f"transience --plot {out}", ("transience", "--gpu", "V100", "--plot", "{" + out + "}")))
        add(Case(f"simulate --report {out}", ("simulate", "--plan", "{plan}", "--report", "{" + out + "}")))
        add(Case(f"profile --out {out}", ("profile", "--model", "mlp", "--out", "{" + out + "}")))
    add(Case("simulate --timeline adir", ("simulate", "--plan", "{plan}", "--timeline", "{adir}")))
    # --- usage errors: one line, not typer's box --------------------------------------------------
    add(Case("unknown command", ("catalogue",)))
    add(Case("unknown option", ("catalog", "--gpux", "V100")))
    add(Case("missing option value", ("catalog", "--gpu")))
    add(Case("missing required option", ("simulate",)))
    add(Case("int flag given a word", ("simulate", "--plan", "{plan}", "--runs", "many")))
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # root writes into read-only directories
        cs = [c for c in cs if "out_readonly" not in c.id]
    return cs


# --- running a case -----------------------------------------------------------------------------


@dataclass
class Outcome:
    case: Case
    rc: int | None
    stderr: str
    seconds: float

    @property
    def kind(self) -> str:
        """``clean``, ``traceback``, ``accepted`` (a bad input exit 0), ``box`` (several lines),
        ``other`` (another exit code), ``hang``, or ``ok`` for an accepted valid input."""
        if self.rc is None:
            return "hang"
        if "Traceback (most recent call last)" in self.stderr:
            return "traceback"
        if self.case.expect == "accept":
            return "ok" if self.rc == 0 else "refused-valid"
        if self.rc == 0:
            return "accepted"
        lines = [ln for ln in self.stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]
        if self.rc == 2 and len(lines) == 1 and lines[0].startswith("error:"):
            return "clean"
        return "box" if self.rc == 2 else "other"


def expand(case: Case, fixtures: dict[str, Path]) -> list[str]:
    out = []
    for a in case.argv:
        for k, v in fixtures.items():
            a = a.replace("{" + k + "}", str(v))
        out.append(a)
    return out


def run_subprocess(case: Case, fixtures: dict[str, Path], *, timeout_s: float = 60.0, cwd: Path | None = None,
                   env: dict | None = None) -> Outcome:
    """Run one case as ``python -m spottrain.cli.main ...`` with a time limit."""
    argv = [sys.executable, "-m", "spottrain.cli.main", *expand(case, fixtures)]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=cwd,
                           env={**os.environ, "COLUMNS": "200", **(env or {})})
        return Outcome(case, p.returncode, p.stderr, time.perf_counter() - t0)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return Outcome(case, None, err, time.perf_counter() - t0)


def run_inprocess(case: Case, fixtures: dict[str, Path]) -> Outcome:
    """Run one case through :func:`spottrain.cli.main.main` in this process (stdout/stderr captured)."""
    import contextlib
    import io
    import traceback

    from spottrain.cli.main import main

    err, out = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    rc: int | None = 0
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            main(expand(case, fixtures))
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # a bug: what a user would see as a traceback
            err.write(traceback.format_exc())
            rc = 1
    return Outcome(case, rc, err.getvalue(), time.perf_counter() - t0)


def cleanup(root: Path) -> None:
    ro = root / "readonly"
    if ro.exists():
        os.chmod(ro, 0o755)
    shutil.rmtree(root, ignore_errors=True)
