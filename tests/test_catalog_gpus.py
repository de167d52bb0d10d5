"""GPU spec table: canonical names, aliases, near-miss suggestions, published figures."""

import math

import pytest

from spottrain.catalog import canonical_gpu, gpu_label, gpu_spec, known_gpus, load_catalog
from spottrain.errors import UnknownNameError


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("v100", "V100"),
        ("Tesla V100", "V100"),
        ("V100-SXM2-32GB", "V100-32GB"),
        ("A100-SXM4-80GB", "A100-80GB"),
        ("a100-40gb", "A100"),
        ("NVIDIA A10G", "A10G"),
        ("H100-MEGA", "H100"),
        ("tesla k80", "K80"),
        # the name without memory size / form factor, and benchmark boards that are not cloud offers
        ("H100 SXM5", "H100"),
        ("RTX 4090", "RTX4090"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        ("Quadro RTX 8000", "RTX8000"),
        ("A100-PCIe-40GB", "A100-PCIe"),
        # boards of published training studies (what torch.cuda.get_device_name prints)
        ("NVIDIA TITAN Xp", "TitanXp"),
        ("NVIDIA GeForce GTX 1080", "GTX1080"),
        ("Tesla K40m", "K40"),
        ("Tesla M40 24GB", "M40"),
        ("Tesla V100S-PCIE-32GB", "V100S"),
        ("NVIDIA A800-SXM4-80GB", "A800"),
        ("NVIDIA H800", "H800"),
        ("Tesla V100-PCIE-16GB", "V100-PCIe"),
        ("Tesla V100-PCIE-32GB", "V100-PCIe"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX6000-Ada"),
        # a memory size after the model number, spaces between (the digits are the model's)
        ("NVIDIA H200 141GB HBM3e", "H200"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA B200 180GB HBM3e", "B200"),
        ("Tesla V100-DGXS-32GB", "V100-32GB"),
        ("Tesla V100-DGXS-16GB", "V100"),
    ],
)
def test_aliases_resolve_to_canonical_names(alias, canonical):
    assert canonical_gpu(alias) == canonical


def test_unknown_gpu_suggests_near_miss():
    with pytest.raises(UnknownNameError, match="did you mean V100"):
        gpu_spec("v10")


def test_published_figures_of_well_known_gpus():
    # Figures from the NVIDIA datasheets cited in the table.
    v100 = gpu_spec("V100")
    assert (v100.fp32_tflops, v100.fp16_tflops, v100.memory_gib) == (15.7, 125.0, 16.0)
    assert v100.nvlink_gbs == 300.0
    a100 = gpu_spec("A100")
    assert (a100.fp32_tflops, a100.tf32_tflops, a100.fp16_tflops) == (19.5, 156.0, 312.0)
    assert gpu_spec("T4").nvlink_gbs is None


def test_the_pcie_v100_is_a_board_of_its_own_on_the_v100_die():
    # Azure's NCv3 boards: the datasheet's PCIe column, not the SXM2 one the cloud offers carry.
    pcie, sxm = gpu_spec("Tesla V100-PCIE-16GB"), gpu_spec("Tesla V100-SXM2-16GB")
    assert (pcie.fp32_tflops, pcie.fp16_tflops, pcie.tdp_w, pcie.nvlink_gbs) == (14.0, 112.0, 250.0, None)
    assert (sxm.fp32_tflops, sxm.fp16_tflops, sxm.tdp_w, sxm.nvlink_gbs) == (15.7, 125.0, 300.0, 300.0)
    assert pcie.die == sxm.die == "GV100" and pcie.memory_bandwidth_gbs == sxm.memory_bandwidth_gbs


def test_every_row_is_complete_and_cited():
    offered = {o.gpu for o in load_catalog().offers}
    for name in known_gpus():
        spec = gpu_spec(name)
        assert spec.source.startswith("https://"), name
        assert spec.fp32_tflops > 0 and spec.fp16_tflops >= spec.fp32_tflops, name
        assert spec.memory_bandwidth_gbs > 0 and spec.pcie_gbs > 0, name
        if name in offered:  # the planner checks the batch fits: every offered GPU has its capacity
            assert spec.memory_gib is not None and spec.memory_gib > 0, name
            assert spec.pcie_gen in (3, 4, 5), name
        else:
            assert "Benchmark board" in spec.note, name
        # Newer generations are faster: no row has a typo by an order of magnitude.
        assert 1 < spec.fp32_tflops < 200, name


def test_peak_tflops_falls_back_to_fp32_without_tf32():
    assert gpu_spec("V100").peak_tflops("tf32") == 15.7
    assert gpu_spec("A100").peak_tflops("tf32") == 156.0


def test_torch_device_names_resolve():
    # What torch.cuda.get_device_name() reports on common cloud GPUs.
    from spottrain.catalog import canonical_gpu

    assert canonical_gpu("NVIDIA H100 80GB HBM3") == "H100"
    assert canonical_gpu("NVIDIA A100-SXM4-80GB") == "A100-80GB"
    assert canonical_gpu("Tesla V100-SXM2-16GB") == "V100"


def test_gpu_label_is_the_canonical_name_or_the_unknown_name_upper_cased():
    assert gpu_label("tesla v100") == "V100"
    assert gpu_label("H100 SXM5") == "H100"
    assert gpu_label(" mi300x ") == "MI300X"


def _board_table(tmp_path, body: str, header: str = "name,aliases,architecture,die,fp32_tflops,fp16_tflops,"
                 "tf32_tflops,memory_bandwidth_gbs,pcie_gen,tdp_w,memory,source\n"):
    path = tmp_path / "my_gpus.csv"
    path.write_text(header + body)
    return path


def test_a_board_the_registry_lacks_comes_from_the_users_datasheet_table(tmp_path, monkeypatch):
    from spottrain.catalog.gpus import EXTRA_SPECS_ENV
    from spottrain.perf import Workload, predict_throughput
    from spottrain.perf.hardware import device

    with pytest.raises(UnknownNameError, match=f"did you mean RTX3090.*{EXTRA_SPECS_ENV}"):
        canonical_gpu("RTX3070")
    path = _board_table(tmp_path, "RTX3070,GeForce RTX 3070,Ampere,GA104,20.3,40.6,20.3,448,4,220,GDDR6,"
                                  "GA102 whitepaper appendix\n")
    monkeypatch.setenv(EXTRA_SPECS_ENV, str(path))
    spec = gpu_spec("NVIDIA GeForce RTX 3070")
    assert (spec.name, spec.architecture, spec.fp16_tflops, spec.pcie_gbs, spec.tdp_w) == ("RTX3070", "Ampere", 40.6, 32.0, 220.0)
    assert "RTX3070" in known_gpus() and "V100" in known_gpus()
    assert math.isfinite(device("RTX3070").log_power_density)  # a GDDR board at its power limit, as the shipped ones
    w = Workload.from_zoo("resnet50", 64)
    pred = predict_throughput(w, "1xRTX3070")
    assert pred.extrapolated and any("GPU RTX3070 not in the fitted data" in n for n in pred.notes)
    # between the boards around it: an RTX 3090 (GA102, 936 GB/s) faster, a T4 slower
    assert predict_throughput(w, "1xT4").throughput < pred.throughput < predict_throughput(w, "1xRTX3090").throughput
    monkeypatch.delenv(EXTRA_SPECS_ENV)
    with pytest.raises(UnknownNameError):
        canonical_gpu("RTX3070")


@pytest.mark.parametrize(("body", "column", "message"), [
    ("V100S-PCIE,,Volta,GV100,16.4,130,,1134,3,250,HBM2,\n", "name", "is 'V100S' of the registry already"),
    ("MyBoard,Tesla T4,Turing,,8,65,,320,3,70,GDDR6,\n", "aliases", "is 'T4' of the registry already"),
    ("MyBoard,,Ampere,,twenty,,,448,4,220,GDDR6,\n", "fp32_tflops", "expected a number > 0"),
    ("MyBoard,,Ampere,,20,10,,448,4,220,GDDR6,\n", "fp16_tflops", "at least fp32_tflops"),
    ("MyBoard,,Ampere,,20,40,,448,2,220,GDDR6,\n", "pcie_gen", "expected a whole number >= 3"),
    (",,Ampere,,20,40,,448,4,220,GDDR6,\n", "name", "expected the board's name"),
    ("MyBoard,,,,20,40,,448,4,220,GDDR6,\n", "architecture", "expected its architecture .one of Ada Lovelace, Ampere"),
])
def test_a_bad_board_row_names_its_line_and_column(tmp_path, monkeypatch, body, column, message):
    from spottrain.catalog.gpus import EXTRA_SPECS_ENV
    from spottrain.errors import InputError

    monkeypatch.setenv(EXTRA_SPECS_ENV, str(_board_table(tmp_path, body)))
    with pytest.raises(InputError, match=f"my_gpus.csv, line 2, column {column}: .*{message}"):
        gpu_spec("V100")


def test_predict_on_a_board_of_your_own_and_a_broken_board_table(tmp_path):
    import json
    import os
    import subprocess
    import sys

    from spottrain.catalog.gpus import EXTRA_SPECS_ENV

    good = _board_table(tmp_path, "RTX3070,GeForce RTX 3070,Ampere,GA104,20.3,40.6,20.3,448,4,220,GDDR6,\n")
    cmd = [sys.executable, "-m", "spottrain.cli.main", "predict", "--model", "resnet50", "--cluster",
           "1xNVIDIA GeForce RTX 3070:2", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, EXTRA_SPECS_ENV: str(good)})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["throughput"] > 0
    bad = tmp_path / "broken.csv"
    bad.write_text("name,architecture,fp32_tflops,memory_bandwidth_gbs\nRTX3070,Ampere,-1,448\n")
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, EXTRA_SPECS_ENV: str(bad)})
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [f"error: {bad}, line 2, column fp32_tflops: expected a number > 0 and "
                                                "<= 10000, got '-1'"]
