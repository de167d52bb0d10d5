"""Property tests of every input reader and the flag parsers: whatever bytes or values Hypothesis
generates, a reader returns a valid result or raises a one-line SpottrainError, never another
exception."""

from __future__ import annotations

import json
import math
import string
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from spottrain.catalog.gpus import canonical_gpu, known_gpus
from spottrain.cli import options
from spottrain.errors import InputError, SpottrainError
from spottrain.files import parse_csv, read_csv, read_json
from spottrain.perf.convergence import read_loss_curves
from spottrain.perf.measurements import DEFAULTED_COLUMNS, REQUIRED_COLUMNS, parse_row, read_measurements, read_table
from spottrain.plan_file import Plan
from spottrain.profiler.schema import Profile
from spottrain.transience.events import load_user_trace

from hostile_cases import TRACE, _plan_dict, _profile_dict

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TMP = Path(tempfile.mkdtemp(prefix="spottrain-prop-"))


def _write(data: bytes, name: str = "f.csv") -> Path:
    p = TMP / name
    p.write_bytes(data)
    return p


def _one_line(exc: SpottrainError) -> None:
    assert "\n" not in str(exc).strip(), str(exc)
    assert str(exc)


def _result_or_refusal(read, *args, error: type[SpottrainError] = SpottrainError):
    """What ``read(*args)`` returns, or None when it refuses with a one-line ``error`` (any other
    exception fails the test)."""
    try:
        return read(*args)
    except error as exc:
        _one_line(exc)
        return None


# Cells a user might type: numbers of every kind, words, blanks, quotes, non-finite spellings.
cells = st.one_of(
    st.sampled_from(["", " ", "0", "-1", "1", "2", "4", "128", "3.5", "1e3", "1e999", "nan", "inf", "-inf", "NaN",
                     "abc", '"', "V100", "4xV100", "1xV100+2xK80", "2xA100:8", "0xK80", "4xV1000", "sync", "async",
                     "fp16", "fp32", "resnet50", "t2t-res32", "1.5e9", "0.1"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10**20, 10**20).map(str),
    st.text(alphabet=string.printable, max_size=8),
)
MEAS_COLS = ["model", "batch_size", "cluster", "ps", "sync", "throughput", "network_gbps", "flops_per_sample",
             "param_count", "precision", "tensor_count", "step_time_s", "sync_time_s", "note"]


@st.composite
def measurement_tables(draw):
    cols = draw(st.lists(st.sampled_from(MEAS_COLS), min_size=1, max_size=9))
    base = ["model", "batch_size", "cluster", "ps", "sync", "throughput"]
    if draw(st.booleans()):
        cols = base + [c for c in cols if c not in base]
    rows = draw(st.lists(st.lists(cells, min_size=len(cols), max_size=len(cols)), max_size=6))
    good = {"model": "resnet50", "batch_size": "32", "cluster": "4xV100", "ps": "0", "sync": "sync",
            "throughput": "1000"}
    if draw(st.booleans()):  # mostly-valid rows with one cell changed find the deeper checks
        rows = [[good.get(c, r[i]) if i != len(r) - 1 or not r else r[i] for i, c in enumerate(cols)] for r in rows]
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(cols)
    w.writerows(rows)
    return buf.getvalue()


@SETTINGS
@given(st.binary(max_size=300))
def test_any_bytes_to_every_csv_reader_give_a_result_or_an_input_error(data):
    path = _write(data)
    for reader in (read_measurements, lambda p: read_measurements(p, query=True), read_loss_curves,
                   load_user_trace, read_table):
        _result_or_refusal(reader, path)


@SETTINGS
@given(st.binary(max_size=300))
def test_any_bytes_as_plan_or_profile_give_a_result_or_an_input_error(data):
    path = _write(data, "f.json")
    for reader in (Plan.load, Profile.load):
        _result_or_refusal(reader, path)


@SETTINGS
@given(measurement_tables())
def test_measurement_reader_agrees_with_parse_row(text):
    """The column-at-once reader accepts exactly what parse_row accepts, row for row."""
    path = _write(text.encode())
    fast = _result_or_refusal(read_measurements, path)
    try:
        header, table = read_table(path)
        missing = [c for c in REQUIRED_COLUMNS if c not in DEFAULTED_COLUMNS and c not in header]
        slow = [parse_row(r, file=str(path), line=i) for i, r in table] if table and not missing else None
    except SpottrainError:
        slow = None
    assert (fast is None) == (slow is None), (fast, slow)
    if fast is not None:
        assert fast == slow


def _mutations(doc: dict, prefix: str = ""):
    for key, value in doc.items():
        if isinstance(value, dict):
            yield from _mutations(value, f"{prefix}{key}.")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            yield from _mutations(value[0], f"{prefix}{key}.0.")
        else:
            yield prefix + key


def _set(doc: dict, path: str, value) -> dict:
    d = json.loads(json.dumps(doc))
    node = d
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    node[parts[-1]] = value
    return d


json_values = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6),
                        st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def _plan_in_range(plan: Plan) -> None:
    assert plan.checkpoint_interval_s > 0 and all(g.count >= 1 and g.price_usd_per_hour >= 0 for g in plan.groups)
    assert math.isfinite(plan.prediction.cost_usd) and plan.prediction.cost_usd >= 0


