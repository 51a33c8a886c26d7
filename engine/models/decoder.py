"""The shared decoder-only transformer (Llama layout); families differ only in config flags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from twinserve.engine.attention.base import AttentionBackend
from twinserve.engine.kv_pool import KVPool, KVWrite
from twinserve.engine.layers.embedding import ParallelLMHead, VocabParallelEmbedding
from twinserve.engine.layers.kernels import Kernels
from twinserve.engine.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from twinserve.engine.layers.norm import RMSNorm
from twinserve.engine.layers.parallel import SINGLE, TPGroup
from twinserve.engine.layers.rotary import cos_sin_cache
from twinserve.engine.model_config import ModelConfig


@dataclass
class ForwardContext:
    """Per-step tensors every layer needs: token positions [T], flat KV slots [T] (int64), and the
    attention backend already planned for this step."""

    positions: torch.Tensor
    slots: torch.Tensor
    attn: AttentionBackend


class Attention(nn.Module):
    """Fused-QKV self-attention: optional per-head q/k RMSNorm (Qwen3), RoPE, paged attention.

    The layer runs it in three parts so the attention call can sit between two CUDA graphs:
    ``project`` (fused QKV, norms and RoPE in place, and the KV store when given one), ``heads``
    (q, k, v as views of that one tensor: the KV pool writes the adjacent k and v with one copy,
    `KVPool.write`), then the backend's attention and ``o_proj``.
    """

    def __init__(self, cfg: ModelConfig, layer_id: int, tp: TPGroup, kernels: Kernels,
                 rope: torch.Tensor, dtype: torch.dtype) -> None:
        super().__init__()
        self.layer_id = layer_id
        self.kernels = kernels
        self.head_dim = cfg.head_dim
        self.qkv_proj = QKVParallelLinear(cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads,
                                          bias=cfg.qkv_bias, tp=tp, dtype=dtype)
        self.o_proj = RowParallelLinear(cfg.q_size, cfg.hidden_size, bias=False, tp=tp, dtype=dtype)
        self.q_local = self.qkv_proj.local_heads * cfg.head_dim
        self.kv_local = self.qkv_proj.local_kv_heads * cfg.head_dim
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, kernels, dtype)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, kernels, dtype)
        else:
            self.q_norm = self.k_norm = None
        self.rope = rope

    def project(self, x: torch.Tensor, positions: torch.Tensor, out: torch.Tensor | None = None,
                kv_at: tuple[KVPool, torch.Tensor] | None = None) -> torch.Tensor:
        """The fused [T, q+k+v] projection with q/k normed and rotated in place (into ``out`` if
        given: a [T, q+k+v] buffer, as the piecewise CUDA graphs use); with ``kv_at`` = ``(pool,
        slots)`` the rotated k and v are also stored at the flat ``slots`` [T] of this layer."""
        d = self.head_dim
        qkv = self.qkv_proj(x, out=out)
        q, k, v = qkv.split([self.q_local, self.kv_local, self.kv_local], dim=-1)
        kv = None if kv_at is None else KVWrite(kv_at[0], self.layer_id, kv_at[1], v)
        if self.q_norm is not None:
            self.kernels.qk_norm_rope(positions, q, k, self.q_norm.weight, self.k_norm.weight,
                                      self.q_norm.eps, d, self.rope, kv)
        else:
            self.kernels.rope(positions, q, k, d, self.rope, kv)
        return qkv

    def heads(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v as [T, heads, D] views of a fused projection (no copy)."""
        t, d = qkv.shape[0], self.head_dim
        q, k, v = qkv.split([self.q_local, self.kv_local, self.kv_local], dim=-1)
        return q.view(t, -1, d), k.view(t, -1, d), v.view(t, -1, d)


class MLP(nn.Module):
    """SwiGLU: fused column-parallel gate/up, SiLU-and-mul, row-parallel down."""

    def __init__(self, cfg: ModelConfig, tp: TPGroup, kernels: Kernels, dtype: torch.dtype) -> None:
        super().__init__()
        self.kernels = kernels
        self.gate_up_proj = MergedColumnParallelLinear(
            cfg.hidden_size, [cfg.intermediate_size, cfg.intermediate_size], tp=tp, dtype=dtype)
        self.down_proj = RowParallelLinear(cfg.intermediate_size, cfg.hidden_size, tp=tp, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.kernels.silu_and_mul(self.gate_up_proj(x)))


