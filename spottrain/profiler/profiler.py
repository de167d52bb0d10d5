"""Measure a training step: FLOPs, memory, and forward / backward / optimizer time.

The recipe (spotDNN / Srift-style lightweight profiling):

1. **Probe** one forward + backward on a sub-batch of ``min(B, 2)`` samples under
   :class:`~torch.utils.flop_counter.FlopCounterMode` (FLOPs per sample, forward and backward)
   and a ``saved_tensors_hooks`` pack hook (bytes kept for backward = activation memory per
   sample). The probe costs about 2/B of one step, so FLOP counting adds little overhead.
2. **Fit check**: on a CPU the estimated peak (parameters, gradients, optimizer state,
   activations) is compared with the host's available memory; on a GPU the first real step
   is the test. A batch that does not fit triggers a binary search for the largest one that
   does, reported in a one-line :class:`BatchSizeError`.
3. Optional **loss curve** (``loss_steps`` training steps, which also serve as warm-up).
4. **Warm-up** steps, then ``iterations`` **measured** steps, each split into forward,
   backward and optimizer by synchronised timestamps.

``model(*batch)`` (or ``model(**batch)``, ``model(batch)``) must return the loss: a scalar
tensor, an object with ``.loss``, a dict with ``"loss"``, or a tuple whose first element is
the loss. A non-scalar output is reduced with ``mean(output**2)`` as a surrogate loss (noted in
the profile): the timing is that of a real step, the loss value is meaningless.
"""

from __future__ import annotations

import gc
import itertools
import math
import resource
import time
import warnings
from collections.abc import Callable, Iterable
from contextlib import ExitStack, nullcontext
from datetime import datetime, timezone
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_map

from spottrain.errors import InputError
from spottrain.profiler import zoo
from spottrain.profiler.flops import CountingActivations, counting_flops
from spottrain.profiler.device import available_memory_bytes, device_info, library_versions
from spottrain.profiler.entry import call_entry_point, load_data, load_entry_point
from spottrain.profiler.schema import PhaseTiming, Profile

ProgressFn = Callable[[str, int, int], None]
"""``progress(phase, done, total)`` with phase ``"probe"``, ``"loss-curve"``, ``"warm-up"``, ``"measure"``."""

EstimateFn = Callable[[dict[str, Any]], None]
"""``estimate(info)``, twice: once the (cheap) probe has run, before any full step, with ``steps``
(loss-curve, warm-up and measured steps to run), ``flops_per_step`` (forward + backward at the full
batch), ``memory_bytes`` (estimated peak: parameters, gradients, optimizer state, activations) and
``step_s = None``; then after the first full step with its measured ``step_s`` and
``remaining_s`` (the steps left at that pace)."""

OPTIMIZERS = ("sgd", "adam", "adamw")
PRECISIONS = ("fp32", "amp")
# Optimizer state per parameter element, in parameter-sized tensors (momentum; Adam's 2 moments).
_STATE_TENSORS = {"sgd": 1, "adam": 2, "adamw": 2}
# Peak ~ static + saved activations + their gradients in flight during backward.
_ACTIVATION_PEAK_FACTOR = 1.5


class BatchSizeError(InputError):
    """The batch does not fit in memory; ``largest_fitting`` is the biggest size that does (0: none)."""

    def __init__(self, message: str, *, largest_fitting: int) -> None:
        super().__init__(message, column="--batch-size")
        self.largest_fitting = largest_fitting


# ------------------------------------------------------------------ batch and loss helpers


def _tensors(batch: Any) -> list[torch.Tensor]:
    return [x for x in tree_flatten(batch)[0] if isinstance(x, torch.Tensor)]


def infer_batch_size(batch: Any) -> int:
    """Leading dimension of the batch's first tensor."""
    for t in _tensors(batch):
        if t.ndim >= 1:
            return int(t.shape[0])
    raise InputError("the batch holds no tensor with a batch dimension", column="--model")


def slice_batch(batch: Any, size: int, full: int) -> Any:
    """The first ``size`` samples of every tensor whose leading dimension is ``full``."""
    if size == full:
        return batch
    return tree_map(lambda x: x[:size] if isinstance(x, torch.Tensor) and x.ndim >= 1 and x.shape[0] == full else x, batch)


