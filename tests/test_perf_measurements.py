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
    p = _write(tmp_path, "m1,128,1xK80,1,100\n", header="model,batch_size,cluster,ps,throughput\n")
    with pytest.raises(InputError, match="column sync"):
        read_measurements(p)


def test_query_table_may_omit_throughput(tmp_path):
    p = _write(tmp_path, "resnet50,64,4xV100,0,sync,,,\n")
    rows = read_measurements(p, query=True)
    assert rows[0].throughput is None and rows[0].flops_per_sample > 1e9  # derived from the zoo
