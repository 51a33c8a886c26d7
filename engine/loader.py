"""Weight loading: stream HF safetensors tensor by tensor into (fused, sharded) parameters, or fill
random "dummy" weights of the right shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch import nn

from twinserve.core.registry import Registry
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


def iter_checkpoint(model_dir: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, cpu tensor)`` one at a time; only one tensor is materialized at once."""
    from safetensors import safe_open

    for path in _checkpoint_files(model_dir):
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


@LOAD_FORMATS.register("safetensors")
def load_safetensors(model: nn.Module, model_dir: Path, seed: int = 0) -> None:
    """Copy each checkpoint tensor into its parameter (slice) via the parameter's weight_loader.

    Raises ``KeyError`` for an unknown checkpoint tensor and ``ValueError`` when a parameter
    received no data.
    """
    params = dict(model.named_parameters())
    stacked = getattr(model, "stacked_params", [])
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    filled: set[str] = set()
    for name, tensor in iter_checkpoint(Path(model_dir)):
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
        raise ValueError(f"checkpoint in {model_dir} lacks weights for: {', '.join(missing[:8])}")


@LOAD_FORMATS.register("dummy")
def load_dummy(model: nn.Module, model_dir: Path, seed: int = 0, std: float = 0.02) -> None:
    """Random weights: N(0, std) for matrices and biases, 1 for norm weights; seeded."""
    gen_device = next(model.parameters()).device
    gen = torch.Generator(device=gen_device)
    gen.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, std, generator=gen)


def load_weights(model: nn.Module, model_dir: str | Path, load_format: str = "safetensors", seed: int = 0) -> None:
    with torch.no_grad():
        LOAD_FORMATS.get(load_format)(model, Path(model_dir), seed)
