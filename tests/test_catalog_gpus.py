"""GPU spec table: canonical names, aliases, near-miss suggestions, published figures."""

import pytest

from spottrain.catalog import canonical_gpu, gpu_spec, known_gpus
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


def test_every_row_is_complete_and_cited():
    for name in known_gpus():
        spec = gpu_spec(name)
        assert spec.source.startswith("https://"), name
        assert spec.fp32_tflops > 0 and spec.fp16_tflops >= spec.fp32_tflops, name
        assert spec.memory_gib > 0 and spec.memory_bandwidth_gbs > 0, name
        assert spec.pcie_gen in (3, 4, 5) and spec.pcie_gbs > 0, name
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
