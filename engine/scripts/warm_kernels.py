"""Compile (JIT) the FlashInfer kernels the engine uses, one kind per process, so that a suite can
build them in parallel: ``python3 engine/scripts/warm_kernels.py {norm,rope,act,decode,prefill} [HEAD_DIM]``.

Uses the engine's own wrappers with bf16 and head_dim 128 (the benchmark shapes' variants), or
the given head_dim (64: SmolLM2).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

from twinserve.engine.attention.base import AttentionInputs, AttentionSpec
from twinserve.engine.attention.flashinfer_backend import FlashInferAttention
from twinserve.engine.kv_pool import KVGeometry, KVPool
from twinserve.engine.layers.flashinfer_kernels import FlashInferKernels


def _attn(tensor_cores: bool, head_dim: int) -> FlashInferAttention:
    pool = KVPool(KVGeometry(1, 8, 16, 8, head_dim, torch.bfloat16), "cuda")
    return FlashInferAttention(AttentionSpec(16, 8, head_dim, torch.bfloat16, pool, 8), tensor_cores)


def main(kind: str, hd: int = 128) -> None:
    t = time.perf_counter()
    dev, bf = "cuda", torch.bfloat16
    k = FlashInferKernels() if kind in ("norm", "rope", "act") else None
    if kind == "norm":
        x, w = torch.randn(4, 1024, device=dev, dtype=bf), torch.ones(1024, device=dev, dtype=bf)
        k.rms_norm(x, w, 1e-6)
        k.add_rms_norm(x, x.clone(), w, 1e-6)
    elif kind == "rope":
        q, kk = torch.randn(4, 2048, device=dev, dtype=bf), torch.randn(4, 1024, device=dev, dtype=bf)
        k.rope(torch.arange(4, device=dev), q, kk, hd, torch.randn(64, hd, device=dev))
    elif kind == "act":
        k.silu_and_mul(torch.randn(4, 1024, device=dev, dtype=bf))
    elif kind in ("decode", "prefill"):
        a = _attn(tensor_cores=False, head_dim=hd)
        one = np.ones(2, np.int32)
        inp = AttentionInputs(one if kind == "decode" else np.array([3, 1], np.int32),
                              np.array([3, 1], np.int32), np.array([0, 1, 2], np.int32),
                              np.array([0, 1], np.int32), np.array([3, 1], np.int32), kind == "decode")
        a.plan(inp)
        n = int(inp.qo_lens.sum())
        q = torch.randn(n, 16, hd, device=dev, dtype=bf)
        kv = torch.randn(n, 8, hd, device=dev, dtype=bf)
        a.forward(0, q, kv, kv, torch.arange(n, device=dev))
    torch.cuda.synchronize()
    print(f"warm {kind} (head_dim {hd}): {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 128)
