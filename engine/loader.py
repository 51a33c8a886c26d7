"""Weight loading: stream HF safetensors tensor by tensor into (fused, sharded) parameters, or fill
random "dummy" weights of the right shape.

Both formats feed the same name → parameter mapping: each checkpoint tensor goes through its
parameter's ``weight_loader``, which copies this tensor-parallel rank's slice. Safetensors
tensors arrive as `LazySlice` views, so a rank reads only its own shard's bytes.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Callable, Iterable, Iterator

import torch
from torch import nn

from twinserve.core.registry import Registry
from twinserve.engine.layers.lazy_tensor import LazySlice
from twinserve.engine.layers.linear import default_weight_loader

LoadFn = Callable[[nn.Module, Path, int], None]
LOAD_FORMATS: Registry[LoadFn] = Registry("load format")

_SKIP_SUFFIXES = ("rotary_emb.inv_freq",)


def _checkpoint_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [model_dir / n for n in names]
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {model_dir}")
    return files


def iter_checkpoint(model_dir: Path) -> Iterator[tuple[str, LazySlice]]:
    """Yield ``(name, lazy view)`` per checkpoint tensor, file by file; a view must be read
    (by a weight loader) before the iteration moves on, while its file is open."""
    from safetensors import safe_open

    for path in _checkpoint_files(model_dir):
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for name in f.keys():
                sl = f.get_slice(name)
                yield name, LazySlice(sl, tuple(sl.get_shape()))


def load_named_tensors(model: nn.Module, tensors: Iterable[tuple[str, torch.Tensor | LazySlice]],
                       source: str) -> None:
    """Copy each ``(HF name, full tensor)`` into its parameter (slice) via the parameter's
    weight_loader. Raises ``KeyError`` for an unknown tensor and ``ValueError`` when a parameter
    received no data."""
    params = dict(model.named_parameters())
    stacked = getattr(model, "stacked_params", [])
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    filled: set[str] = set()
    for name, tensor in tensors:
        if name.endswith(_SKIP_SUFFIXES) or (tied and name == "lm_head.weight"):
            continue
        target, shard = name, None
        for fused, part, shard_id in stacked:
            if f".{part}." in name:
                target, shard = name.replace(f".{part}.", f".{fused}."), shard_id
                break
        if target not in params:
            raise KeyError(f"checkpoint tensor '{name}' has no parameter '{target}' in {type(model).__name__}")
        param = params[target]
        loader = getattr(param, "weight_loader", default_weight_loader)
        loader(param, tensor, shard)
        filled.add(target)
    missing = [n for n in params if n not in filled and not (tied and n == "lm_head.weight")]
    if missing:
        raise ValueError(f"checkpoint in {source} lacks weights for: {', '.join(missing[:8])}")


@LOAD_FORMATS.register("safetensors")
def load_safetensors(model: nn.Module, model_dir: Path, seed: int = 0) -> None:
    """Stream the directory's safetensors into the model (this rank's slices only)."""
    load_named_tensors(model, iter_checkpoint(Path(model_dir)), str(model_dir))


def iter_dummy_checkpoint(model: nn.Module, seed: int, std: float = 0.02
                          ) -> Iterator[tuple[str, torch.Tensor]]:
    """The full HF tensors of a random checkpoint of the model's shape, generated one at a time
    on the model's device: N(0, std) matrices and biases, norm weights 1. Each tensor's values
    depend only on ``seed`` and its name, so every tensor-parallel degree slices the same
    weights (a dummy TP=2 model equals the dummy TP=1 model)."""
    from twinserve.engine.model_maker import weight_specs

    p0 = next(model.parameters())
    shape = model.config.shape
    gen = torch.Generator(device=p0.device)
    for name, shp in weight_specs(shape):
        if name.endswith("norm.weight"):
            yield name, torch.ones(shp, dtype=p0.dtype, device=p0.device)
            continue
        gen.manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) & 0x7FFFFFFFFFFFFFFF)
        t = torch.empty(shp, dtype=p0.dtype, device=p0.device)
        yield name, t.normal_(0.0, std, generator=gen)


@LOAD_FORMATS.register("dummy")
def load_dummy(model: nn.Module, model_dir: Path, seed: int = 0, std: float = 0.02) -> None:
    """Random weights of the checkpoint's shape (see `iter_dummy_checkpoint`); seeded."""
    load_named_tensors(model, iter_dummy_checkpoint(model, seed, std), f"dummy weights of {model_dir}")


def load_weights(model: nn.Module, model_dir: str | Path, load_format: str = "safetensors", seed: int = 0) -> None:
    with torch.no_grad():
        LOAD_FORMATS.get(load_format)(model, Path(model_dir), seed)
