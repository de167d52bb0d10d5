"""Pollux's rows across nodes, held out per model, scored per node count; then 6-16 nodes from 1-4.

    .venv/bin/python bench/multi_node_by_size.py [--write bench/results/multi_node_by_size.md]

The rows of bench/prediction_accuracy.py's multi-node goal (each Pollux model's rows across 2-16
nodes, predicted with that model's one-node rows known), split by the number of nodes: where the
error and the intervals' misses are. Two fits per held-out model, as on that page: the joint fit
(the other studies, Pollux's other models and the held model's one-node rows) and a user's
``predict --measurements`` (the held model's one-node rows on a prior fitted on everything else).
Then every model's rows of 6-16 nodes from a fit on 1-4 nodes: whether the TCP rate and the
spread of the links' rates, fitted on small rings, carry to larger ones.
"""

from __future__ import annotations

import platform
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from prediction_accuracy import STUDIES, fit  # noqa: E402

from spottrain.perf import ThroughputModel, load_shipped  # noqa: E402

warnings.filterwarnings("ignore")


def split() -> tuple[list, list]:
    """(Pollux's rows, every other study's rows)."""
    rows = {name: load_shipped((table,)) for name, table in STUDIES.items()}
    return rows["Pollux"], [m for name, rs in rows.items() if name != "Pollux" for m in rs]


def scored(po, others) -> dict[tuple[str, int], list[tuple[float, float, float, float]]]:
    """(path, nodes) -> one (measured, predicted, low, high) per held-out row."""
    out: dict = defaultdict(list)
    for held in sorted({m.model for m in po}):
        rest = [m for m in po if m.model != held]
        user = [m for m in po if m.model == held and m.cluster.nodes == 1]
        test = [m for m in po if m.model == held and m.cluster.nodes > 1]
        joint = fit(others + rest + user)
        mine = ThroughputModel(prior=fit(others + rest), folds=5 if len(user) >= 10 else 0).fit(user)
        for path, model in (("one node measured (joint fit)", joint), ("predict --measurements", mine)):
            for m, p in zip(test, model.predict(test, warn=False)):
                out[path, m.cluster.nodes].append((m.throughput, p.throughput, p.low, p.high))
        print(f"  {held}: done", flush=True)
    return out


def beyond_four_nodes(po, others) -> dict[int, list[tuple[float, float, float, float]]]:
    """nodes -> (measured, predicted, low, high) of Pollux's 6-16 node rows, predicted by a fit on
    every other study and Pollux's rows of 1-4 nodes (every model): how far the network model
    carries past the cluster sizes it was fitted on."""
    model = fit(others + [m for m in po if m.cluster.nodes <= 4])
    test = [m for m in po if m.cluster.nodes >= 6]
    out: dict = defaultdict(list)
    for m, p in zip(test, model.predict(test, warn=False)):
        out[m.cluster.nodes].append((m.throughput, p.throughput, p.low, p.high))
    return out


def _line(label: str, v) -> str:
    y, p, lo, hi = (np.array(c) for c in zip(*v))
    return (f"| {label} | {len(y)} | {np.mean(np.abs(p / y - 1)) * 100:.1f} | {np.mean(np.log(p / y)) * 100:+.1f} | "
            f"{np.mean((lo <= y) & (y <= hi)) * 100:.1f} | {np.mean(y < lo) * 100:.1f} | x{np.median(hi / lo):.2f} |")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    t0 = time.time()
    po, others = split()
    res = scored(po, others)
    lines = ["# Pollux across nodes, per node count", "",
             "Command: `.venv/bin/python bench/multi_node_by_size.py`  ",
             f"Machine: {platform.machine()}, Python {platform.python_version()}; runtime {time.time() - t0:.0f} s.", "",
             "Each Pollux model held out; its rows across nodes predicted with its one-node rows known, scored per "
             "number of nodes. Bias: mean log(predicted / measured), + = predicted too fast.", "",
             "| path | nodes | rows | MAPE % | bias % | ~90 % interval covers % | below the interval % | median width |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for (path, nodes), v in sorted(res.items()):
        lines.append(_line(f"{path} | {nodes}", v))
    far = beyond_four_nodes(po, others)
    lines += ["", "Past the sizes fitted: every model's rows of 6-16 nodes, predicted by a fit on the other studies and "
              "Pollux's rows of 1-4 nodes (all four models).", "",
              "| nodes | rows | MAPE % | bias % | ~90 % interval covers % | below the interval % | median width |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for nodes, v in sorted(far.items()):
        lines.append(_line(str(nodes), v))
    lines.append(_line("6-16", [r for v in far.values() for r in v]))
    print("\n".join(lines))
    from _pages import write_results

    write_results(argv, __file__, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
