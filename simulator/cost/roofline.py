"""`roofline`: step time from the model's shape and the accelerator's ceilings; needs no data."""

from __future__ import annotations

from typing import Any

from twinserve.core.kv_budget import KvBudget
from twinserve.core.model_shapes import ModelShape
from twinserve.simulator.cost.base import COST_MODELS, CostModel, Max
from twinserve.simulator.hardware import GPUSpec


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@COST_MODELS.register("roofline")
class RooflineCostModel(CostModel):
    """A per-phase roofline of one tensor-parallel rank, plus communication and fixed overheads.

    Terms of one step (per rank; ``T`` = tokens the linears see, ``S`` = sequences, ``L`` = layers,
    ``h`` = hidden size, ``tp`` = tensor-parallel ranks, ``b`` = bytes per weight/KV element):

    1. Linear layers (QKV, O, gate/up/down, and the LM head):
       FLOPs = 2 * P_layers/tp * T + 2 * V*h/tp * S (logits only for the sampled position of each
       sequence); bytes = b * (P_layers + V*h)/tp, read once per step whatever the batch.
       ``T`` is the prefill tokens plus the decodes, padded to the CUDA-graph batch size in
       decode-only steps (the engine runs the padded rows too).
       time = max(FLOPs / (flops * gemm_eff), bytes / (hbm_bw * mem_eff)).
    2. Attention: FLOPs = 4 * L * (H/tp) * d * (prefill_attn + decode_ctx) (QK^T and PV over every
       causal query-key pair); bytes = KV read (decode_ctx + prefill_ctx tokens) + KV written
       (new tokens), at 2 * L * ceil(KV/tp) * d * b bytes per token (KV heads replicate when
       KV < tp). time = max(FLOPs / (flops * attn_eff), bytes / (hbm_bw * mem_eff)).
    3. Tensor parallelism (tp > 1): two ring all-reduces per layer of new_tokens * h * b bytes, each
       2*(tp-1)/tp * size / link_bw + link_latency, and one all-gather of the fp32 logits of the S
       sampled rows ((tp-1)/tp * S * V * 4 bytes / link_bw + link_latency).
    4. Fixed overhead: ``step_overhead_s`` per step (graph launch, sync, sampling), plus
       ``eager_layer_overhead_s`` per layer when a prefill chunk is present (eager kernels launch
       one by one; decode-only steps replay a CUDA graph).

    Activations, norms, rotary embeddings and the embedding gather are left out (small against
    the terms above). Host time: ``cpu_base_s + cpu_per_seq_s * S + cpu_per_token_s * new_tokens``,
    hidden behind the device when ``overlap``. The defaults are plausible guesses, not fits: a
    calibration file replaces this model where one exists.
    """

    def __init__(
        self,
        shape: ModelShape,
        hardware: GPUSpec,
        tp: int = 1,
        dtype_bytes: int = KvBudget.dtype_bytes,
        kv_dtype_bytes: int = KvBudget.dtype_bytes,
        gemm_eff: float = 0.85,
        attn_eff: float = 0.6,
        mem_eff: float = 0.9,
        step_overhead_s: float = 30e-6,
        eager_layer_overhead_s: float = 8e-6,
        cpu_base_s: float = 2e-4,
        cpu_per_seq_s: float = 4e-6,
        cpu_per_token_s: float = 5e-8,
        overlap: bool = True,
    ) -> None:
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        self.shape, self.hardware, self.tp = shape, hardware, tp
        self.overlap = bool(overlap)
        s = shape
        h, L = s.hidden_size, s.num_layers
        q_rank = s.q_size / tp
        kv_heads_rank = _ceil_div(s.num_kv_heads, tp)
        kv_rank = kv_heads_rank * s.head_dim
        layer_lin = h * q_rank + 2 * h * kv_rank + q_rank * h + 3 * h * s.intermediate_size / tp
        head = s.vocab_size * h / tp
        # float constants: every formula below multiplies a feature by one of these
        self._lin_flops_tok = float(2 * L * layer_lin)
        self._head_flops_seq = float(2 * head)
        self._weight_time = float(dtype_bytes * (L * layer_lin + head)) / (hardware.hbm_bw * mem_eff)
        self._attn_flops_pair = float(4 * L * q_rank)
        self._kv_bytes_tok = float(2 * L * kv_rank * kv_dtype_bytes)
        self._gemm_rate = float(hardware.flops * gemm_eff)
        self._attn_rate = float(hardware.flops * attn_eff)
        self._mem_rate = float(hardware.hbm_bw * mem_eff)
        if tp > 1:
            frac = 2.0 * (tp - 1) / tp
            self._ar_time_tok = 2.0 * L * frac * h * dtype_bytes / hardware.link_bw
            self._ar_fixed = 2.0 * L * hardware.link_latency_s + hardware.link_latency_s
            self._gather_time_seq = (tp - 1) / tp * s.vocab_size * 4.0 / hardware.link_bw
        else:
            self._ar_time_tok = self._ar_fixed = self._gather_time_seq = 0.0
        self._overhead = float(step_overhead_s)
        self._eager = float(eager_layer_overhead_s * L)
        self._cpu_coef = (float(cpu_base_s), float(cpu_per_seq_s), float(cpu_per_token_s))
        self._params = dict(tp=tp, dtype_bytes=dtype_bytes, kv_dtype_bytes=kv_dtype_bytes,
                            gemm_eff=gemm_eff, attn_eff=attn_eff, mem_eff=mem_eff,
                            step_overhead_s=step_overhead_s,
                            eager_layer_overhead_s=eager_layer_overhead_s, cpu_base_s=cpu_base_s,
                            cpu_per_seq_s=cpu_per_seq_s, cpu_per_token_s=cpu_per_token_s,
                            overlap=overlap)

    def _gpu(self, x: Any, mx: Max) -> Any:
        has_prefill = 0.0 - mx(0.0 - x.num_prefills, -1.0)  # 1.0 if any prefill chunk, else 0.0
        decodes = x.num_decodes + (x.padded_decodes - x.num_decodes) * (1.0 - has_prefill)
        lin_tokens = x.prefill_tokens + decodes
        lin_flops = lin_tokens * self._lin_flops_tok + x.num_seqs * self._head_flops_seq
        t_lin = mx(lin_flops / self._gemm_rate, self._weight_time)
        attn_flops = (x.prefill_attn + x.decode_ctx) * self._attn_flops_pair
        kv_bytes = (x.decode_ctx + x.prefill_ctx + x.new_tokens) * self._kv_bytes_tok
        t_attn = mx(attn_flops / self._attn_rate, kv_bytes / self._mem_rate)
        t_comm = x.new_tokens * self._ar_time_tok + x.num_seqs * self._gather_time_seq + self._ar_fixed
        return t_lin + t_attn + t_comm + self._overhead + has_prefill * self._eager

    def _cpu(self, x: Any, mx: Max) -> Any:
        base, per_seq, per_tok = self._cpu_coef
        return base + x.num_seqs * per_seq + x.new_tokens * per_tok

    def describe(self) -> dict[str, Any]:
        return {"name": "roofline", "model": self.shape.name, "hardware": self.hardware.name,
                **self._params}
