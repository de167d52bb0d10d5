"""The profiler measures real steps: FLOPs, timing split, memory, loss curve, bad inputs."""

import json
import math
import textwrap

import pytest
import torch

from spottrain.errors import InputError, SchemaVersionError
from spottrain.profiler import profiler as prof
from spottrain.profiler.schema import REQUIRED_KEYS, PhaseTiming, Profile

QUICK = dict(iterations=4, warmup=1)


@pytest.fixture(scope="module")
def mlp_profile():
    return prof.profile_zoo("mlp-tiny", 16, loss_steps=25, lr=0.1, **QUICK)


def test_zoo_profile_has_documented_keys_and_counted_flops(mlp_profile):
    p = mlp_profile
    d = p.to_dict()
    for key in REQUIRED_KEYS:
        assert key in d
    assert d["schema_version"] == 1
    assert p.param_count == 101_770 and p.gradient_bytes == 4 * 101_770
    # Forward: 2*(784*128 + 128*10); backward: weight grads of both layers + input grad of layer 2.
    assert p.flops_per_sample_forward == 2 * (784 * 128 + 128 * 10)
    assert p.flops_per_sample_backward == 2 * (784 * 128 + 128 * 10) + 2 * 128 * 10
    assert p.device["kind"] == "cpu" and "peak_tflops" in p.device


def test_timing_split_is_consistent(mlp_profile):
    p = mlp_profile
    assert p.iterations == 4
    t = p.timing
    assert set(t) == {"forward", "backward", "optimizer", "total"}
    for phase in t.values():
        assert 0 < phase.p10_s <= phase.median_s <= phase.p90_s
    assert p.step_time_s == t["total"].median_s
    assert p.samples_per_s == pytest.approx(16 / p.step_time_s)
    parts = t["forward"].mean_s + t["backward"].mean_s + t["optimizer"].mean_s
    assert parts == pytest.approx(t["total"].mean_s, rel=1e-6)
    assert p.achieved_tflops == pytest.approx(p.flops_per_sample * p.samples_per_s / 1e12)


def test_loss_curve_decreases_on_the_synthetic_task(mlp_profile):
    curve = mlp_profile.loss_curve
    assert len(curve) == 25 and [s for s, _ in curve] == list(range(25))
    assert all(math.isfinite(v) for _, v in curve)
    first = sum(v for _, v in curve[:4]) / 4
    last = sum(v for _, v in curve[-4:]) / 4
    assert last < first
    assert "synthetic" in mlp_profile.loss_curve_source


def test_memory_recorded(mlp_profile):
    mem = mlp_profile.memory
    # Parameters + gradients + one momentum buffer, fp32.
    assert mem["static_bytes"] == 3 * 4 * 101_770
    # The first layer saves at least its input (784 floats) and its output for backward.
    assert mem["activation_bytes_per_sample"] >= 4 * 784
    assert mem["peak_bytes"] > mem["static_bytes"]


def test_python_api_with_own_model_and_surrogate_loss():
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    p = prof.profile(net, lambda b: (torch.randn(b, 8),), batch_size=6, name="tiny", **QUICK)
    assert p.model == "tiny" and p.batch_size == 6 and p.param_count == 8 * 16 + 16 + 16 * 4 + 4
    assert p.flops_per_sample_forward == 2 * (8 * 16 + 16 * 4)
    assert any("surrogate" in n for n in p.notes)


def test_amp_on_cpu_runs_bf16():
    p = prof.profile_zoo("mlp-tiny", 8, precision="amp", **QUICK)
    assert p.precision == "amp" and p.samples_per_s > 0


def _write_module(tmp_path, monkeypatch, name, body):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))


def test_user_entry_point_with_batch_size(tmp_path, monkeypatch):
    _write_module(tmp_path, monkeypatch, "usermodel_ok", """
        import torch
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(10, 3)
            def forward(self, x, y):
                return torch.nn.functional.cross_entropy(self.fc(x), y)
        def build(batch_size=4):
            return Net(), (torch.randn(batch_size, 10), torch.randint(0, 3, (batch_size,)))
    """)
    p = prof.profile_entry_point("usermodel_ok:build", 12, **QUICK)
    assert p.model == "usermodel_ok:build" and p.batch_size == 12 and p.param_count == 33
    assert not any("surrogate" in n for n in p.notes)
    # Without --batch-size the entry point's own batch decides.
    assert prof.profile_entry_point("usermodel_ok:build", None, **QUICK).batch_size == 4


