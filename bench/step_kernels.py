"""Device time of the per-step kernels the engine can choose between (CUDA).

    python -m twinserve.bench.step_kernels --models qwen3-0.6b llama3-8b --json OUT.jsonl

- decode attention over a paged bf16 cache (page size 16, pages shuffled): FlashInfer's decode
  kernel on CUDA cores and on tensor cores, and FlashInfer's XQA decode; each against the
  CUDA-core kernel's output, with the bandwidth its KV read reaches;
- a mixed step's attention, decodes over varied contexts plus a prompt chunk, by kernel, plan,
  page layout and row order (`bench.mixed_attention`);
- prefill attention (causal, over cached context): FlashInfer's fa2 and fa3 kernels;
- the KV store of one layer (a fused QKV output's k and v into the pool): ``index_copy_`` as
  `KVPool.write` does on the torch path, and the Triton store (`engine.triton.kv_store`);
- sampling at temperature 0.6 over the whole vocabulary: the sampler's torch path and the
  Triton Gumbel-argmax (`engine.triton.gumbel_argmax`), plus a frequency check of the latter
  on a small vocabulary.

Each variant runs in its own try block: one that fails prints its error and the rest go on.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from typing import Callable

from twinserve.bench.gemm_shapes import time_ms


class Recorder:
    """Prints one line per measurement and appends it as JSON to ``path`` (if given)."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def __call__(self, **row: object) -> None:
        print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps(row) + "\n")