def to_device(batch: Any, device: torch.device) -> Any:
    return tree_map(lambda x: x.to(device, non_blocking=True) if isinstance(x, torch.Tensor) else x, batch)


def call_model(model: nn.Module, batch: Any) -> Any:
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def loss_of(output: Any) -> tuple[torch.Tensor, bool]:
    """(loss, is_surrogate) from whatever the model returned."""
    if isinstance(output, dict) and "loss" in output:
        output = output["loss"]
    elif hasattr(output, "loss") and isinstance(getattr(output, "loss"), torch.Tensor):
        output = output.loss
    elif isinstance(output, (tuple, list)) and output:
        output = output[0]
    if not isinstance(output, torch.Tensor):
        raise InputError(f"the model returned {type(output).__name__}; expected a loss tensor (or logits)", column="--model")
    if output.ndim == 0:
        return output, False
    return output.float().pow(2).mean(), True


def make_optimizer(name: str, params: Iterable[nn.Parameter], lr: float | None) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01 if lr is None else lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3 if lr is None else lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3 if lr is None else lr)
    raise InputError(f"unknown optimizer {name!r} (use {', '.join(OPTIMIZERS)})", column="--optimizer")


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        "out of memory" in text.lower() or "can't allocate memory" in text or isinstance(exc, MemoryError)
    )


def largest_fitting(fits: Callable[[int], bool], upper: int) -> int:
    """Largest ``b`` in ``[1, upper]`` with ``fits(b)`` (monotone), 0 if none; binary search."""
    lo, hi = 0, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


# ------------------------------------------------------------------ the step


