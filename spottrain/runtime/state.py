"""Stateful things as tensors + plain JSON: the one codec used by checkpoints and by the
in-memory state hand-over between workers.

A state dict (model, optimizer, scheduler, sampler, RNG, step) is split into

- ``tree``: a JSON-able structure where every tensor is replaced by ``{"__tensor__": key}``
  and every dict with non-string keys (optimizer state is keyed by ints) is written as
  ``{"__items__": [[key, value], ...]}``;
- ``tensors``: ``{key: tensor}``.

Nothing here pickles: a checkpoint is read back with ``torch.load(weights_only=True)`` on a flat
``{str: Tensor}`` and ``json.loads``, so loading cannot run code from the file.
"""

from __future__ import annotations

import json
from typing import Any

import torch
import torch.distributed as dist

_SCALARS = (str, int, float, bool, type(None))


def flatten(obj: Any, prefix: str = "") -> tuple[Any, dict[str, torch.Tensor]]:
    """Split ``obj`` into a JSON tree and a flat ``{key: tensor}`` dict."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(x: Any, path: str) -> Any:
        if isinstance(x, torch.Tensor):
            tensors[path] = x
            return {"__tensor__": path}
        if isinstance(x, dict):
            if all(isinstance(k, str) for k in x):
                return {k: walk(v, f"{path}/{k}") for k, v in x.items()}
            if not all(isinstance(k, _SCALARS) for k in x):
                raise TypeError(f"cannot store a dict keyed by non-plain values at {path or '/'}")
            return {"__items__": [[k, walk(v, f"{path}/{k}")] for k, v in x.items()]}
        if isinstance(x, (list, tuple)):
            return [walk(v, f"{path}/{i}") for i, v in enumerate(x)]
        if isinstance(x, _SCALARS):
            return x
        raise TypeError(f"cannot store {type(x).__name__} at {path or '/'}: only tensors and plain values")

    return walk(obj, prefix), tensors


def unflatten(tree: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of :func:`flatten`."""
    if isinstance(tree, dict):
        if "__tensor__" in tree and len(tree) == 1:
            return tensors[tree["__tensor__"]]
        if "__items__" in tree and len(tree) == 1:
            return {k: unflatten(v, tensors) for k, v in tree["__items__"]}
        return {k: unflatten(v, tensors) for k, v in tree.items()}
    if isinstance(tree, list):
        return [unflatten(v, tensors) for v in tree]
    return tree


def snapshot(obj: Any) -> Any:
    """A deep copy with every tensor detached and cloned to CPU (the "snapshot" phase)."""
    tree, tensors = flatten(obj)
    return unflatten(tree, {k: t.detach().to("cpu", copy=True) for k, t in tensors.items()})


def broadcast_state(state: Any | None, src: int, group: Any = None, *, device: Any = "cpu") -> Any:
    """Send ``state`` from rank ``src`` to every rank of ``group`` without pickling.

    The header (tree + tensor shapes/dtypes) travels as a uint8 tensor of JSON; the tensors
    travel as one flat buffer per dtype, on ``device`` (a GPU for NCCL). Received tensors are
    returned on the CPU; ``load_state_dict`` copies them where they belong.
    """
    rank = dist.get_rank(group)
    if rank == src:
        tree, tensors = flatten(state)
        meta = [[k, str(t.dtype).removeprefix("torch."), list(t.shape)] for k, t in tensors.items()]
        header = json.dumps({"tree": tree, "meta": meta}).encode()
        length = torch.tensor([len(header)], dtype=torch.int64, device=device)
    else:
        length = torch.zeros(1, dtype=torch.int64, device=device)
    dist.broadcast(length, src, group=group)
    if rank == src:
        buf = torch.frombuffer(bytearray(header), dtype=torch.uint8).to(device)
    else:
        buf = torch.empty(int(length.item()), dtype=torch.uint8, device=device)
    dist.broadcast(buf, src, group=group)
    head = json.loads(buf.cpu().numpy().tobytes().decode())
    by_dtype: dict[str, list[tuple[str, list[int]]]] = {}
    for key, dtype, shape in head["meta"]:
        by_dtype.setdefault(dtype, []).append((key, shape))
    out: dict[str, torch.Tensor] = {}
    for dtype_name, items in sorted(by_dtype.items()):
        dtype = getattr(torch, dtype_name)
        sizes = [_numel(shape) for _, shape in items]
        if rank == src:
            flat = torch.cat([tensors[k].detach().reshape(-1).to(device=device, dtype=dtype) for k, _ in items])
        else:
            flat = torch.empty(sum(sizes), dtype=dtype, device=device)
        dist.broadcast(flat, src, group=group)
        flat = flat.cpu()
        for (key, shape), part in zip(items, torch.split(flat, sizes)):
            out[key] = part.clone().reshape(shape)
    return unflatten(head["tree"], out)


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
