"""`spottrain predict` / `validate` end to end through the CLI entry point."""

import json
import subprocess
import sys

import pytest

from spottrain.cli.main import main


def run(capsys, *args):
    code = None
    try:  # success returns (the CLI runs click outside standalone mode); errors exit
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_predict_zoo_json(capsys):
    code, out, _ = run(capsys, "predict", "--model", "resnet50", "--batch-size", "64", "--cluster", "4xV100",
                       "--ps", "1", "--sync", "async", "--json")
    assert code in (0, None)
    d = json.loads(out)
    assert d["low"] < d["throughput"] < d["high"] and d["bottleneck"] in {"compute", "memory", "host", "input", "network", "ps", "pcie"}


def test_predict_queries_writes_columns_and_refuses_overwrite(tmp_path, capsys):
    m = tmp_path / "m.csv"
    m.write_text("model,batch_size,cluster,ps,sync,throughput,flops_per_sample,param_count\n" + "".join(
        f"x,32,{n}xV100,0,sync,{300 * n * (0.95 ** n):.1f},5e9,20000000\n" for n in (1, 2, 3, 4, 5, 6)))
    q = tmp_path / "q.csv"
    q.write_text("model,batch_size,cluster,ps,sync,throughput,flops_per_sample,param_count\nx,32,8xV100,0,sync,,5e9,20000000\n")
    out = tmp_path / "p.csv"
    code, _, _ = run(capsys, "predict", "--measurements", str(m), "--queries", str(q), "--out", str(out))
    assert code in (0, None)
    header = out.read_text().splitlines()[0].split(",")
    assert {"throughput_pred", "throughput_low", "throughput_high", "bottleneck"} <= set(header)
    code, _, err = run(capsys, "predict", "--queries", str(q), "--out", str(out))
    assert code == 2 and "--force" in err


def test_predict_queries_with_measured_throughput_says_how_far_off_and_how_often_inside(tmp_path, capsys):
    """Queries that carry a measured throughput are scored as a table: mean error and how many fall
    inside their interval (what anyone can run on real rows of their own)."""
    q = tmp_path / "q.csv"
    q.write_text("model,batch_size,cluster,ps,sync,throughput,flops_per_sample,param_count\n"
                 "resnet50,128,1xV100,0,sync,369.0,24600000000,25557032\n"   # Lambda's row: inside
                 "resnet50,128,1xV100:2,0,sync,7100.0,24600000000,25557032\n"  # 10x Lambda's: synthetic, far off
                 "resnet50,128,1xV100:4,0,sync,,24600000000,25557032\n")      # no measurement: not scored
    out = tmp_path / "p.csv"
    code, printed, _ = run(capsys, "predict", "--queries", str(q), "--no-from-store", "--out", str(out))
    assert code in (0, None)
    said = " ".join(printed.split())
    assert "2 queries with a measured throughput" in said and "1 inside their ~90 % interval (50 %)" in said
    rows = [dict(zip(lines[0].split(","), line.split(","))) for lines in [out.read_text().splitlines()]
            for line in lines[1:3]]
    ape = [abs(float(r["throughput_pred"]) - float(r["throughput"])) / float(r["throughput"]) for r in rows]
    assert f"mean error {100 * sum(ape) / 2:.1f} %" in said


def test_bad_table_exits_2_naming_row_and_column(tmp_path, capsys):
    m = tmp_path / "m.csv"
    m.write_text("model,batch_size,cluster,ps,sync,throughput,flops_per_sample,param_count\nx,32,2xQ100,0,sync,5,1e9,10\n")
    code, _, err = run(capsys, "validate", "--measurements", str(m))
    assert code == 2 and "line 2" in err and "column cluster" in err and "Traceback" not in err


def test_validate_prints_per_group(capsys):
    from spottrain.perf.measurements import shipped_tables

    code, out, _ = run(capsys, "validate", "--measurements", str(shipped_tables()["transient_dl"]), "--folds", "3",
                       "--group-by", "ps", "--json")
    d = json.loads(out)
    assert set(d["groups"]) == {"ps=1", "ps=2"} and d["mape"] > 0


def test_predict_says_what_the_bottleneck_means_and_what_relieves_it(capsys):
    code, out, _ = run(capsys, "predict", "--model", "resnet50", "--batch-size", "1", "--cluster", "1xH100",
                       "--precision", "fp16")
    assert code in (0, None)
    assert "bottleneck host: the host's per-step work and kernel launches: a larger per-GPU batch helps" in \
        " ".join(out.split())