class _Stepper:
    """One training step, optionally timed by phase."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, device: torch.device, precision: str) -> None:
        self.model, self.optimizer, self.device = model, optimizer, device
        self.cuda = device.type == "cuda"
        if precision == "amp":
            dtype = torch.float16 if self.cuda else torch.bfloat16
            self.autocast = lambda: torch.autocast(device.type, dtype=dtype)
            self.scaler = torch.amp.GradScaler("cuda") if self.cuda else None
        else:
            self.autocast = nullcontext
            self.scaler = None
        self.surrogate = False

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def __call__(self, batch: Any) -> tuple[float, float, float, float]:
        """Run one step; returns (forward_s, backward_s, optimizer_s, loss)."""
        self.sync()
        t0 = time.perf_counter()
        with self.autocast():
            loss, self.surrogate = loss_of(call_model(self.model, batch))
        self.sync()
        t1 = time.perf_counter()
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        self.sync()
        t2 = time.perf_counter()
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.sync()
        t3 = time.perf_counter()
        return t1 - t0, t2 - t1, t3 - t2, loss.detach()


def _probe(model: nn.Module, batch: Any, size: int, device: torch.device, precision: str) -> dict[str, float]:
    """FLOPs, saved-activation bytes and elements written forward per sample, from one fwd+bwd on
    ``size`` samples."""
    param_ptrs = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: set[int] = set()
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        if t.device.type != "meta":
            ptr = t.untyped_storage().data_ptr()
            if ptr not in param_ptrs and ptr not in seen:
                seen.add(ptr)
                saved += t.untyped_storage().nbytes()
        return t

    stepper = _Stepper(model, torch.optim.SGD(model.parameters(), lr=0.0), device, precision)
    has_rnn = any(isinstance(m, nn.RNNBase) for m in model.modules())
    with ExitStack() as stack:
        if has_rnn:
            # Fused RNN kernels (cuDNN, oneDNN) are invisible to FlopCounterMode; the native
            # path, made of counted matrix products, is used for the probe instead.
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore", UserWarning)
            if device.type == "cuda":
                stack.enter_context(torch.backends.cudnn.flags(enabled=False))
            else:
                stack.enter_context(torch.backends.mkldnn.flags(enabled=False))
        with counting_flops() as fwd_counter, CountingActivations() as written:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                with stepper.autocast():
                    loss, surrogate = loss_of(call_model(model, batch))
        with counting_flops() as bwd_counter:
            loss.backward()
    model.zero_grad(set_to_none=True)
    return {
        "flops_forward": fwd_counter.get_total_flops() / size,
        "flops_backward": bwd_counter.get_total_flops() / size,
        "activation_bytes": saved / size,
        "activations": written.elements / size,
        "surrogate": float(surrogate),
    }


def _static_bytes(model: nn.Module, optimizer_name: str) -> tuple[int, int]:
    """(parameter bytes, gradient bytes) of the model."""
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return params, grads


def _optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    total = 0
    for state in optimizer.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor) and v.ndim > 0:
                total += v.numel() * v.element_size()
    return total


def _memory_text(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


# ------------------------------------------------------------------ public API


def profile(
    model_fn: nn.Module | Callable[[], Any],
    batch_fn: Any = None,
    *,
    batch_size: int | None = None,
    name: str | None = None,
    device: str = "cpu",
    precision: str = "fp32",
    iterations: int = 20,
    warmup: int = 3,
    optimizer: str = "sgd",
    lr: float | None = None,
    loss_steps: int = 0,
    data: Iterable[Any] | Callable[[int], Any] | None = None,
    data_description: str | None = None,
    max_time_s: float | None = None,
    progress: ProgressFn | None = None,
    estimate: EstimateFn | None = None,
) -> Profile:
    """Profile one training step of a model.

    ``model_fn`` is a module, a function returning a module, or a function returning
    ``(module, batch)``. ``batch_fn`` is a function ``batch_fn(batch_size) -> batch``, a batch,
    or None when ``model_fn`` returns the batch. ``data`` (an iterable of batches, or a function
    of the step index) feeds the ``loss_steps`` loss curve; without it the curve trains on the
    profiled batch itself (a small synthetic memorisation task).

    >>> import torch
    >>> from spottrain.profiler import profile
    >>> net = torch.nn.Sequential(torch.nn.Linear(8, 4))
    >>> p = profile(net, lambda b: (torch.randn(b, 8),), batch_size=4, iterations=3, warmup=1)
    >>> p.batch_size, p.param_count
    (4, 36)
    """
    wall0 = time.perf_counter()
    _check_options(precision, optimizer, iterations, warmup, loss_steps, batch_size)
    dev = _resolve_device(device)
    report = progress or (lambda phase, done, total: None)
    notes: list[str] = []

    model, batch, batch_size = _resolve_model_and_batch(model_fn, batch_fn, batch_size)
    model_name = name or getattr(model, "name", None) or type(model).__name__
    model = model.to(dev)
    model.train()
    batch = to_device(batch, dev)
    param_count = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if trainable == 0:
        raise InputError(f"model {model_name!r} has no trainable parameters", column="--model")
    param_bytes, grad_bytes = _static_bytes(model, optimizer)

    cudnn_benchmark = torch.backends.cudnn.benchmark
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.cuda.reset_peak_memory_stats(dev)
    try:
        # -- 1. probe: FLOPs and activation memory on a small sub-batch
        t_probe = time.perf_counter()
        probe = _run_probe(model, batch, batch_size, dev, precision, model_name, report, notes)
        probe_s = time.perf_counter() - t_probe

        # -- 2. does the batch fit? Announce the cost before any full step.
        static_est = param_bytes + grad_bytes + _STATE_TENSORS[optimizer] * grad_bytes
        per_sample_est = probe["activation_bytes"] * _ACTIVATION_PEAK_FACTOR
        if dev.type == "cpu":
            _check_fits_host(model_name, batch_size, dev, param_bytes, static_est, per_sample_est)
        n_warm = max(warmup - loss_steps, 0 if loss_steps else 1)
        total_steps = loss_steps + n_warm + iterations
        info = {"steps": total_steps, "batch_size": batch_size, "device": dev.type.upper(),
                "flops_per_step": (probe["flops_forward"] + probe["flops_backward"]) * batch_size,
                "memory_bytes": static_est + per_sample_est * batch_size, "step_s": None, "remaining_s": None}
        if estimate is not None:
            estimate(dict(info))
        opt = make_optimizer(optimizer, (p for p in model.parameters() if p.requires_grad), lr)
        stepper = _Stepper(model, opt, dev, precision)
        run_step = _guarded_step(stepper, model, opt, batch, batch_size, dev, model_name,
                                 estimate, info, iterations, max_time_s)

        # -- 3. loss curve (doubles as warm-up)
        t_loss = time.perf_counter()
        loss_curve, loss_source = None, None
        if loss_steps:
            loss_source = data_description or ("synthetic: the profiled batch, memorised" if data is None else "user data")
            loss_curve = _loss_curve(run_step, _loss_feed(data, batch, dev), loss_steps, report, notes)
        loss_s = time.perf_counter() - t_loss

        # -- 4. warm-up, then measure
        t_warm = time.perf_counter()
        for k in range(n_warm):
            run_step(batch)
            report("warm-up", k + 1, n_warm)
        warm_s = time.perf_counter() - t_warm
        static_bytes = param_bytes + grad_bytes + _optimizer_state_bytes(opt)
        samples, measured, peak = _measure(run_step, batch, iterations, max_time_s, dev, report, notes)
    finally:
        torch.backends.cudnn.benchmark = cudnn_benchmark

    # -- 5. assemble the profile
    timing = _phase_timings(samples)
    step_s = timing["total"].median_s
    samples_per_s = batch_size / step_s
    info = device_info(dev, precision)
    flops_total = probe["flops_forward"] + probe["flops_backward"]
    achieved = flops_total * samples_per_s / 1e12
    peak_tflops = info.get("peak_tflops")
    memory = _memory_record(static_bytes, probe["activation_bytes"], peak, per_sample_est, batch_size)
    if dev.type == "cpu" and precision == "amp":
        notes.append("CPU amp uses bfloat16 autocast; peak_tflops is the fp32 estimate")
    return Profile(
        model=model_name,
        batch_size=batch_size,
        param_count=param_count,
        trainable_param_count=trainable,
        gradient_bytes=grad_bytes,
        flops_per_sample_forward=probe["flops_forward"],
        flops_per_sample_backward=probe["flops_backward"],
        step_time_s=step_s,
        samples_per_s=samples_per_s,
        device=info,
        precision=precision,
        optimizer=optimizer,
        timing=timing,
        iterations=len(samples),
        warmup=n_warm + loss_steps,
        achieved_tflops=achieved,
        fraction_of_peak=(achieved / peak_tflops) if peak_tflops else None,
        activations_per_sample=probe["activations"],
        memory=memory,
        input=_describe_input(batch, batch_size),
        loss_curve=loss_curve,
        loss_curve_source=loss_source,
        versions=library_versions(),
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        overhead={
            "wall_s": time.perf_counter() - wall0,
            "measured_s": measured,
            "warmup_s": warm_s,
            "loss_curve_s": loss_s,
            "probe_s": probe_s,
        },
        notes=notes,
    )


def profile_zoo(name: str, batch_size: int | None = None, **kwargs: Any) -> Profile:
    """Profile a zoo model (``resnet50``, ``bert-base`` ...) on a synthetic batch."""
    key = zoo.canonical_model(name)
    size = batch_size or zoo.zoo_entry(key).default_batch_size
    if kwargs.get("loss_steps") and kwargs.get("data") is None:
        # A small synthetic task: a fixed pool of 4 batches with fixed random labels.
        kwargs["data"] = [zoo.make_batch(key, size, seed=s) for s in range(4)]
        kwargs.setdefault("data_description", "synthetic: 4 fixed batches with fixed random labels, cycled")
    return profile(
        lambda: zoo.build(key, size)[0],
        lambda b: zoo.make_batch(key, b),
        batch_size=size,
        name=key,
        **kwargs,
    )


def profile_entry_point(spec: str, batch_size: int | None = None, *, data_spec: str | None = None, **kwargs: Any) -> Profile:
    """Profile a user's ``module:function`` returning ``(model, batch)``."""
    func = load_entry_point(spec)
    model, batch = call_entry_point(func, spec, batch_size)
    if data_spec is not None:
        kwargs["data"] = load_data(data_spec)
        kwargs.setdefault("data_description", f"user data from {data_spec}")
    kwargs.setdefault("name", spec)
    return profile(lambda: (model, batch), None, batch_size=batch_size, **kwargs)


