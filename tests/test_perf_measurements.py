"""Measurement tables: parsing, shipped real data, bad input naming row and column."""

import pytest

from spottrain.errors import InputError
from spottrain.perf import load_shipped, read_measurements, write_measurements
from spottrain.perf.measurements import shipped_tables

HEADER = "model,batch_size,cluster,ps,sync,throughput,flops_per_sample,param_count\n"


def _write(tmp_path, body, header=HEADER):
    p = tmp_path / "m.csv"
    p.write_text(header + body)
    return p


def test_shipped_tables_are_real_and_valid():
    names = shipped_tables()
    assert {"cmdare", "transient_dl", "lambda"} <= set(names)
    rows = load_shipped()
    assert len(rows) > 300
    assert all(r.throughput > 0 for r in rows)
    gpus = {g.gpu for r in rows for g in r.cluster.groups}
    assert {"K80", "P100", "V100", "H100"} <= gpus


def test_roundtrip_keeps_rows(tmp_path):
    p = _write(tmp_path, "m1,128,1xV100+2xK80,1,async,100,1e9,1000\nm1,64,2xA100:8,0,sync,50,1e9,1000\n")
    rows = read_measurements(p)
    assert str(rows[0].cluster) == "1xV100+2xK80" and rows[1].cluster.total_gpus == 16
    out = tmp_path / "o.csv"
    write_measurements(rows, out, extra_columns={"x": [1, 2]})
    again = read_measurements(out)
    assert [(r.model, str(r.cluster), r.throughput) for r in again] == [(r.model, str(r.cluster), r.throughput) for r in rows]


@pytest.mark.parametrize("body,column", [
    ("m1,128,4xV10,1,async,100,1e9,1000\n", "cluster"),
    ("m1,128,4-K80,1,async,100,1e9,1000\n", "cluster"),
    ("m1,128,4xK80,1,async,0,1e9,1000\n", "throughput"),
    ("m1,128,4xK80,1,async,-5,1e9,1000\n", "throughput"),
    ("m1,128,4xK80,1,maybe,5,1e9,1000\n", "sync"),
    ("m1,12.5,4xK80,1,async,5,1e9,1000\n", "batch_size"),
    ("notazoomodel,128,4xK80,1,async,5,,\n", "flops_per_sample"),
])
def test_bad_rows_name_line_and_column(tmp_path, body, column):
    p = _write(tmp_path, "m1,128,1xK80,1,async,100,1e9,1000\n" + body)
    with pytest.raises(InputError) as exc:
        read_measurements(p)
    assert "line 3" in str(exc.value) and f"column {column}" in str(exc.value)


def test_missing_required_column(tmp_path):
    p = _write(tmp_path, "m1,128,1,async,100\n", header="model,batch_size,ps,sync,throughput\n")
    with pytest.raises(InputError, match="column cluster"):
        read_measurements(p)


def test_a_table_without_ps_and_sync_is_synchronous_all_reduce(tmp_path):
    """A PyTorch DDP user's table needs no ps or sync column: they read as 0 and sync, as empty cells do."""
    measured = read_measurements(_write(tmp_path, "resnet50,64,2xT4:4,1200\n", header="model,batch_size,cluster,throughput\n"))
    queried = read_measurements(_write(tmp_path, "resnet50,64,4xT4:4\n", header="model,batch_size,cluster\n"), query=True)
    for rows in (measured, queried):
        assert (rows[0].ps, rows[0].sync) == (0, "sync")
    # a parameter-server row still says so, and async without a server is refused as before
    ps_only = _write(tmp_path, "m1,128,1xK80,1,100,1e9,1000\n",
                     header="model,batch_size,cluster,ps,throughput,flops_per_sample,param_count\n")
    assert (read_measurements(ps_only)[0].ps, read_measurements(ps_only)[0].sync) == (1, "sync")
    bad = _write(tmp_path, "m1,128,1xK80,async,100,1e9,1000\n",
                 header="model,batch_size,cluster,sync,throughput,flops_per_sample,param_count\n")
    with pytest.raises(InputError, match="line 2, column ps"):
        read_measurements(bad)