class DecoderLayer(nn.Module):
    """Pre-norm block; carries the residual stream separately so norms can fuse the add.

    ``forward`` = ``pre`` -> attention -> ``post``; the halves are what the piecewise CUDA graphs
    (engine/piecewise_graph.py) capture, with the attention run eagerly between them.
    """

    def __init__(self, cfg: ModelConfig, layer_id: int, tp: TPGroup, kernels: Kernels,
                 rope: torch.Tensor, dtype: torch.dtype) -> None:
        super().__init__()
        self.self_attn = Attention(cfg, layer_id, tp, kernels, rope, dtype)
        self.mlp = MLP(cfg, tp, kernels, dtype)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, kernels, dtype)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, kernels, dtype)

    def pre(self, x: torch.Tensor, residual: torch.Tensor | None, positions: torch.Tensor,
            qkv_out: torch.Tensor | None = None,
            kv_at: tuple[KVPool, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The half before attention: ``(fused qkv, residual)`` (see `Attention.project`)."""
        if residual is None:
            residual = x
            h = self.input_layernorm(x)
        else:
            h, residual = self.input_layernorm(x, residual)
        return self.self_attn.project(h, positions, out=qkv_out, kv_at=kv_at), residual

    def post(self, o: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The half after attention: o [T, q] -> ``(mlp output, residual)``."""
        h, residual = self.post_attention_layernorm(self.self_attn.o_proj(o), residual)
        return self.mlp(h), residual

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None, ctx: ForwardContext):
        # kernels that store k and v in their RoPE launch take the store from the backend
        fused = self.self_attn.kernels.stores_kv
        qkv, residual = self.pre(x, residual, ctx.positions, kv_at=(ctx.attn.pool, ctx.slots) if fused else None)
        q, k, v = self.self_attn.heads(qkv)
        o = ctx.attn.forward(self.self_attn.layer_id, q, k, v, None if fused else ctx.slots)
        return self.post(o.reshape(x.shape[0], -1), residual)


class DecoderModel(nn.Module):
    """Embedding, the decoder layers and the final norm: ids [T] -> hidden states [T, H]."""

    def __init__(self, cfg: ModelConfig, tp: TPGroup, kernels: Kernels, rope: torch.Tensor,
                 dtype: torch.dtype) -> None:
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(cfg.vocab_size, cfg.hidden_size, tp=tp, dtype=dtype)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, tp, kernels, rope, dtype) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, kernels, dtype)

    def forward(self, input_ids: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        h = self.embed_tokens(input_ids)
        residual = None
        for layer in self.layers:
            h, residual = layer(h, residual, ctx)
        h, _ = self.norm(h, residual)
        return h


class CausalLM(nn.Module):
    """A decoder-only LM with HF parameter names, except the fused ``qkv_proj``/``gate_up_proj``.

    Contract: ``forward(input_ids [T], ctx) -> hidden [T, H]`` (all tokens), then
    ``compute_logits(hidden [N, H]) -> [N, vocab]`` on just the rows that sample.
    ``stacked_params`` tells the loader which checkpoint names feed which fused parameter.
    Build it under ``torch.device(...)`` to allocate the parameters there directly.
    """

    stacked_params: ClassVar[list[tuple[str, str, object]]] = [
        ("qkv_proj", "q_proj", "q"), ("qkv_proj", "k_proj", "k"), ("qkv_proj", "v_proj", "v"),
        ("gate_up_proj", "gate_proj", 0), ("gate_up_proj", "up_proj", 1),
    ]

    def __init__(self, cfg: ModelConfig, kernels: Kernels, dtype: torch.dtype, tp: TPGroup = SINGLE,
                 max_positions: int | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.tp = tp
        n_pos = max_positions or cfg.max_position_embeddings
        rope = cos_sin_cache(cfg.rope_theta, cfg.head_dim, n_pos, cfg.rope_scaling)
        self.register_buffer("rope_cache", rope.to(torch.get_default_device()), persistent=False)
        self.model = DecoderModel(cfg, tp, kernels, self.rope_cache, dtype)
        self.lm_head = ParallelLMHead(cfg.vocab_size, cfg.hidden_size, tp=tp, dtype=dtype)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        return self.model(input_ids, ctx)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)