def _profile_in_range(prof: Profile) -> None:
    assert prof.batch_size >= 1 and prof.step_time_s > 0 and math.isfinite(prof.samples_per_s)


HAND_EDITED = [
    pytest.param(_plan_dict, lambda doc: Plan.from_dict(doc, source="plan.json"), _plan_in_range, id="plan"),
    pytest.param(_profile_dict, lambda doc: Profile.from_dict(doc, source="p.json"), _profile_in_range, id="profile"),
]


@pytest.mark.parametrize(("make_doc", "load", "in_range"), HAND_EDITED)
@SETTINGS
@given(data=st.data(), value=json_values)
def test_a_hand_edited_file_gives_a_result_in_range_or_an_input_error(make_doc, load, in_range, data, value):
    doc = make_doc()
    key = data.draw(st.sampled_from(list(_mutations(doc))), label="key")
    result = _result_or_refusal(load, _set(doc, key, value))
    if result is not None:
        in_range(result)


trace_cells = st.one_of(st.sampled_from(["0", "5", "3600", "-1", "nan", "inf", "n1", "n2", "start", "revoke", "end",
                                         "available", "price", "", "x"]), st.text(alphabet=string.printable,
                                                                                   max_size=5))


@SETTINGS
@given(st.lists(st.tuples(trace_cells, trace_cells, trace_cells, trace_cells), max_size=8),
       st.sampled_from(["", "# cloud: aws\n", "# duration_s: nan\n", "# gpu: V100\n# instance_type: p2.xlarge\n",
                        "# colour: red\n", "\ufeff"]))
def test_generated_traces_give_a_trace_or_an_input_error(rows, meta):
    text = meta + "time_s,source,event,value\n" + "\n".join(",".join(r) for r in rows) + "\n"
    trace = _result_or_refusal(load_user_trace, _write(text.encode(), "t.csv"))
    if trace is not None:
        times = [e.time_s for e in trace.events]
        assert times == sorted(times) and all(math.isfinite(t) and t >= 0 for t in times)


@SETTINGS
@given(st.lists(st.tuples(cells, cells, cells), max_size=6), st.sampled_from(["loss", "accuracy", "f1", "speed"]))
def test_generated_loss_curves_give_curves_or_an_input_error(rows, metric):
    text = f"step,{metric},batch_size\n" + "\n".join(",".join(r).replace("\n", " ") for r in rows) + "\n"
    curves = _result_or_refusal(read_loss_curves, _write(text.encode(), "c.csv"))
    if curves is not None:
        assert all(all(math.isfinite(v) for v in c.losses) for c in curves)


@SETTINGS
@given(st.lists(st.lists(cells, min_size=9, max_size=9), max_size=4))
def test_generated_catalogs_give_offers_or_an_input_error(rows):
    from spottrain.catalog import load_catalog

    head = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
    text = head + "\n".join(",".join(c.replace(",", ";").replace("\n", " ") for c in r) for r in rows) + "\n"
    cat = _result_or_refusal(load_catalog, _write(text.encode(), "vms.csv"))
    if cat is not None:
        assert all(o.price_usd_per_hour is None or (o.price_usd_per_hour >= 0 and math.isfinite(o.price_usd_per_hour))
                   for o in cat.offers)