# ------------------------------------------------------------------ internals


def _resolve_device(device: str) -> torch.device:
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise InputError(f"unknown device {device!r} (use cpu or cuda)", column="--device") from None
    if dev.type not in ("cpu", "cuda"):
        raise InputError(f"unsupported device {device!r} (use cpu or cuda)", column="--device")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda asked for, but torch sees no CUDA GPU here (use --device cpu)", column="--device")
    return dev


def _device_words(dev: torch.device) -> str:
    if dev.type == "cuda":
        return f"the GPU's ({torch.cuda.get_device_name(dev)})"
    return "the host's"


def _too_big(model: str, size: int, best: int, dev: torch.device, need: float | None, avail: float | None) -> BatchSizeError:
    what = f" (needs about {_memory_text(need)}, {_memory_text(avail)} available)" if need and avail else ""
    if best <= 0:
        return BatchSizeError(f"model {model!r} does not fit in {_device_words(dev)} memory even at batch size 1{what}", largest_fitting=0)
    return BatchSizeError(
        f"batch size {size} of {model!r} does not fit in {_device_words(dev)} memory{what}; "
        f"the largest that fits is {best}: pass --batch-size {best}",
        largest_fitting=best,
    )


def _free(dev: torch.device, *objs: Any) -> None:
    for obj in objs:
        if isinstance(obj, torch.optim.Optimizer):
            obj.zero_grad(set_to_none=True)
        elif isinstance(obj, nn.Module):
            obj.zero_grad(set_to_none=True)
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def _search_fitting_gpu(stepper: _Stepper, batch: Any, size: int, dev: torch.device, model: nn.Module, opt: torch.optim.Optimizer) -> int:
    def fits(b: int) -> bool:
        ok = True
        try:
            stepper(slice_batch(batch, b, size))
        except Exception as exc:
            if not _is_oom(exc):
                raise
            ok = False
        _free(dev, model, opt)
        return ok

    return largest_fitting(fits, size - 1)


