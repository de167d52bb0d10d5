"""Lambda's SSD300 rows: the figures the converter writes are those of the rebuilt network."""

import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "count_ssd300_flops.py"


def _bottleneck(cin, planes, projection):
    out = planes * 4
    n = cin * planes + 2 * planes + planes * 9 * planes + 2 * planes + planes * out + 2 * out
    return n + (cin * out + 2 * out if projection else 0)


def test_ssd300_parameters_from_resnet50_published_total():
    # torchvision's ResNet-50 (25,557,032) without its conv5 stage and classifier is the trunk
    # SSD300 keeps; the extra blocks and the box / class heads are counted from their shapes.
    conv5 = _bottleneck(1024, 512, True) + 2 * _bottleneck(2048, 512, False)
    trunk = 25_557_032 - conv5 - (2048 * 1000 + 1000)
    channels, inner, boxes = [1024, 512, 512, 256, 256, 256], [256, 256, 128, 128, 128], [4, 6, 6, 6, 4, 4]
    extra = sum(a * i + 2 * i + i * 9 * b + 2 * b for a, b, i in zip(channels[:-1], channels[1:], inner))
    heads = sum(c * 9 * n * (4 + 81) + n * (4 + 81) for n, c in zip(boxes, channels))
    out = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, check=True).stdout
    assert f"{trunk + extra + heads:,} parameters" in out


def test_converter_figures_are_the_tools_and_the_shipped_rows_carry_them():
    assert subprocess.run([sys.executable, str(TOOL), "--check"], capture_output=True).returncode == 0
    sys.path.insert(0, str(ROOT / "tools"))
    from convert_measurements import LAMBDA_MODELS

    flops, params, tensors = LAMBDA_MODELS["ssd300_resnet50"]
    with open(ROOT / "spottrain" / "data" / "measurements" / "lambda.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["model"] == "ssd300_resnet50"]
    assert len(rows) > 50
    assert {(int(r["flops_per_sample"]), int(r["param_count"]), int(r["tensor_count"])) for r in rows} == {
        (flops, params, tensors)}


def test_ssd300_is_known_by_name_with_the_counted_figures_and_its_images():
    from spottrain.perf.workload import Workload, input_pixels

    sys.path.insert(0, str(ROOT / "tools"))
    from convert_measurements import LAMBDA_MODELS

    w = Workload.from_zoo("SSD300-ResNet50", batch_size=32)
    assert (round(w.flops_per_sample), w.param_count, w.tensor_count) == LAMBDA_MODELS["ssd300_resnet50"]
    # a 300x300 RGB image decoded and augmented on the host per sample, like the classifiers' 224x224
    assert input_pixels("ssd300_resnet50") == 3 * 300 * 300
