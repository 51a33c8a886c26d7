"""Named model shapes: the architecture numbers both backends agree on (no weights, no torch)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from types import MappingProxyType
from typing import Any, Mapping

from twinserve.core.errors import UnknownNameError
from twinserve.core.kv_budget import KvBudget

# HF `architectures` entry and `model_type` for each family we build.
_HF_NAMES = {
    "llama": ("LlamaForCausalLM", "llama"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
    "mistral": ("MistralForCausalLM", "mistral"),
}


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The numbers that fix a decoder-only transformer's size and cost.

    ``family`` picks the block layout: qwen2 has QKV biases, qwen3 has per-head RMSNorm on q and k.
    ``rope_scaling`` is the HF ``rope_scaling`` object as sorted (key, value) pairs (hashable; None:
    plain RoPE), e.g. Llama 3.1's ``rope_type=llama3``; ``rope_scaling_dict()`` gives it back.
    ``to_hf_config()`` gives a transformers-compatible ``config.json``; ``from_hf_config()`` reads
    one back, so the simulator can model any real checkpoint by its config alone.
    """

    name: str
    family: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 32768
    rope_scaling: tuple[tuple[str, Any], ...] | None = None

    def rope_scaling_dict(self) -> dict[str, Any] | None:
        return dict(self.rope_scaling) if self.rope_scaling else None

    @property
    def qk_norm(self) -> bool:
        return self.family == "qwen3"

    @property
    def qkv_bias(self) -> bool:
        return self.family == "qwen2"

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    def gqa_group(self, tp: int = 1) -> int:
        """Query heads per KV head on one of ``tp`` ranks (query heads split evenly; KV heads
        split, or one replicated per rank when there are fewer than ``tp``)."""
        return max(1, (self.num_heads // tp) // -(-self.num_kv_heads // tp))

    def layer_params(self) -> int:
        h = self.hidden_size
        attn = h * (self.q_size + 2 * self.kv_size) + self.q_size * h
        mlp = 3 * h * self.intermediate_size
        return attn + mlp + 2 * h

    def param_count(self) -> int:
        emb = self.vocab_size * self.hidden_size
        head = 0 if self.tie_word_embeddings else emb
        return emb + head + self.num_layers * self.layer_params() + self.hidden_size

    def kv_bytes_per_token(self, dtype_bytes: int = KvBudget.dtype_bytes) -> int:
        return 2 * self.num_layers * self.kv_size * dtype_bytes

    def to_hf_config(self, dtype: str = "bfloat16") -> dict[str, Any]:
        arch, model_type = _HF_NAMES[self.family]
        cfg: dict[str, Any] = {
            "architectures": [arch],
            "model_type": model_type,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size,
            "tie_word_embeddings": self.tie_word_embeddings,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "hidden_act": "silu",
            "torch_dtype": dtype,
            "attention_bias": self.qkv_bias,
            "bos_token_id": 1,
            "eos_token_id": 2,
        }
        if self.rope_scaling:
            cfg["rope_scaling"] = self.rope_scaling_dict()
        return cfg

    @classmethod
    def from_hf_config(cls, cfg: Mapping[str, Any], name: str = "custom") -> "ModelShape":
        model_type = cfg.get("model_type", "llama")
        family = model_type if model_type in _HF_NAMES else "llama"
        heads = int(cfg["num_attention_heads"])
        rope_params = cfg.get("rope_parameters") or {}
        return cls(
            name=name,
            family=family,
            hidden_size=int(cfg["hidden_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
            intermediate_size=int(cfg["intermediate_size"]),
            vocab_size=int(cfg["vocab_size"]),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", _DEFAULTS.tie_word_embeddings)),
            rope_theta=float(cfg.get("rope_theta", rope_params.get("rope_theta", _DEFAULTS.rope_theta))),
            rms_norm_eps=float(cfg.get("rms_norm_eps", _DEFAULTS.rms_norm_eps)),
            max_position_embeddings=int(cfg.get("max_position_embeddings", _DEFAULTS.max_position_embeddings)),
            rope_scaling=rope_scaling_pairs(cfg),
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# A shape's field defaults: what `ModelShape.from_hf_config` takes for a key the config omits.
_DEFAULTS = ModelShape("defaults", "llama", 0, 0, 0, 0, 0, 0, 0)


def rope_scaling_pairs(cfg: Mapping[str, Any]) -> tuple[tuple[str, Any], ...] | None:
    """An HF config's RoPE scaling (``rope_scaling``, or a non-default ``rope_parameters``) as
    sorted pairs, or None for plain RoPE."""
    params = cfg.get("rope_parameters") or {}
    scaling = cfg.get("rope_scaling") or None
    if scaling is None and params.get("rope_type", "default") != "default":
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    if not scaling or scaling.get("rope_type", scaling.get("type", "default")) == "default":
        return None
    return tuple(sorted(scaling.items()))


LLAMA3_ROPE_SCALING = (("factor", 8.0), ("high_freq_factor", 4.0), ("low_freq_factor", 1.0),
                       ("original_max_position_embeddings", 8192), ("rope_type", "llama3"))

_LLAMA3_8B = ModelShape("llama3-8b", "llama", 4096, 32, 32, 8, 128, 14336, 128256,
                        rope_theta=500000.0, rms_norm_eps=1e-5, max_position_embeddings=8192)
_QWEN3_8B = ModelShape("qwen3-8b", "qwen3", 4096, 36, 32, 8, 128, 12288, 151936,
                       rope_theta=1000000.0, max_position_embeddings=40960)

MODEL_SHAPES: Mapping[str, ModelShape] = MappingProxyType({
    s.name: s
    for s in (
        ModelShape("tiny-llama", "llama", 256, 4, 4, 2, 64, 512, 1024, rope_theta=10000.0,
                   max_position_embeddings=4096),
        ModelShape("tiny-qwen3", "qwen3", 256, 4, 4, 2, 64, 512, 1024, tie_word_embeddings=True,
                   rope_theta=1000000.0, max_position_embeddings=4096),
        ModelShape("tiny-qwen2", "qwen2", 256, 2, 4, 2, 64, 512, 1024, tie_word_embeddings=True,
                   max_position_embeddings=4096),
        ModelShape("tiny-mistral", "mistral", 256, 2, 4, 2, 64, 512, 1024, max_position_embeddings=4096),
        ModelShape("qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 128, 3072, 151936, tie_word_embeddings=True,
                   rope_theta=1000000.0, max_position_embeddings=40960),
        _QWEN3_8B,
        _LLAMA3_8B,
        replace(_LLAMA3_8B, name="llama3.1-8b", max_position_embeddings=131072,
                rope_scaling=LLAMA3_ROPE_SCALING),
        replace(_LLAMA3_8B, name="llama3-70b", hidden_size=8192, num_layers=80, num_heads=64,
                intermediate_size=28672),
    )
})


def get_shape(name: str) -> ModelShape:
    try:
        return MODEL_SHAPES[name]
    except KeyError:
        raise UnknownNameError("model shape", name, MODEL_SHAPES) from None