def _loss_feed(data: Any, batch: Any, dev: torch.device) -> Any:
    if data is None:
        return itertools.repeat(batch)
    if callable(data):
        return (to_device(data(k), dev) for k in itertools.count())
    pool = data if isinstance(data, (list, tuple)) else None
    if pool is not None:
        return (to_device(b, dev) for b in itertools.cycle(pool))
    return (to_device(b, dev) for b in data)


def _describe_input(batch: Any, batch_size: int) -> dict[str, Any]:
    tensors = _tensors(batch)
    return {
        "shapes": [list(t.shape[1:]) if t.ndim and t.shape[0] == batch_size else list(t.shape) for t in tensors],
        "dtypes": [str(t.dtype).replace("torch.", "") for t in tensors],
    }


# ------------------------------------------------------------------ the steps of profile()


def _check_options(precision: str, optimizer: str, iterations: int, warmup: int, loss_steps: int,
                   batch_size: int | None) -> None:
    if precision not in PRECISIONS:
        raise InputError(f"unknown precision {precision!r} (use fp32 or amp)", column="--precision")
    if optimizer not in OPTIMIZERS:
        raise InputError(f"unknown optimizer {optimizer!r} (use {', '.join(OPTIMIZERS)})", column="--optimizer")
    if iterations < 1:
        raise InputError(f"expected --iterations >= 1, got {iterations}", column="--iterations")
    if warmup < 0 or loss_steps < 0:
        raise InputError("expected --warmup and --loss-steps >= 0", column="--warmup")
    if batch_size is not None and batch_size < 1:
        raise InputError(f"expected a batch size >= 1, got {batch_size}", column="--batch-size")


