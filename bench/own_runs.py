"""What one measured run on your own cluster buys (`predict --from-store`), on the shipped tables.

    .venv/bin/python bench/own_runs.py [--write bench/results/own_runs.md]

Protocol (a new user whose framework and hosts the prior has not seen): each shipped study is
held out in turn and the prior is fitted on the others (the shipped calibration's recipe). In
the held-out study, rows are grouped by what a user keeps fixed while trying cluster sizes: model,
GPU type(s), per-GPU batch, ps, sync and precision. For each group with 3+ rows, its smallest
cluster stands for the user's first run (stored as a measurement row, as `spottrain run` stores
one), and every other row of the group is predicted:

- prior only (`--no-from-store`);
- prior + the one own row (:func:`spottrain.perf.own_runs.refit_with_own_rows`, what
  `predict --from-store` fits);
- naive baseline: the own row scaled linearly with the GPU count;
- prior + one own row at the group's middle cluster size instead (a run on a multi-GPU or
  multi-node cluster), predicting the group's other rows.

Figures: MAPE over the predicted rows of each held-out study, and the ~90 % interval's coverage
of the prior+own-row predictions.
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from spottrain.perf.measurements import load_shipped  # noqa: E402
from spottrain.perf.own_runs import OwnRuns, refit_with_own_rows  # noqa: E402
from spottrain.perf.throughput import ThroughputModel  # noqa: E402

STUDIES = {"cmdare": "CM-DARE", "transient-dl": "transient-dl", "lambda-dl-benchmark": "Lambda", "pollux": "Pollux"}


def study_of(m) -> str:
    return (m.extra.get("source") or "").split("/")[0]


def group_key(m) -> tuple:
    gpus = "+".join(sorted({g.gpu for g in m.cluster.groups}))
    return (m.model, gpus, m.batch_size, m.ps, m.sync, m.precision, m.network_gbps)


def held_out(study: str, rows: list) -> list[dict]:
    train = [m for m in rows if study_of(m) != study]
    test = [m for m in rows if study_of(m) == study]
    prior = ThroughputModel(folds=0, correction="none").fit(train)
    prior.link_effects_ = {}  # as the shipped calibration (fit_default_model)
    groups: dict[tuple, list] = defaultdict(list)
    for m in test:
        groups[group_key(m)].append(m)
    out = []
    for key, members in groups.items():
        if len({m.cluster.total_gpus for m in members}) < 2 or len(members) < 3:
            continue
        ordered = sorted(members, key=lambda m: (m.cluster.total_gpus, m.cluster.nodes, str(m.cluster)))
        own, mid = ordered[0], ordered[len(ordered) // 2]
        rest = [m for m in members if m is not own]
        rest_mid = [m for m in members if m is not mid]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fitted = refit_with_own_rows(prior, OwnRuns(store_path=Path("-"), exists=True, rows=[own]))
            fitted_mid = refit_with_own_rows(prior, OwnRuns(store_path=Path("-"), exists=True, rows=[mid]))
            p_prior = prior.predict(rest, warn=False)
            p_own = fitted.predict(rest, warn=False)
            p_mid = fitted_mid.predict(rest_mid, warn=False)
        for m, a, b in zip(rest, p_prior, p_own):
            out.append({"study": study, "group": key, "measured": m.throughput, "prior": a.throughput,
                        "own": b.throughput, "low": b.low, "high": b.high,
                        "linear": own.throughput * m.cluster.total_gpus / own.cluster.total_gpus})
        for m, c in zip(rest_mid, p_mid):
            out.append({"study": study, "group": key, "measured": m.throughput, "mid": c.throughput})
    return out


def ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas * 100


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from _machine import machine

    t0 = time.time()
    rows = load_shipped()
    records = []
    for study in STUDIES:
        records += held_out(study, rows)
    header = ("| held-out study | groups | rows predicted | prior only MAPE % | prior + 1 own row (smallest) MAPE % | "
              "linear from that row MAPE % | ~90 % interval covers | prior + 1 own row (middle size) MAPE % |")
    lines = ["# What one measured run buys (`predict --from-store`)", "",
             "Command: `.venv/bin/python bench/own_runs.py --write bench/results/own_runs.md`", "",
             f"Machine: {machine()}; runtime {time.time() - t0:.0f} s.", "",
             "Each study held out in turn (prior fitted on the others); per group of rows differing only in "
             "cluster size, the smallest cluster is the user's one stored run and the other rows are predicted.", "",
             header, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for study, name in STUDIES.items():
        rec = [r for r in records if r["study"] == study and "own" in r]
        mid = [r for r in records if r["study"] == study and "mid" in r]
        if not rec:
            lines.append(f"| {name} | 0 | 0 | - | - | - | - | - |")
            continue
        cover = sum(r["low"] <= r["measured"] <= r["high"] for r in rec) / len(rec) * 100
        lines.append(f"| {name} | {len({r['group'] for r in rec})} | {len(rec)} | "
                     f"{statistics.fmean(ape(r['prior'], r['measured']) for r in rec):.1f} | "
                     f"{statistics.fmean(ape(r['own'], r['measured']) for r in rec):.1f} | "
                     f"{statistics.fmean(ape(r['linear'], r['measured']) for r in rec):.1f} | {cover:.0f} % | "
                     f"{statistics.fmean(ape(r['mid'], r['measured']) for r in mid):.1f} |")
    lines.append("")
    print("\n".join(lines))
    from _pages import write_results

    write_results(argv, __file__, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
