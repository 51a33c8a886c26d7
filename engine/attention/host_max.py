"""FlashInfer's plans without their per-element scans of host tensors.

FlashInfer 0.6.8's ``plan`` of the prefill wrapper (every prefill, mixed and token-graph step)
and of the tensor-core decode wrapper (llama3-8b's decodes) finds the longest query and KV
length with Python's builtin ``max`` over a CPU tensor: that iterates the tensor as 0-d tensors
and compares them pairwise with tensor operations, about 15 us per sequence. On the H200 host
(`bench.host_steps`' mixed step, 33 sequences, qwen3-0.6b) the prefill plan took 1.39 ms of the
launch's 2.49 ms, 1.1 ms of it in those two calls (cProfile, docs/engine.md).

`tensor_max` gives the same answer from one reduction, and `install` binds it as ``max`` in the
namespace of FlashInfer's modules, where a function's name lookup finds it before the builtin.
Only a single 1-D tensor of an integer or bool dtype takes the reduction (the value equals the
builtin's; the builtin's 0-d tensor is a view of its element, this one a new tensor, and
FlashInfer reads either with ``.item()``); anything else (several arguments, ``key``,
``default``, lists, float tensors, whose NaNs the two treat differently, empty tensors) goes to
the builtin unchanged. The binding is process-wide and idempotent; `uninstall` removes it.
"""

from __future__ import annotations

import builtins
from types import ModuleType
from typing import Any, Iterable

import torch

# FlashInfer modules whose plans scan host tensors with ``max`` (0.6.8: prefill.py, decode.py).
PLAN_MODULES: tuple[str, ...] = ("prefill", "decode")


def tensor_max(*args: Any, **kwargs: Any) -> Any:
    """``max`` with a reduction for a lone non-empty 1-D integer (or bool) tensor; the builtin
    for every other call."""
    if len(args) == 1 and not kwargs:
        x = args[0]
        if isinstance(x, torch.Tensor) and x.dim() == 1 and x.numel() > 0 and \
                not x.dtype.is_floating_point and not x.dtype.is_complex:
            return x.max()
    return builtins.max(*args, **kwargs)


def _modules(package: ModuleType, names: Iterable[str]) -> list[ModuleType]:
    out = []
    for name in names:
        mod = getattr(package, name, None)
        if isinstance(mod, ModuleType):
            out.append(mod)
    return out


def install(package: ModuleType, names: Iterable[str] = PLAN_MODULES) -> int:
    """Bind `tensor_max` as ``max`` in ``package``'s submodules ``names`` (those it has); returns
    how many now have it. A module that defines a ``max`` of its own keeps it."""
    n = 0
    for mod in _modules(package, names):
        cur = mod.__dict__.get("max")
        if cur is None:
            mod.max = tensor_max  # type: ignore[attr-defined]
            n += 1
        elif cur is tensor_max:
            n += 1
    return n


def uninstall(package: ModuleType, names: Iterable[str] = PLAN_MODULES) -> None:
    """Remove the binding of `install` (the builtin serves those modules again)."""
    for mod in _modules(package, names):
        if mod.__dict__.get("max") is tensor_max:
            del mod.max  # type: ignore[attr-defined]
