"""Attention of one mixed step (decodes over varied contexts plus a prompt chunk) by kernel,
plan, page layout and row order (CUDA); `bench.step_kernels` runs it (``--skip mixed`` leaves
it out). Results: docs/results/step_kernels.md.
"""

from __future__ import annotations

from typing import Callable

from twinserve.bench.gemm_shapes import time_ms
from twinserve.bench.step_kernels import Recorder, paged_cache


def mixed_step(rec: Recorder, model: str, heads: int, kv_heads: int, dim: int, decodes: int = 256,
               chunk_new: int = 64, chunk_cached: int = 448, page: int = 16, order: str = "random") -> None:
    """One step of decodes over varied contexts (uniform in [100, 2000], seeded) plus a prompt
    chunk: one prefill-kernel call over all rows (eager, or planned as a CUDA-graph wrapper as
    the engine's token graphs are) against a decode-kernel call for the decode rows plus a
    prefill call for the chunk; and the decode rows alone by each decode variant and layout.
    ``order`` "longest-first" sorts the decode rows by context, longest first (the kernels
    take their work items in row order, so the last ones to start are then the shortest)."""
    import flashinfer
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    dec_lens = [int(x) for x in rng.integers(100, 2001, decodes)]
    if order == "longest-first":
        dec_lens.sort(reverse=True)
    lens = dec_lens + [chunk_cached + chunk_new]
    kv_bytes = 2 * sum(lens) * kv_heads * dim * 2
    q = torch.randn(decodes + chunk_new, heads, dim, device="cuda", dtype=torch.bfloat16)
    qo = torch.tensor([0] + list(range(1, decodes + 1)) + [decodes + chunk_new], dtype=torch.int32, device="cuda")
    ws = torch.zeros(512 << 20, dtype=torch.uint8, device="cuda")
    ws2 = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
    ref: dict[str, torch.Tensor] = {}

    def prefill_wrapper(graph: bool, rows: int, workspace, layout: str = "NHD"):
        if not graph:
            return flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, layout, backend="fa2")
        n = 1 << 20
        return flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            workspace, layout, backend="fa2", use_cuda_graph=True,
            qo_indptr_buf=torch.zeros(rows + 1, dtype=torch.int32, device="cuda"),
            paged_kv_indptr_buf=torch.zeros(rows + 1, dtype=torch.int32, device="cuda"),
            paged_kv_indices_buf=torch.zeros(n, dtype=torch.int32, device="cuda"),
            paged_kv_last_page_len_buf=torch.zeros(rows, dtype=torch.int32, device="cuda"))

    def decode_wrapper(tc: bool, graph: bool, rows: int, workspace, layout: str = "NHD"):
        if not graph:
            return flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, layout, use_tensor_cores=tc)
        return flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            workspace, layout, use_cuda_graph=True, use_tensor_cores=tc,
            paged_kv_indptr_buffer=torch.zeros(rows + 1, dtype=torch.int32, device="cuda"),
            paged_kv_indices_buffer=torch.zeros(1 << 20, dtype=torch.int32, device="cuda"),
            paged_kv_last_page_len_buffer=torch.zeros(rows, dtype=torch.int32, device="cuda"))

    common = dict(q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)

    def one_call(graph: bool, layout: str = "NHD", rows: int = 0, split: bool = True):
        """``rows`` > the step's sequences: pad with empty rows on one scratch page, as the
        engine's token graphs of ``token_graph_rows`` sequences do."""
        k, v, perm, indptr, last = paged_cache(lens, kv_heads, dim, page, layout)
        pad = max(0, rows - decodes - 1)
        qo_p = torch.cat([qo, qo[-1:].expand(pad)])
        indptr_p = torch.cat([indptr, indptr[-1] + torch.arange(1, pad + 1, dtype=torch.int32, device="cuda")])
        perm_p = torch.cat([perm, perm[:1].expand(pad)])
        last_p = torch.cat([last, torch.ones(pad, dtype=torch.int32, device="cuda")])
        w = prefill_wrapper(graph, decodes + 1 + pad, ws, layout)
        w.plan(qo_p, indptr_p, perm_p, last_p, heads, kv_heads, dim, page, causal=True,
               disable_split_kv=not split, **common)
        return lambda: w.run(q, (k, v))

    def decode_plus_prefill(tc: bool, graph: bool, layout: str = "NHD"):
        k, v, perm, indptr, last = paged_cache(lens, kv_heads, dim, page, layout)
        d = decode_wrapper(tc, graph, decodes, ws, layout)
        d.plan(indptr[: decodes + 1], perm, last[:decodes], heads, kv_heads, dim, page, **common)
        p = prefill_wrapper(graph, 1, ws2, layout)
        base = int(indptr[decodes])
        p.plan(torch.tensor([0, chunk_new], dtype=torch.int32, device="cuda"),
               indptr[decodes:] - base, perm[base:], last[decodes:], heads, kv_heads, dim, page, causal=True,
               **common)
        out = torch.empty_like(q)

        def run() -> torch.Tensor:
            d.run(q[:decodes], (k, v), out=out[:decodes])
            p.run(q[decodes:], (k, v), out=out[decodes:])
            return out
        return run

    def decode_only(tc: bool, graph: bool, layout: str):
        k, v, perm, indptr, last = paged_cache(dec_lens, kv_heads, dim, page, layout)
        d = decode_wrapper(tc, graph, decodes, ws, layout)
        d.plan(indptr, perm, last, heads, kv_heads, dim, page, **common)
        return lambda: d.run(q[:decodes], (k, v))

    cases: dict[str, tuple[str, Callable[[], Callable[[], torch.Tensor]]]] = {
        "one-prefill-call": ("mixed", lambda: one_call(False)),
        "one-prefill-call-graph": ("mixed", lambda: one_call(True)),
        "one-prefill-call-graph-hnd": ("mixed", lambda: one_call(True, "HND")),
        "one-prefill-call-graph-320-rows": ("mixed", lambda: one_call(True, rows=320)),
        "one-prefill-call-graph-320-rows-nosplit": ("mixed", lambda: one_call(True, rows=320, split=False)),
        "decode-cc+prefill": ("mixed", lambda: decode_plus_prefill(False, False)),
        "decode-tc+prefill": ("mixed", lambda: decode_plus_prefill(True, False)),
        "decode-cc+prefill-graph": ("mixed", lambda: decode_plus_prefill(False, True)),
        "decode-tc+prefill-graph": ("mixed", lambda: decode_plus_prefill(True, True)),
        "decode-tc+prefill-graph-hnd": ("mixed", lambda: decode_plus_prefill(True, True, "HND")),
    }
    for tc in (False, True):
        for graph in (False, True):
            for layout in ("NHD", "HND"):
                name = f"decode-{'tc' if tc else 'cc'}{'-graph' if graph else ''}-{layout.lower()}"
                cases[name] = ("decode", lambda tc=tc, graph=graph, layout=layout: decode_only(tc, graph, layout))
    for name, (kind, build) in cases.items():
        try:
            fn = build()
            out = fn()[:decodes].float()
            torch.cuda.synchronize()
            err = (out - ref[kind]).abs().max().item() if kind in ref else 0.0
            ref.setdefault(kind, out.clone())
            ms = time_ms(fn)
            nbytes = kv_bytes if kind == "mixed" else 2 * sum(dec_lens) * kv_heads * dim * 2
            rec(kind=f"{kind}_step_attention", model=model, variant=name, order=order, decodes=decodes, chunk=chunk_new,
                ms=ms, gb_s=nbytes / ms / 1e6, max_abs_err=err)
        except Exception as e:  # noqa: BLE001 - report and go on
            rec(kind=f"{kind}_step_attention", model=model, variant=name, error=repr(e)[:300])
