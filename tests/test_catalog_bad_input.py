"""A user's --catalog file: real rows that load, and really corrupted files that are refused."""

import subprocess
import sys
from pathlib import Path

import pytest

import spottrain
from spottrain.catalog import load_catalog
from spottrain.errors import InputError

AWS = Path(spottrain.__file__).parent / "data" / "catalog" / "aws_vms.csv"


def real_lines(n=6):
    """Header and the first p3.2xlarge rows of the shipped AWS file."""
    lines = AWS.read_text().splitlines()
    return [lines[0]] + [line for line in lines if line.startswith("p3.2xlarge,")][:n]


def write(tmp_path, lines, name="vms.csv"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def replace_field(line, column, value):
    import csv
    import io

    header = real_lines()[0].split(",")
    row = next(csv.reader([line]))
    row[header.index(column)] = value
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(row)
    return buf.getvalue()


def test_real_rows_load_as_user_catalog(tmp_path):
    path = write(tmp_path, real_lines())
    cat = load_catalog(path)
    assert len(cat.offers) == 6
    assert all(o.instance_type == "p3.2xlarge" and o.gpu == "V100" for o in cat.offers)
    assert cat.source == str(path)


def test_missing_column(tmp_path):
    lines = [line.rsplit(",", 1)[0] for line in real_lines()]  # drop Arch: optional, still fine
    load_catalog(write(tmp_path, lines, "ok.csv"))
    header = lines[0].split(",")
    i = header.index("Price")
    import csv
    rows = [next(csv.reader([line])) for line in lines]
    stripped = [",".join(f'"{v}"' if "," in v else v for j, v in enumerate(r) if j != i) for r in rows]
    with pytest.raises(InputError) as err:
        load_catalog(write(tmp_path, stripped, "nocol.csv"))
    assert "nocol.csv, line 1, column Price" in str(err.value)


def test_non_numeric_price(tmp_path):
    lines = real_lines()
    lines[3] = replace_field(lines[3], "Price", "n/a")
    with pytest.raises(InputError, match=r"bad\.csv, line 4, column Price: expected a number, got 'n/a'"):
        load_catalog(write(tmp_path, lines, "bad.csv"))


def test_negative_spot_price(tmp_path):
    lines = real_lines()
    lines[2] = replace_field(lines[2], "SpotPrice", "-0.5")
    with pytest.raises(InputError, match=r"line 3, column SpotPrice: expected a number >= 0"):
        load_catalog(write(tmp_path, lines))


def test_duplicate_row(tmp_path):
    lines = real_lines()
    lines.append(lines[2])
    with pytest.raises(InputError, match=r"line 8, column InstanceType: duplicate row \(same as line 3\)"):
        load_catalog(write(tmp_path, lines))


def test_truncated_row(tmp_path):
    lines = real_lines()
    lines[5] = lines[5][:20]
    with pytest.raises(InputError, match="line 6"):
        load_catalog(write(tmp_path, lines))


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="nope.csv"):
        load_catalog(tmp_path / "nope.csv")


def test_cli_reports_bad_catalog_in_one_line(tmp_path):
    lines = real_lines()
    lines[1] = replace_field(lines[1], "Price", "abc")
    path = write(tmp_path, lines)
    out = subprocess.run([sys.executable, "-m", "spottrain.cli.main", "catalog", "--catalog", str(path), "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1
    assert "line 2, column Price" in out.stderr
