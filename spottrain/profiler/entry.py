"""Load a user's ``module:function`` (or ``path/to/file.py:function``) entry point.

The function returns ``(model, batch)``: a ``torch.nn.Module`` and one batch for it. If it
accepts a ``batch_size`` argument, the profiler passes the requested batch size. The batch is
passed to the model as ``model(*batch)`` for a tuple/list, ``model(**batch)`` for a dict and
``model(batch)`` otherwise; see :func:`spottrain.profiler.profiler.loss_of` for the loss.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

from spottrain.errors import InputError


def is_entry_point(text: str) -> bool:
    """``module:function`` or ``file.py:function`` rather than a zoo name."""
    return ":" in text and not text.startswith(":") and not text.endswith(":")


def load_entry_point(spec: str, *, option: str = "--model") -> Callable[..., Any]:
    """Import ``spec`` and return the function; one-line :class:`InputError` on failure."""
    module_name, _, func_name = spec.rpartition(":")
    if not module_name or not func_name.isidentifier():
        raise InputError(f"expected module:function (e.g. mypkg.models:build), got {spec!r}", column=option)
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = Path(module_name)
            if not path.is_file():
                raise InputError(f"{spec}: no such file {module_name!r}", column=option)
            mod_spec = importlib.util.spec_from_file_location(f"_spottrain_user_{path.stem}", path)
            if mod_spec is None or mod_spec.loader is None:
                raise InputError(f"{spec}: cannot load {module_name!r} as a Python module", column=option)
            module = importlib.util.module_from_spec(mod_spec)
            mod_spec.loader.exec_module(module)
        else:
            # Like `python -m`: modules in the current directory are importable.
            if os.getcwd() not in sys.path and "" not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
    except InputError:
        raise
    except Exception as exc:  # the user's module may raise anything while importing
        raise InputError(f"{spec}: cannot import {module_name!r}: {type(exc).__name__}: {exc}", column=option) from None
    func = getattr(module, func_name, None)
    if func is None:
        raise InputError(f"{spec}: module {module_name!r} has no attribute {func_name!r}", column=option)
    if not callable(func):
        raise InputError(f"{spec}: {func_name!r} is a {type(func).__name__}, not a function", column=option)
    return func


def accepts_batch_size(func: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    return "batch_size" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def call_entry_point(func: Callable[..., Any], spec: str, batch_size: int | None, *, option: str = "--model") -> tuple[nn.Module, Any]:
    """Call the entry point and check that it returned ``(nn.Module, batch)``."""
    try:
        if batch_size is not None and accepts_batch_size(func):
            result = func(batch_size=batch_size)
        else:
            result = func()
    except Exception as exc:
        raise InputError(f"{spec} raised {type(exc).__name__}: {exc}", column=option) from None
    if not (isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[0], nn.Module)):
        got = type(result).__name__
        if isinstance(result, (tuple, list)):
            got = f"{got} of ({', '.join(type(x).__name__ for x in result)})"
        raise InputError(f"{spec} returned {got}; expected a tuple (torch.nn.Module, batch)", column=option)
    return result[0], result[1]


def load_data(spec: str, *, option: str = "--data") -> Any:
    """Call a ``module:function`` that returns an iterable of batches (for the loss curve)."""
    func = load_entry_point(spec, option=option)
    try:
        data = func()
    except Exception as exc:
        raise InputError(f"{spec} raised {type(exc).__name__}: {exc}", column=option) from None
    if not (callable(data) or hasattr(data, "__iter__")):
        raise InputError(f"{spec} returned {type(data).__name__}; expected an iterable of batches", column=option)
    return data