def _resolve_model_and_batch(model_fn: nn.Module | Callable[[], Any], batch_fn: Any,
                             batch_size: int | None) -> tuple[nn.Module, Any, int]:
    """The module, a batch of ``batch_size`` samples (sliced or rebuilt as needed), and that size."""
    if isinstance(model_fn, nn.Module):
        model, batch = model_fn, None
    else:
        built = model_fn()
        if isinstance(built, (tuple, list)) and len(built) == 2 and isinstance(built[0], nn.Module):
            model, batch = built
        elif isinstance(built, nn.Module):
            model, batch = built, None
        else:
            raise InputError(f"model_fn returned {type(built).__name__}; expected an nn.Module or (nn.Module, batch)")
    make_batch: Callable[[int], Any] | None = batch_fn if callable(batch_fn) else None
    if batch is None:
        if batch_fn is None:
            raise InputError("no batch: pass batch_fn or let model_fn return (model, batch)")
        if make_batch is not None:
            if batch_size is None:
                raise InputError("batch_fn is a function: pass batch_size as well", column="--batch-size")
            batch = make_batch(batch_size)
        else:
            batch = batch_fn
    full = infer_batch_size(batch)
    if batch_size is None:
        return model, batch, full
    if batch_size != full:
        if make_batch is not None:
            batch = make_batch(batch_size)
            full = infer_batch_size(batch)
        if batch_size < full:
            batch = slice_batch(batch, batch_size, full)
        elif batch_size > full:
            raise InputError(
                f"the batch has {full} samples and cannot be enlarged to {batch_size}; give the entry point a "
                "batch_size parameter or pass a smaller --batch-size",
                column="--batch-size",
            )
    return model, batch, batch_size


def _run_probe(model: nn.Module, batch: Any, batch_size: int, dev: torch.device, precision: str,
               model_name: str, report: ProgressFn, notes: list[str]) -> dict[str, float]:
    """Step 1: one forward + backward on ``min(B, 2)`` samples; a probe that runs out of memory
    means the model does not fit at all."""
    report("probe", 0, 1)
    probe_size = min(batch_size, 2)
    try:
        # Copies, not views: a view would carry the whole batch's storage into the byte count.
        probe_batch = tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x,
                               slice_batch(batch, probe_size, batch_size))
        probe = _probe(model, probe_batch, probe_size, dev, precision)
    except Exception as exc:
        if _is_oom(exc):
            _free(dev)
            raise BatchSizeError(
                f"model {model_name!r} does not fit in {_device_words(dev)} memory even at batch size {probe_size}",
                largest_fitting=0,
            ) from None
        raise
    report("probe", 1, 1)
    if probe["surrogate"]:
        notes.append("model output is not a scalar loss: timed with mean(output**2) as a surrogate loss")
    if probe["flops_forward"] == 0:
        notes.append("FlopCounterMode saw no matmul/conv/attention FLOPs in this model")
    return probe


def _check_fits_host(model_name: str, batch_size: int, dev: torch.device, param_bytes: int,
                     static_est: float, per_sample_est: float) -> None:
    """Step 2 on a CPU: the estimated peak against the host's available memory (a GPU's first
    real step is its own test, in :func:`_guarded_step`)."""
    avail = available_memory_bytes(dev)
    if avail is None:
        return
    budget = 0.9 * avail + param_bytes  # parameters are already allocated

    def fits(b: int) -> bool:
        return static_est + per_sample_est * b <= budget

    if not fits(batch_size):
        best = largest_fitting(fits, batch_size - 1)
        raise _too_big(model_name, batch_size, best, dev, static_est + per_sample_est * batch_size, avail)


