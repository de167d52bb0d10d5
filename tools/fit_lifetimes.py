"""Refit the slow lifetime laws on every shipped lifetime pool and save their parameters.

    python tools/fit_lifetimes.py            # writes spottrain/data/traces/lifetime_fits.json
    python tools/fit_lifetimes.py --check    # exit 1 when the shipped file is stale

:func:`spottrain.transience.select.fit_models` rebuilds a shipped law from these parameters when
the data's fingerprint matches, so the first ``spottrain plan`` of a process does not spend
seconds in the bathtub model's multi-start Nelder-Mead. Rerun after changing the shipped traces
or the lifetime models; ``tests/test_transience_models.py`` refits and compares.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from spottrain.transience.select import SHIPPED_FITS, SHIPPED_MODELS, data_fingerprint, fit_models, lifetime_pools

OUT = Path(__file__).resolve().parents[1] / "spottrain" / Path(*SHIPPED_FITS)


def compute() -> dict:
    fits = {}
    for names, data, cap in lifetime_pools():
        models = fit_models(data.durations_s, data.observed, max_lifetime_s=cap, models=SHIPPED_MODELS,
                            use_shipped=False)
        params = {k: m.fitted_params() for k, m in models.items() if k in SHIPPED_MODELS}
        if params:
            fits[data_fingerprint(data.durations_s, data.observed, cap)] = {
                "traces": list(names), "nodes": int(len(data)), "revocations": int(data.observed.sum()),
                "max_lifetime_s": cap, "models": params}
    return {"generated_by": "tools/fit_lifetimes.py", "fits": fits}


def main(argv: list[str]) -> int:
    doc = compute()
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if "--check" in argv:
        same = OUT.exists() and OUT.read_text() == text
        print("up to date" if same else f"stale: rerun python tools/fit_lifetimes.py ({OUT})")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"{len(doc['fits'])} pools -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