# --- the flag parsers -------------------------------------------------------------------------------

# Valid spellings beside the random text, so that the "in range" half of each property runs too.
gpu_names = st.sampled_from(known_gpus())
gpu_spellings = gpu_names.flatmap(lambda g: st.sampled_from([g, g.lower(), f"nvidia {g}", g.replace("-", " ")]))
durations = st.from_regex(r"[0-9]{1,6}(\.[0-9])?[smhd]?", fullmatch=True)
clusters = st.lists(st.tuples(st.integers(1, 12_000), gpu_names, st.sampled_from(["", ":1", ":8", ":16", ":32"])),
                    min_size=1, max_size=3).map(lambda groups: "+".join(f"{n}x{g}{k}" for n, g, k in groups))


@SETTINGS
@given(st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.booleans()),
       st.booleans())
def test_number_flags_in_range_or_refused(value, integer):
    try:
        got = options.number(value, "--x", low=0, low_open=True, high=1e6, integer=integer)
    except InputError as exc:
        assert str(exc).startswith("--x: expected")
        return
    assert 0 < got <= 1e6 and math.isfinite(got)


@SETTINGS
@given(st.one_of(st.text(max_size=12), durations))
def test_duration_flags_in_range_or_refused(text):
    got = _result_or_refusal(options.duration, text, "--duration", error=InputError)
    if got is not None:
        assert 0 < got <= options.MAX_DURATION_S


@SETTINGS
@given(st.one_of(st.text(max_size=14), gpu_spellings))
def test_gpu_names_exact_or_refused(text):
    got = _result_or_refusal(options.gpu, text, "--gpu")
    if got is not None:
        assert canonical_gpu(got) == got
        assert all(ch.isascii() and (ch.isalnum() or ch in " ._:+/@=,-") for ch in text.strip())


@SETTINGS
@given(st.one_of(st.text(max_size=20), clusters))
def test_cluster_flags_within_quota_or_refused(text):
    spec = _result_or_refusal(options.cluster, text, "--cluster")
    if spec is not None:
        assert sum(g.count for g in spec.groups) <= options.MAX_NODES


# --- examples the properties must cover -----------------------------------------------------------


@pytest.mark.parametrize("data, needle", [
    (b"model,batch\xff\n", "byte offset 11"),
    (b"a,b\n1,\x002\n", "NUL byte"),
    (b"a,a\n1,2\n", "appears twice"),
    (b"a,b\n1,2,3\n", "3 fields but the header has 2"),
])
def test_reader_errors_name_where(data, needle):
    with pytest.raises(InputError, match=needle) as exc:
        read_csv(_write(data))
    assert "line" in str(exc.value)


def test_bom_crlf_and_quotes_are_read_as_plain_csv():
    plain = parse_csv('a,b\n1,"x,y"\n', file="t")
    other = read_csv(_write(b'\xef\xbb\xbfa,b\r\n1,"x,y"\r\n'))
    assert other.header == plain.header == ["a", "b"] and other.rows == plain.rows == [["1", "x,y"]]


def test_json_reader_refuses_nan_and_names_line_and_column():
    with pytest.raises(InputError, match="NaN"):
        read_json(_write(b'{"a": NaN}', "n.json"))
    with pytest.raises(InputError, match="line 2, column 7"):
        read_json(_write(b'{"a": 1,\n "b": }', "n.json"))


def test_measurement_table_100k_rows_reads_at_data_speed():
    """A 100k-row table (a real shipped table repeated) reads and validates in a few seconds."""
    import time

    from hostile_cases import MEASUREMENTS

    lines = MEASUREMENTS.read_text().splitlines()
    body = lines[1:]
    text = "\n".join([lines[0]] + [body[i % len(body)] for i in range(100_000)]) + "\n"
    path = _write(text.encode(), "big.csv")
    t0 = time.perf_counter()
    rows = read_measurements(path)
    elapsed = time.perf_counter() - t0
    assert len(rows) == 100_000 and rows[-1].line == 100_001
    assert elapsed < 30, f"{elapsed:.1f} s"  # about 2 s on an idle 2-core machine; generous for a loaded one
