"""Regenerate the FLOPs and activations tables of :mod:`spottrain.profiler.zoo_info`.

    python -m spottrain.profiler.gen_zoo_flops           # rewrite the table in zoo_info.py
    python -m spottrain.profiler.gen_zoo_flops --check   # exit 1 if the table is stale

Each zoo model is built on the ``meta`` device (no memory, no arithmetic) and run at its
default input shape with batch 2; forward FLOPs are counted over ``loss = model(*batch)``
and backward FLOPs over ``loss.backward()``; both are divided by the batch size.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

import torch
from spottrain.profiler.flops import CountingActivations, counting_flops

from spottrain.profiler import zoo

# The module, not the package's attribute of the same name (the package exports the function zoo_info).
zoo_info = importlib.import_module("spottrain.profiler.zoo_info")

_BATCH = 2
_BLOCK = re.compile(r"(# BEGIN GENERATED FLOPS[^\n]*\n)(.*?)(# END GENERATED FLOPS)", re.S)


def count_zoo_flops(name: str, batch_size: int = _BATCH) -> tuple[float, float]:
    """(forward, backward) FLOPs per sample of zoo model ``name``."""
    model, batch = zoo.build(name, batch_size, device="meta")
    with counting_flops() as forward:
        loss = model(*batch)
    with counting_flops() as backward:
        loss.backward()
    return forward.get_total_flops() / batch_size, backward.get_total_flops() / batch_size


def count_zoo_activations(name: str, batch_size: int = _BATCH) -> float:
    """Elements the forward pass of zoo model ``name`` writes per sample (views excluded)."""
    model, batch = zoo.build(name, batch_size, device="meta")
    with CountingActivations() as counter:
        model(*batch)
    return counter.elements / batch_size


def render_table() -> str:
    version = f"torch {torch.__version__.split('+')[0]}, batch {_BATCH}, meta device"
    lines = ["FLOPS_PER_SAMPLE: dict[str, tuple[float, float]] = {"]
    lines.append(f"    # name: (forward, backward) FLOPs per sample; {version}")
    for name in zoo_info.zoo_names():
        fwd, bwd = count_zoo_flops(name)
        lines.append(f"    {name!r}: ({fwd:.6e}, {bwd:.6e}),")
    lines.append("}")
    lines.append("ACTIVATIONS_PER_SAMPLE: dict[str, float] = {")
    lines.append(f"    # name: elements the forward pass writes per sample (views excluded); {version}")
    for name in zoo_info.zoo_names():
        lines.append(f"    {name!r}: {count_zoo_activations(name):.6e},")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if zoo_info.py's table differs")
    args = parser.parse_args(argv)
    path = Path(zoo_info.__file__)
    text = path.read_text(encoding="utf-8")
    table = render_table()
    current = _BLOCK.search(text)
    if current is None:
        print(f"{path}: generated-table markers not found", file=sys.stderr)
        return 2
    # Compare numbers only: the comment line names the torch version.
    stale = [l for l in current.group(2).splitlines() if not l.strip().startswith("#")] != [
        l for l in table.splitlines() if not l.strip().startswith("#")
    ]
    if args.check:
        print("stale" if stale else "up to date")
        return 1 if stale else 0
    path.write_text(text[: current.start(2)] + table + text[current.end(2):], encoding="utf-8")
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