def test_predict_reads_profiles_name_for_mixed_precision(capsys):
    # `spottrain profile --precision amp` names it amp; predict, plan and run read amp (and bf16) as fp16.
    args = ("predict", "--model", "resnet50", "--batch-size", "64", "--cluster", "1xA100-80GB", "--no-from-store",
            "--json")
    got = {}
    for spelled in ("fp16", "amp", "BF16", "fp32"):
        code, out, _ = run(capsys, *args, "--precision", spelled)
        assert code in (0, None)
        got[spelled] = json.loads(out)["throughput"]
    assert got["amp"] == got["fp16"] == got["BF16"] > 1.2 * got["fp32"]
    code, out, err = run(capsys, *args, "--precision", "int8")
    assert code == 2 and out == "" and "--precision" in err and "int8" in err


def test_predict_says_when_the_compute_step_is_one_your_rows_measured(tmp_path, capsys):
    # synthetic rows: one V100 at two batch sizes; a 2-node query at one of them takes its measured step
    m = tmp_path / "synthetic_one_gpu.csv"
    m.write_text("model,batch_size,cluster,ps,sync,throughput,flops_per_sample,param_count\n"
                 "resnet50,32,1xV100,0,sync,290.0,24299079000,25557032\nresnet50,64,1xV100,0,sync,330.0,24299079000,25557032\n")
    args = ("predict", "--model", "resnet50", "--batch-size", "64", "--measurements", str(m), "--no-from-store")
    code, out, _ = run(capsys, *args, "--cluster", "2xV100:4", "--json")
    assert code in (0, None)
    d = json.loads(out)
    assert d["measured_step"] is True
    # the step less its exposed all-reduce is the measured one-GPU step: 64 / 330 s
    assert d["iteration_time_s"] - d["sync_time_s"] == pytest.approx(64 / 330.0, rel=1e-6)
    code, out, _ = run(capsys, *args, "--cluster", "2xV100:4")
    assert "compute step as your rows measured it on one V100 at batch 64" in out
    code, out, _ = run(capsys, "predict", "--model", "resnet50", "--batch-size", "256", "--measurements", str(m),
                       "--no-from-store", "--cluster", "2xV100:4", "--json")
    assert json.loads(out)["measured_step"] is False  # four times the largest batch measured: the model's own step


def test_predict_in_fp16_off_the_calibration_says_its_interval_holds_other_stacks(capsys):
    """An fp16 prediction with nothing of the user's says its interval carries other software stacks'
    mixed-precision gain (and how to narrow it); an fp32 one does not."""
    said = "fp16 off the shipped calibration: the interval holds how much mixed precision gains"
    code, out, _ = run(capsys, "predict", "--model", "resnet50", "--cluster", "1xA100-80GB", "--precision", "fp16",
                       "--no-from-store")
    assert code in (0, None) and said in " ".join(out.split())
    code, out, _ = run(capsys, "predict", "--model", "resnet50", "--cluster", "1xA100-80GB", "--precision", "fp16",
                       "--no-from-store", "--json")
    assert code in (0, None) and json.loads(out)["stack_borrowed"] is True
    code, out, _ = run(capsys, "predict", "--model", "resnet50", "--cluster", "1xA100-80GB", "--no-from-store")
    assert code in (0, None) and said not in " ".join(out.split())


def test_predict_from_a_profile_on_another_gpu_says_it_takes_half(tmp_path, capsys):
    """A profile timed on one GPU type: the same type is predicted at the profiled step, another type
    takes half of what the profile changes, and the output says so."""
    from spottrain.profiler import profile_zoo

    prof = profile_zoo("resnet32", 8, device="cpu", iterations=3, warmup=1)
    d = json.loads(prof.to_json())
    # synthetic: the CPU profile relabelled as one timed on a V100, at a step 3x the model's guess
    d["device"] = {**d["device"], "kind": "cuda", "name": "Tesla V100"}
    d["step_time_s"] = 3 * 8 / 2500.0
    path = tmp_path / "synthetic_v100_profile.json"
    path.write_text(json.dumps(d))
    code, out, _ = run(capsys, "predict", "--profile", str(path), "--cluster", "1xV100", "--no-from-store", "--json")
    assert code in (0, None) and json.loads(out)["profiled_on"] is None
    code, out, _ = run(capsys, "predict", "--profile", str(path), "--cluster", "1xH100", "--no-from-store")
    assert code in (0, None)
    assert "your profile timed the model on a V100: another GPU type is another machine, so it takes 50%" in \
        " ".join(out.split())