def test_user_entry_point_from_file_path_without_batch_size(tmp_path):
    path = tmp_path / "net_file.py"
    path.write_text("import torch\ndef make():\n    return torch.nn.Linear(5, 2), torch.randn(8, 5)\n")
    p = prof.profile_entry_point(f"{path}:make", 4, **QUICK)  # sliced from 8 to 4
    assert p.batch_size == 4
    with pytest.raises(InputError, match="cannot be enlarged"):
        prof.profile_entry_point(f"{path}:make", 16, **QUICK)


@pytest.mark.parametrize(
    "spec, body, message",
    [
        ("no_such_module_xyz:build", None, "cannot import 'no_such_module_xyz'"),
        ("badep_missing:build", "x = 1\n", "has no attribute 'build'"),
        ("badep_wrong:build", "def build():\n    return 42\n", "returned int; expected a tuple"),
        ("badep_raises:build", "def build():\n    raise ValueError('boom')\n", "raised ValueError: boom"),
        ("badep_syntax:build", "def build(:\n", "SyntaxError"),
        ("justaname:", None, "expected module:function"),
    ],
)
def test_bad_entry_points(tmp_path, monkeypatch, spec, body, message):
    if body is not None:
        _write_module(tmp_path, monkeypatch, spec.split(":")[0], body)
    with pytest.raises(InputError, match=message) as err:
        prof.profile_entry_point(spec, 2, **QUICK)
    assert spec.split(":")[0] in str(err.value) or "module:function" in str(err.value)
    assert "\n" not in str(err.value)


def test_batch_too_big_reports_largest_fitting(monkeypatch):
    # 64 MiB of "available" host memory: a resnet32 batch of 4096 cannot fit.
    monkeypatch.setattr(prof, "available_memory_bytes", lambda dev: 64 * 2**20)
    with pytest.raises(prof.BatchSizeError) as err:
        prof.profile_zoo("resnet32", 4096, **QUICK)
    best = err.value.largest_fitting
    assert 0 < best < 4096
    assert f"--batch-size {best}" in str(err.value)
    # The reported size passes the same check; one more sample does not.
    p = prof.profile_zoo("resnet32", best, iterations=1, warmup=0)
    assert p.memory["peak_bytes"] <= 0.9 * 64 * 2**20 + 4 * p.param_count
    with pytest.raises(prof.BatchSizeError):
        prof.profile_zoo("resnet32", best + 1, **QUICK)


def test_largest_fitting_binary_search():
    calls = []

    def fits(b):
        calls.append(b)
        return b <= 37

    assert prof.largest_fitting(fits, 1000) == 37
    assert len(calls) <= 11
    assert prof.largest_fitting(lambda b: False, 10) == 0


@pytest.mark.parametrize(
    "kwargs, option",
    [({"precision": "fp8"}, "--precision"), ({"optimizer": "lion"}, "--optimizer"),
     ({"iterations": 0}, "--iterations"), ({"device": "tpu"}, "--device")],
)
def test_bad_options(kwargs, option):
    with pytest.raises(InputError, match=option):
        prof.profile_zoo("mlp-tiny", 2, **{**QUICK, **kwargs})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_requested_without_gpu():
    with pytest.raises(InputError, match="no CUDA GPU"):
        prof.profile_zoo("mlp-tiny", 2, device="cuda", **QUICK)


# ------------------------------------------------------------------ schema


def _tiny_profile(**over):
    base = dict(model="m", batch_size=2, param_count=10, gradient_bytes=40, flops_per_sample_forward=1.0,
                flops_per_sample_backward=2.0, step_time_s=0.5, samples_per_s=4.0,
                device={"kind": "cpu", "name": "x", "peak_tflops": None},
                timing={"total": PhaseTiming.from_samples([0.4, 0.5, 0.6])})
    return Profile(**{**base, **over})


