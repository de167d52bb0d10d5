"""One formatting rule per figure: units, probabilities, money, plurals, flag wording."""

import subprocess
import sys

import pytest

from spottrain.errors import InputError
from spottrain.units import (
    format_count,
    format_duration,
    format_interval,
    format_probability,
    format_rate,
    format_step_time,
    format_usd,
    parse_duration_s,
    plural,
)


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "spottrain.cli.main", *args], capture_output=True, text=True)


@pytest.mark.parametrize("p, text", [
    (0.953, "95.3 %"), (1.0, "> 99.9 %"), (0.99999, "> 99.9 %"), (0.9995, "> 99.9 %"), (0.99949, "99.9 %"),
    (1.2e-27, "< 0.1 %"), (2.05e-12, "< 0.1 %"), (0.0, "< 0.1 %"), (0.0005, "0.1 %"), (None, "-"),
])
def test_probability_is_a_percentage_never_scientific_nor_certain(p, text):
    assert format_probability(p) == text
    assert "e-" not in format_probability(p)


def test_simulated_rates_are_exact_at_the_ends_and_name_their_runs():
    assert format_rate(1.0, runs=100) == "100 % of 100 runs"
    assert format_rate(0.0, runs=1) == "0 % of 1 run"
    assert format_rate(0.953) == "95.3 %"


@pytest.mark.parametrize("ms, text", [(0.42, "0.42 ms"), (12.34, "12.3 ms"), (386.2, "386 ms"),
                                      (38_600.0, "38.6 s"), (386_000.0, "6 min 26 s")])
def test_step_times_never_scientific(ms, text):
    assert format_step_time(ms) == text


@pytest.mark.parametrize("s, text", [(376.596, "6 min 17 s"), (45.2, "45 s"), (3.04, "3.0 s"), (60.0, "1 min"),
                                     (3600 * 7.4, "7 h 24 min"), (3600.0, "1 h"), (3 * 86400.0, "3.0 d")])
def test_intervals_to_the_second(s, text):
    assert format_interval(s) == text


def test_durations():
    assert format_duration(7.4 * 3600) == "7.4h"
    assert format_duration(float("inf")) == "never"
    assert format_duration(float("nan")) == "n/a"


@pytest.mark.parametrize("usd, text", [(0.0042, "$0.0042"), (0.004, "$0.004"), (0.05, "$0.05"), (0.42, "$0.42"),
                                       (1234.5, "$1,234.50"), (0.0, "$0"), (0.00001, "< $0.0001")])
def test_sub_cent_costs_keep_their_digits(usd, text):
    assert format_usd(usd) == text


def test_plurals():
    assert plural(1, "node") == "1 node"
    assert plural(2, "node") == "2 nodes"
    assert plural(0, "run") == "0 runs"
    assert plural(1, "pooled trace") == "1 pooled trace"
    assert plural(1.5, "revocation") == "1.5 revocations"
    assert plural(3, "policy") == "3 policies"
    assert plural(2, "day") == "2 days"
    assert plural(2, "box") == "2 boxes"
    assert plural(1200, "sample") == "1,200 samples"
    assert plural(2, "node", show=False) == "nodes"


def test_expected_counts():
    assert format_count(0.188) == "0.19"
    assert format_count(1.34) == "1.3"
    assert format_count(1234.0) == "1,234"
    assert format_count(0.0) == "0"


def test_flag_errors_name_the_flag_not_a_column():
    with pytest.raises(InputError) as e:
        parse_duration_s("0s", option="--deadline")
    assert str(e.value).startswith("--deadline: ")
    assert "column" not in str(e.value)
    # a file's column keeps the column wording
    assert str(InputError("bad", file="a.csv", line=3, column="price")) == "a.csv, line 3, column price: bad"


def test_bare_deadline_needs_a_unit():
    with pytest.raises(InputError, match="give a unit"):
        parse_duration_s("8", option="--deadline", require_unit=True)
    assert parse_duration_s("8h", option="--deadline", require_unit=True) == 8 * 3600
    assert parse_duration_s("3600") == 3600.0  # other options keep seconds as the default unit


def test_cli_bare_deadline_and_flag_wording():
    out = run_cli("plan", "--model", "resnet50", "--samples", "1M", "--deadline", "8")
    assert out.returncode == 2
    assert "--deadline: give a unit" in out.stderr and "column" not in out.stderr
    assert "Traceback" not in out.stderr


def test_version_flag_and_help_without_bool_metavar():
    out = run_cli("--version")
    assert out.returncode == 0
    from spottrain import __version__

    assert out.stdout.strip() == f"spottrain {__version__}"
    helptext = run_cli("catalog", "--help").stdout
    assert "--spot" in helptext and "<bool>" not in helptext
    assert "<bool>" not in run_cli("plan", "--help").stdout
    assert "<str>" in run_cli("plan", "--help").stdout  # options that take a value still say so
