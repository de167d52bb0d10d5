"""How long a throughput fit takes, with the grouped finite-difference Jacobian and without it.

    .venv/bin/python bench/fit_speed.py [--write bench/results/fit_speed.md]

The fit (``ThroughputModel.fit``, Levenberg-Marquardt) differentiates its residuals numerically.
One evaluation per parameter costs ~250 evaluations of the model per Jacobian on the shipped
calibration; ``throughput._grouped_jacobian`` moves parameters whose residual entries are disjoint
(two GPU types' effects, two models', two studies') in one evaluation and reads each one's own
entries. Each case is fitted both ways in the same run (the baseline: scipy's one-per-parameter
``2-point`` Jacobian, patched in), once each; the table gives the seconds, their ratio, and the
largest difference between the two fits' parameters (0 when the Jacobians agree bitwise).

Cases: the shipped calibration (``fit_default_model``'s rows), one leave-one-study-out fit of
bench/prediction_accuracy.py (Pollux held out), and a user's own table fitted over the calibration
(our H100/H200 rows, what ``predict --measurements`` does with a prior).
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

from spottrain.perf import throughput  # noqa: E402
from spottrain.perf.measurements import load_shipped  # noqa: E402
from spottrain.perf.throughput import ThroughputModel, default_model  # noqa: E402


def _params(model: ThroughputModel) -> np.ndarray:
    return np.concatenate([model.theta_, *(np.array(list(getattr(model, n).values()), float) for n in
                                           ("gpu_effects_", "model_effects_", "inter_effects_"))])


def _timed(fit) -> tuple[float, ThroughputModel]:
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = fit()
    return time.perf_counter() - t, model


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from _machine import machine

    t0 = time.time()
    every = load_shipped()
    pollux_out = [m for m in every if not (m.extra.get("source") or "").startswith("pollux")]
    own = load_shipped(("hopper_zoo",))
    prior = default_model()
    cases = [
        ("shipped calibration", every, lambda rows: ThroughputModel(folds=0, correction="none").fit(rows)),
        ("leave one study out (Pollux held out)", pollux_out,
         lambda rows: ThroughputModel(folds=0, correction="none").fit(rows)),
        ("a user's table over the calibration (H100/H200 rows)", own,
         lambda rows: ThroughputModel(prior=prior, folds=0, correction="none").fit(rows)),
    ]
    grouped = throughput._grouped_jacobian
    table = []
    for name, rows, fit in cases:
        throughput._grouped_jacobian = lambda fun, supports: (fun, "2-point")
        try:
            t_dense, dense = _timed(lambda: fit(rows))
        finally:
            throughput._grouped_jacobian = grouped
        t_grouped, fast = _timed(lambda: fit(rows))
        a, b = _params(dense), _params(fast)
        diff = float(np.max(np.abs(a - b))) if a.shape == b.shape else float("nan")
        table.append(f"| {name} | {len(rows)} | {len(a)} | {t_dense:.1f} | {t_grouped:.1f} | "
                     f"x{t_dense / t_grouped:.1f} | {diff:.1e} |")
        print(table[-1], flush=True)
    lines = ["# Fit speed: grouped finite-difference Jacobian", "",
             "Command: `.venv/bin/python bench/fit_speed.py --write bench/results/fit_speed.md`", "",
             f"Machine: {machine()}; runtime {time.time() - t0:.0f} s. One fit each way per case.", "",
             "| fit | rows | parameters | one evaluation per parameter (s) | grouped (s) | speed-up | "
             "largest parameter difference |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |", *table, ""]
    print("\n".join(lines))
    from _pages import write_results

    write_results(argv, __file__, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
