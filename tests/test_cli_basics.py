import subprocess
import sys

import pytest

from spottrain.errors import InputError, UnknownNameError
from spottrain.types import ClusterSpec
from spottrain.units import parse_count, parse_duration_s


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "spottrain.cli.main", *args], capture_output=True, text=True)


def test_help_lists_commands():
    out = run_cli("--help")
    assert out.returncode == 0
    assert "version" in out.stdout


def test_unknown_command_is_a_user_error():
    out = run_cli("no-such-command")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr


def test_near_miss_suggestion():
    err = UnknownNameError("GPU", "v10", ["V100", "K80", "A100"])
    assert "did you mean V100?" in str(err)


def test_cluster_spec_parse_roundtrip():
    spec = ClusterSpec.parse("1xV100+1xP100+2xK80")
    assert spec.nodes == 4 and spec.total_gpus == 4 and str(spec) == "1xV100+1xP100+2xK80"
    spec = ClusterSpec.parse("2xA100:8")
    assert spec.total_gpus == 16 and spec.groups[0].gpus_per_node == 8


def test_cluster_spec_takes_gpu_names_as_torch_prints_them():
    spec = ClusterSpec.parse("1xTesla V100-PCIE-16GB:4 + 2 x NVIDIA RTX 6000 Ada Generation : 2 : spot")
    assert [(g.count, g.gpu, g.gpus_per_node, g.spot) for g in spec.groups] == [
        (1, "Tesla V100-PCIE-16GB", 4, None), (2, "NVIDIA RTX 6000 Ada Generation", 2, True)]
    assert str(ClusterSpec.parse(str(spec))) == str(spec)


@pytest.mark.parametrize("bad", ["", "4K80", "0xV100", "4xV100:0", "x", "4x V100:", "4x:4"])
def test_cluster_spec_bad(bad):
    with pytest.raises(InputError):
        ClusterSpec.parse(bad)


def test_units():
    assert parse_duration_s("2h30m") == 9000.0
    assert parse_count("1.28M") == 1_280_000.0
    with pytest.raises(InputError):
        parse_duration_s("-3h")
    with pytest.raises(InputError):
        parse_duration_s("0")


def test_an_error_message_prints_as_written_not_as_markup(capsys):
    from spottrain.cli.main import main

    with pytest.raises(SystemExit) as exit_:  # refused while the flags are read, before any worker starts
        main(["run", "--example", "mlp", "--inject", "bogus"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert err.strip().count("\n") == 0
    assert "expected KIND:WORKER@TIME[/DURATION] with KIND one of" in err