def paged_cache(lens: list[int], kv_heads: int, dim: int, page: int, layout: str = "NHD", seed: int = 0):
    """A paged bf16 cache holding sequences of the given lengths in shuffled pages:
    ``(k, v, page indices, page indptr, last page lengths)``; ``layout`` "NHD" ([pages, page,
    heads, dim]) or "HND" ([pages, heads, page, dim])."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    per = [-(-n // page) for n in lens]
    pages = sum(per)
    k = torch.randn(pages, page, kv_heads, dim, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(pages, page, kv_heads, dim, device="cuda", dtype=torch.bfloat16, generator=g)
    if layout == "HND":  # the same values, each page's heads outermost
        k, v = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
    perm = torch.randperm(pages, device="cuda", generator=g).to(torch.int32)
    indptr = torch.tensor([0] + list(itertools.accumulate(per)), dtype=torch.int32, device="cuda")
    last = torch.tensor([n - (p - 1) * page for n, p in zip(lens, per)], dtype=torch.int32, device="cuda")
    return k, v, perm, indptr, last


def decode_attention(rec: Recorder, model: str, heads: int, kv_heads: int, dim: int, batch: int, ctx: int,
                     page: int = 16) -> None:
    import flashinfer
    import torch

    k, v, perm, indptr, last = paged_cache([ctx] * batch, kv_heads, dim, page)
    per_seq = -(-ctx // page)
    q = torch.randn(batch, heads, dim, device="cuda", dtype=torch.bfloat16)
    kv_bytes = 2 * batch * ctx * kv_heads * dim * 2
    ws = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
    ref = None
    common = dict(num_qo_heads=heads, num_kv_heads=kv_heads, head_dim=dim, page_size=page,
                  q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    variants: dict[str, Callable[[], Callable[[], torch.Tensor]]] = {}

    def fi_decode(tc: bool) -> Callable[[], torch.Tensor]:
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc)
        w.plan(indptr, perm, last, **common)
        return lambda: w.run(q, (k, v))

    def xqa() -> Callable[[], torch.Tensor]:
        from flashinfer.decode import xqa_batch_decode_with_kv_cache

        ws_x = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
        table = perm.view(batch, per_seq).contiguous()
        lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
        out = torch.empty_like(q)
        return lambda: xqa_batch_decode_with_kv_cache(q, (k, v), ws_x, table, lens, ctx,
                                                      bmm1_scale=1.0 / math.sqrt(dim), out=out)

    def fa3_prefill_as_decode() -> Callable[[], torch.Tensor]:
        w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend="fa3")
        qo = torch.arange(batch + 1, dtype=torch.int32, device="cuda")
        w.plan(qo, indptr, perm, last, heads, kv_heads, dim, page, causal=True,
               q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
        return lambda: w.run(q, (k, v))

    variants["fi-decode-cuda-cores"] = lambda: fi_decode(False)
    variants["fi-decode-tensor-cores"] = lambda: fi_decode(True)
    variants["xqa"] = xqa
    variants["fa3-prefill-kernel"] = fa3_prefill_as_decode
    for name, build in variants.items():
        try:
            fn = build()
            out = fn()
            torch.cuda.synchronize()
            if ref is None:
                ref = out.float().clone()
            err = (out.float() - ref).abs().max().item()
            ms = time_ms(fn)
            rec(kind="decode_attention", model=model, variant=name, batch=batch, ctx=ctx, ms=ms,
                gb_s=kv_bytes / ms / 1e6, max_abs_err=err)
        except Exception as e:  # noqa: BLE001 - report and go on
            rec(kind="decode_attention", model=model, variant=name, batch=batch, ctx=ctx, error=repr(e)[:300])


def prefill_attention(rec: Recorder, model: str, heads: int, kv_heads: int, dim: int, seqs: int, new: int,
                      cached: int, page: int = 16) -> None:
    import flashinfer
    import torch

    ctx = cached + new
    k, v, perm, indptr, last = paged_cache([ctx] * seqs, kv_heads, dim, page)
    q = torch.randn(seqs * new, heads, dim, device="cuda", dtype=torch.bfloat16)
    qo = torch.arange(seqs + 1, dtype=torch.int32, device="cuda") * new
    ws = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
    flops = 4 * seqs * heads * dim * (new * cached + new * (new + 1) / 2)
    ref = None
    for backend in ("fa2", "fa3"):
        try:
            w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=backend)
            w.plan(qo, indptr, perm, last, heads, kv_heads, dim, page, causal=True,
                   q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
            out = w.run(q, (k, v))
            torch.cuda.synchronize()
            if ref is None:
                ref = out.float().clone()
            err = (out.float() - ref).abs().max().item()
            ms = time_ms(lambda: w.run(q, (k, v)))
            rec(kind="prefill_attention", model=model, variant=backend, seqs=seqs, new=new, cached=cached,
                ms=ms, tflops=flops / ms / 1e9, max_abs_err=err)
        except Exception as e:  # noqa: BLE001
            rec(kind="prefill_attention", model=model, variant=backend, error=repr(e)[:300])


def kv_store(rec: Recorder, model: str, heads: int, kv_heads: int, dim: int, tokens: int) -> None:
    import torch

    from twinserve.engine.kv_pool import KVGeometry, KVPool
    from twinserve.engine.triton.kv_store import store_kv

    geom = KVGeometry(1, 4 * tokens // 16 + 16, 16, kv_heads, dim, torch.bfloat16)
    pool = KVPool(geom, "cuda")
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, device="cuda", dtype=torch.bfloat16)
    _, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    k, v = k.view(tokens, kv_heads, dim), v.view(tokens, kv_heads, dim)
    slots = torch.randperm(geom.num_pages * 16, device="cuda")[:tokens]
    pool.write(0, slots, k, v)
    ref = pool.buffer.clone()
    pool.buffer.zero_()
    store_kv(pool._k_flat[0], pool._v_flat[0], slots, k, v)
    same = bool(torch.equal(ref, pool.buffer))
    rec(kind="kv_store", model=model, variant="index_copy", tokens=tokens, ms=time_ms(lambda: pool.write(0, slots, k, v)))
    rec(kind="kv_store", model=model, variant="triton", tokens=tokens, equal=same,
        ms=time_ms(lambda: store_kv(pool._k_flat[0], pool._v_flat[0], slots, k, v)))


def sampling(rec: Recorder, rows: int, vocab: int, temperature: float) -> None:
    import numpy as np
    import torch

    from twinserve.core.sampling import SamplingParams
    from twinserve.engine.sampler import Sampler, SamplingBatch
    from twinserve.engine.triton.gumbel_argmax import gumbel_argmax, row_params

    logits = torch.randn(rows, vocab, device="cuda", dtype=torch.bfloat16) * 3
    sb = SamplingBatch.from_params([SamplingParams(temperature=temperature)] * rows, [0] * rows)
    sampler = Sampler(torch.device("cuda"))
    params = torch.from_numpy(row_params(sb.temperature)).cuda()
    rec(kind="sampling", variant="torch", rows=rows, vocab=vocab, ms=time_ms(lambda: sampler._sample(logits, sb, None)))
    rec(kind="sampling", variant="triton", rows=rows, vocab=vocab, ms=time_ms(lambda: gumbel_argmax(logits, params, 1)))
    small = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, 0.3, 1.7, -0.2], device="cuda")
    n = 200_000
    temp = np.full(n, temperature, dtype=np.float32)
    temp[: n // 10] = 0.0  # greedy rows
    p = torch.from_numpy(row_params(temp)).cuda()
    ids = gumbel_argmax(small.expand(n, -1).contiguous(), p, 7)
    greedy_ok = bool((ids[: n // 10] == 0).all())
    counts = torch.bincount(ids[n // 10:], minlength=8).double().cpu()
    expect = torch.softmax(small.double().cpu() / temperature, 0) * counts.sum()
    chi2 = float(((counts - expect) ** 2 / expect).sum())
    rec(kind="sampling_check", variant="triton", rows=n, chi2_dof7=chi2, greedy_rows_argmax=greedy_ok)


SHAPES = {"qwen3-0.6b": (16, 8, 128, 151936), "llama3-8b": (32, 8, 128, 128256)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(SHAPES))
    ap.add_argument("--json", default=None)
    ap.add_argument("--skip", nargs="*", default=[], choices=["decode", "mixed", "prefill", "store", "sampling"])
    a = ap.parse_args(argv)
    rec = Recorder(a.json)
    for m in a.models:
        h, kvh, d, vocab = SHAPES[m]
        if "store" not in a.skip:
            for t in (256, 8192):
                kv_store(rec, m, h, kvh, d, t)
        if "sampling" not in a.skip:
            sampling(rec, 256, vocab, 0.6)
        if "decode" not in a.skip:
            for batch, ctx in ((256, 1024), (64, 1024), (256, 512)):
                decode_attention(rec, m, h, kvh, d, batch, ctx)
        if "mixed" not in a.skip:
            from twinserve.bench.mixed_attention import mixed_step

            for order in ("random", "longest-first"):
                mixed_step(rec, m, h, kvh, d, order=order)
        if "prefill" not in a.skip:
            for seqs, new, cached in ((16, 512, 512), (4, 2048, 0)):
                prefill_attention(rec, m, h, kvh, d, seqs, new, cached)


if __name__ == "__main__":
    main()