def _guarded_step(stepper: _Stepper, model: nn.Module, opt: torch.optim.Optimizer, batch: Any, batch_size: int,
                  dev: torch.device, model_name: str, estimate: EstimateFn | None, info: dict[str, Any],
                  iterations: int, max_time_s: float | None) -> Callable[[Any], tuple[float, float, float, Any]]:
    """One training step that announces the measured pace after the first step and turns an
    out-of-memory error into a :class:`BatchSizeError` naming the largest batch that fits."""
    total_steps = info["steps"]
    first_step = [True]

    def run_step(b: Any) -> tuple[float, float, float, Any]:
        try:
            t_step = time.perf_counter()
            out = stepper(b)
            if first_step[0] and estimate is not None:
                first_step[0] = False
                step_s = time.perf_counter() - t_step
                left = total_steps - 1
                if max_time_s is not None:
                    left = min(left, total_steps - iterations - 1 + max(3, math.ceil(max_time_s / max(step_s, 1e-9))))
                estimate({**info, "step_s": step_s, "remaining_s": left * step_s})
            return out
        except Exception as exc:
            if not _is_oom(exc):
                raise
        # Outside the except block so the failed step's tensors can be freed.
        _free(dev, model, opt)
        best = _search_fitting_gpu(stepper, batch, batch_size, dev, model, opt)
        raise _too_big(model_name, batch_size, best, dev, None, None)

    return run_step


def _loss_curve(run_step: Callable[[Any], tuple[float, float, float, Any]], feed: Any, loss_steps: int,
                report: ProgressFn, notes: list[str]) -> list[list[float]]:
    """Step 3: ``loss_steps`` training steps on the fed batches, as ``[[step, loss], ...]``."""
    losses = []
    for k in range(loss_steps):
        step_batch = next(feed, None)
        if step_batch is None:
            notes.append(f"loss curve stopped after {k} steps: the data ran out")
            break
        *_, loss = run_step(step_batch)
        losses.append(loss)
        report("loss-curve", k + 1, loss_steps)
    loss_curve = [[float(k), float(v)] for k, v in enumerate(losses)]
    if any(not math.isfinite(v) for _, v in loss_curve):
        notes.append("loss curve has non-finite values (learning rate too high for this model?)")
    return loss_curve


def _measure(run_step: Callable[[Any], tuple[float, float, float, Any]], batch: Any, iterations: int,
             max_time_s: float | None, dev: torch.device, report: ProgressFn,
             notes: list[str]) -> tuple[list[tuple[float, float, float]], float, int | None]:
    """Step 4: the measured steps as (forward, backward, optimizer) seconds, their sum, and the
    GPU's peak allocated bytes over them (None on a CPU)."""
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    samples: list[tuple[float, float, float]] = []
    measured = 0.0
    for k in range(iterations):
        f, b, o, _ = run_step(batch)
        samples.append((f, b, o))
        measured += f + b + o
        report("measure", k + 1, iterations)
        if max_time_s is not None and measured > max_time_s and k + 1 >= 3:
            notes.append(f"stopped after {k + 1} of {iterations} iterations: --max-time {max_time_s:g}s reached")
            break
    peak = int(torch.cuda.max_memory_allocated(dev)) if dev.type == "cuda" else None
    return samples, measured, peak


def _phase_timings(samples: list[tuple[float, float, float]]) -> dict[str, PhaseTiming]:
    return {
        "forward": PhaseTiming.from_samples([s[0] for s in samples]),
        "backward": PhaseTiming.from_samples([s[1] for s in samples]),
        "optimizer": PhaseTiming.from_samples([s[2] for s in samples]),
        "total": PhaseTiming.from_samples([sum(s) for s in samples]),
    }


def _memory_record(static_bytes: int, activation_bytes: float, peak: int | None, per_sample_est: float,
                   batch_size: int) -> dict[str, Any]:
    """The profile's memory section: measured on a GPU, estimated (plus the process's max RSS) on a CPU."""
    memory: dict[str, Any] = {
        "static_bytes": static_bytes,
        "activation_bytes_per_sample": activation_bytes,
    }
    if peak is not None:
        memory.update(
            peak_bytes=peak,
            peak_bytes_per_sample=max(peak - static_bytes, 0) / batch_size,
            method="torch.cuda.max_memory_allocated over the measured steps; activations from saved-tensor hooks",
        )
    else:
        memory.update(
            process_max_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            peak_bytes=int(static_bytes + per_sample_est * batch_size),
            peak_bytes_per_sample=per_sample_est,
            method=f"estimate: static + {_ACTIVATION_PEAK_FACTOR} x tensors saved for backward (saved-tensor hooks)",
        )
    return memory