def test_schema_round_trip_and_refusals(tmp_path):
    p = _tiny_profile(loss_curve=[[0.0, 2.0], [1.0, 1.5]])
    path = p.save(tmp_path / "p.json")
    assert Profile.load(path) == p
    with pytest.raises(InputError, match="exists"):
        p.save(path)
    data = json.loads(path.read_text())
    data["schema_version"] = 99
    (tmp_path / "v.json").write_text(json.dumps(data))
    with pytest.raises(SchemaVersionError, match="99"):
        Profile.load(tmp_path / "v.json")
    del data["schema_version"]
    with pytest.raises(SchemaVersionError):
        Profile.from_dict(data)
    data["schema_version"] = 1
    del data["step_time_s"]
    with pytest.raises(InputError, match="step_time_s"):
        Profile.from_dict(data)
    (tmp_path / "bad.json").write_text('{"model": \n')
    with pytest.raises(InputError, match="line 2"):
        Profile.load(tmp_path / "bad.json")


def test_phase_timing_quantiles():
    t = PhaseTiming.from_samples([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (t.median_s, t.p25_s, t.p75_s, t.iqr_s) == (3.0, 2.0, 4.0, 2.0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_profile_measures_peak_memory_and_same_flops():
    cpu = prof.profile_zoo("resnet32", 8, **QUICK)
    for precision in ("fp32", "amp"):
        p = prof.profile_zoo("resnet32", 8, device="cuda", precision=precision, **QUICK)
        assert p.device["kind"] == "cuda" and p.memory["peak_bytes"] > p.memory["static_bytes"]
        assert p.flops_per_sample_forward == pytest.approx(cpu.flops_per_sample_forward, rel=1e-6)
    lstm = prof.profile_zoo("lstm-lm", 4, device="cuda", **QUICK)  # cuDNN RNN: counted with cuDNN off
    assert lstm.flops_per_sample_forward == pytest.approx(prof.zoo.zoo_entry("lstm-lm").flops_per_sample_forward, rel=1e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_oom_searches_largest_batch():
    with pytest.raises(prof.BatchSizeError) as err:
        prof.profile_zoo("gpt2-small", 4096, device="cuda", **QUICK)
    best = err.value.largest_fitting
    assert 0 < best < 4096 and f"--batch-size {best}" in str(err.value)


def test_rnn_flops_are_counted_on_cpu():
    # oneDNN's fused LSTM hides its matrix products from FlopCounterMode; the probe must not.
    p = prof.profile_zoo("lstm-lm", 2, iterations=1, warmup=0)
    hidden, vocab, steps = 650, 10_000, 35
    lstm = 2 * 2 * 4 * hidden * (2 * hidden)  # 2 layers, 4 gates, input+hidden weights, 2 FLOPs/MAC
    decoder = 2 * hidden * vocab
    assert p.flops_per_sample_forward == pytest.approx(steps * (lstm + decoder), rel=1e-6)


def test_loss_curve_on_user_data(tmp_path, monkeypatch):
    _write_module(tmp_path, monkeypatch, "userdata_lc", """
        import torch
        torch.manual_seed(0)
        W = torch.randn(6, 3)
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(6, 3)
            def forward(self, x, y):
                return torch.nn.functional.cross_entropy(self.fc(x), y)
        def build(batch_size=8):
            x = torch.randn(batch_size, 6)
            return Net(), (x, (x @ W).argmax(1))
        def data():
            # A learnable task: labels from a fixed linear teacher; 10 batches.
            g = torch.Generator().manual_seed(1)
            out = []
            for _ in range(10):
                x = torch.randn(32, 6, generator=g)
                out.append((x, (x @ W).argmax(1)))
            return out
        def data_once():
            return iter(data())
        def not_iterable():
            return 5
    """)
    # A list is cycled like epochs; an iterator runs once.
    p = prof.profile_entry_point("userdata_lc:build", 8, data_spec="userdata_lc:data", loss_steps=15, lr=0.5, **QUICK)
    assert len(p.loss_curve) == 15 and not p.notes
    assert sum(v for _, v in p.loss_curve[-3:]) < sum(v for _, v in p.loss_curve[:3])
    assert p.loss_curve_source == "user data from userdata_lc:data"
    p = prof.profile_entry_point("userdata_lc:build", 8, data_spec="userdata_lc:data_once", loss_steps=15, **QUICK)
    assert len(p.loss_curve) == 10 and any("ran out" in n for n in p.notes)
    with pytest.raises(InputError, match="expected an iterable"):
        prof.profile_entry_point("userdata_lc:build", 8, data_spec="userdata_lc:not_iterable", loss_steps=2, **QUICK)
