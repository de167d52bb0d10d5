"""GPU spec table: canonical names, aliases, near-miss suggestions, published figures."""

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