def test_a_precision_is_read_as_other_tables_and_tools_spell_it(tmp_path):
    """amp, bf16, mixed, half mean mixed precision (fp16); tf32, float32 what fp32 means on Ampere
    and later GPUs; one table and the CLI's --precision read them alike; anything else names its line."""
    spellings = {"AMP": "fp16", "bf16": "fp16", "mixed": "fp16", "half": "fp16", "fp16": "fp16",
                 "tf32": "fp32", "float32": "fp32", "": "fp32"}
    body = "".join(f"resnet50,64,1xA100,{s}\n" for s in spellings)
    rows = read_measurements(_write(tmp_path, body, header="model,batch_size,cluster,precision\n"), query=True)
    assert [r.precision for r in rows] == list(spellings.values())
    from spottrain.cli.options import precision
    assert [precision(s) for s in spellings if s] == [v for s, v in spellings.items() if s]
    with pytest.raises(InputError, match="line 3, column precision.*got 'fp8'"):
        read_measurements(_write(tmp_path, "resnet50,64,1xA100,amp\nresnet50,64,1xA100,fp8\n",
                                 header="model,batch_size,cluster,precision\n"), query=True)


def test_query_table_may_omit_throughput(tmp_path):
    p = _write(tmp_path, "resnet50,64,4xV100,0,sync,,,\n")
    rows = read_measurements(p, query=True)
    assert rows[0].throughput is None and rows[0].flops_per_sample > 1e9  # derived from the zoo


def test_input_column_is_kept_and_checked(tmp_path):
    header = HEADER.rstrip("\n") + ",input\n"
    p = _write(tmp_path, "resnet50,64,1xV100,0,sync,300,,,device\nresnet50,64,1xV100,0,sync,290,,,\n", header=header)
    rows = read_measurements(p)
    assert [r.input for r in rows] == ["device", "host"]  # empty = the model's data loader on the host
    out = tmp_path / "o.csv"
    write_measurements(rows, out)
    assert [r.input for r in read_measurements(out)] == ["device", "host"]
    bad = _write(tmp_path, "resnet50,64,1xV100,0,sync,300,,,gpu\n", header=header)
    with pytest.raises(InputError) as exc:
        read_measurements(bad)
    assert "line 2" in str(exc.value) and "column input" in str(exc.value) and "host, device" in str(exc.value)


def test_hopper_table_is_the_converted_raw_measurement(tmp_path):
    """The shipped H100/H200 rows are exactly what tools/convert_gpu_speeds.py makes of the raw timing files."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "hopper.csv"
    raws = [str(root / "bench" / "data" / f"gpu_speeds_{g}.csv") for g in ("h100", "h200")]
    subprocess.run([sys.executable, str(root / "tools" / "convert_gpu_speeds.py"), *raws, "--out", str(out)],
                   check=True, capture_output=True)
    assert out.read_text() == shipped_tables()["hopper_zoo"].read_text()
    rows = read_measurements(out)
    assert {r.input for r in rows} == {"device"} and {str(r.cluster) for r in rows} == {"1xH100", "1xH200"}
    assert {"resnet50", "bert-base", "gpt2-small", "lstm-lm"} <= {r.model for r in rows}
    # each machine (host CPU + GPU) is a study of its own: their dispatch speeds differ
    assert {r.extra["source"].split("/")[0] for r in rows} == {"spottrain-zoo-h100", "spottrain-zoo-h200"}


def test_cloud_column_is_kept_and_checked(tmp_path):
    from spottrain.perf.measurements import parse_row

    header = HEADER.rstrip("\n") + ",cloud\n"
    p = _write(tmp_path, "resnet50,64,2xV100:8,0,sync,3000,,,GCP\nresnet50,64,2xV100:8,0,sync,2900,,,\n", header=header)
    rows = read_measurements(p)
    assert [r.cloud for r in rows] == ["gcp", None]  # case folded; empty = not said
    out = tmp_path / "o.csv"
    write_measurements(rows, out)
    assert [r.cloud for r in read_measurements(out)] == ["gcp", None]
    bad = _write(tmp_path, "resnet50,64,2xV100:8,0,sync,300,,,ec2\n", header=header)
    for read in (lambda: read_measurements(bad),
                 lambda: parse_row(dict(zip(header.strip().split(","), "resnet50,64,2xV100:8,0,sync,300,,,ec2".split(","))),
                                   file=str(bad), line=2)):
        with pytest.raises(InputError) as exc:
            read()
        assert "line 2" in str(exc.value) and "column cloud" in str(exc.value) and "aws, gcp, azure" in str(exc.value)


def test_pollux_rows_say_their_cloud():
    # g4dn.12xlarge: the AWS network whose achieved all-reduce rate the calibration fits.
    assert {r.cloud for r in load_shipped(("pollux",))} == {"aws"}
