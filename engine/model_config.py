"""`ModelConfig`: a `ModelShape` read from a HF ``config.json`` plus what only the engine needs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

from twinserve.core.model_shapes import ModelShape

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
           "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DTYPE_NAMES = tuple(sorted(_DTYPES))  # the dtype names `parse_dtype` takes


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype '{name}'; known: {', '.join(sorted(_DTYPES))}") from None


def eos_ids(cfg: Mapping[str, Any], generation: Mapping[str, Any] | None) -> tuple[int, ...]:
    """The ``eos_token_id`` entries (an int or a list) of config.json, then of
    generation_config.json, without repeats, in that order."""
    eos: list[int] = []
    for src in (cfg, generation or {}):
        v = src.get("eos_token_id")
        for t in (v if isinstance(v, list) else [v]):
            if t is not None and int(t) not in eos:
                eos.append(int(t))
    return tuple(eos)


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer as the engine builds it (Llama/Qwen2/Qwen3/Mistral).

    ``shape`` holds the architecture numbers, parsed by `ModelShape.from_hf_config` (the one
    reader of those HF keys); this class reads only the keys the shape does not: the
    architecture class, ``attention_bias``, the dtype and the special tokens. ``qkv_bias`` is
    ``attention_bias`` or implied by Qwen2, ``qk_norm`` by the Qwen3 family or architecture.
    ``eos_token_ids`` merges config.json and generation_config.json. ``raw`` is the whole
    config.json, for keys a single caller reads (e.g. ``sliding_window``).
    """

    shape: ModelShape
    architecture: str
    qkv_bias: bool
    qk_norm: bool
    torch_dtype: str
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any], generation: Mapping[str, Any] | None = None) -> "ModelConfig":
        shape = ModelShape.from_hf_config(cfg)
        arch = (cfg.get("architectures") or ["LlamaForCausalLM"])[0]
        return cls(
            shape=shape,
            architecture=arch,
            qkv_bias=bool(cfg.get("attention_bias", False)) or shape.qkv_bias,
            qk_norm=shape.qk_norm or arch.startswith("Qwen3"),
            torch_dtype=str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=eos_ids(cfg, generation),
            raw=dict(cfg),
        )

    @classmethod
    def from_dir(cls, path: str | Path) -> "ModelConfig":
        p = Path(path)
        cfg = json.loads((p / "config.json").read_text())
        gen_path = p / "generation_config.json"
        gen = json.loads(gen_path.read_text()) if gen_path.exists() else None
        return cls.from_dict(cfg, gen)

    @property
    def hidden_size(self) -> int:
        return self.shape.hidden_size

    @property
    def num_layers(self) -> int:
        return self.shape.num_layers

    @property
    def num_heads(self) -> int:
        return self.shape.num_heads

    @property
    def num_kv_heads(self) -> int:
        return self.shape.num_kv_heads

    @property
    def head_dim(self) -> int:
        return self.shape.head_dim

    @property
    def intermediate_size(self) -> int:
        return self.shape.intermediate_size

    @property
    def vocab_size(self) -> int:
        return self.shape.vocab_size

    @property
    def rms_norm_eps(self) -> float:
        return self.shape.rms_norm_eps

    @property
    def rope_theta(self) -> float:
        return self.shape.rope_theta

    @property
    def rope_scaling(self) -> dict[str, Any] | None:
        return self.shape.rope_scaling_dict()

    @property
    def max_position_embeddings(self) -> int:
        return self.shape.max_position_embeddings

    @property
    def tie_word_embeddings(self) -> bool:
        return self.shape.tie_word_embeddings

    @property
    def q_size(self) -> int:
        return self.shape.q_size

    @property
    def kv_size(self) -> int:
        return self.shape.kv_size
