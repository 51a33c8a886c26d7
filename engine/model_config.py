"""`ModelConfig`: the architecture numbers the engine needs, read from a HF ``config.json``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
           "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype '{name}'; known: {', '.join(sorted(_DTYPES))}") from None


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer as described by its HF config (Llama/Qwen2/Qwen3/Mistral).

    ``qkv_bias`` comes from ``attention_bias`` (or is implied by Qwen2), ``qk_norm`` from the
    Qwen3 architecture. ``eos_token_ids`` merges config.json and generation_config.json.
    """

    architecture: str
    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: Mapping[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    qk_norm: bool
    torch_dtype: str
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any], generation: Mapping[str, Any] | None = None) -> "ModelConfig":
        arch = (cfg.get("architectures") or ["LlamaForCausalLM"])[0]
        model_type = str(cfg.get("model_type", "llama"))
        heads = int(cfg["num_attention_heads"])
        eos: list[int] = []
        for src in (cfg, generation or {}):
            v = src.get("eos_token_id")
            for t in (v if isinstance(v, list) else [v]):
                if t is not None and int(t) not in eos:
                    eos.append(int(t))
        rope_params = cfg.get("rope_parameters") or {}
        scaling = cfg.get("rope_scaling") or None
        if scaling is None and rope_params.get("rope_type", "default") != "default":
            scaling = rope_params
        theta = cfg.get("rope_theta", rope_params.get("rope_theta", 10000.0))
        return cls(
            architecture=arch,
            model_type=model_type,
            hidden_size=int(cfg["hidden_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
            intermediate_size=int(cfg["intermediate_size"]),
            vocab_size=int(cfg["vocab_size"]),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
            rope_scaling=scaling,
            max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=bool(cfg.get("attention_bias", False)) or model_type == "qwen2",
            qk_norm=model_type == "qwen3" or arch.startswith("Qwen3"),
            torch_dtype=str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=tuple(eos),
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
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim
