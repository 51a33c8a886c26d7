"""Attention beside the matrix products: does a step gain from two half batches on two streams?

    python -m twinserve.bench.overlap --model qwen3-0.6b --batch 256 --ctx 1024 --json OUT.jsonl

A decode step's layers, reduced to their two big kernels: the layer's matrix products (fused
qkv, o, fused gate/up, down, `bench.gemm_shapes.layer_gemms`; each layer its own weights) and FlashInfer's tensor-core
decode attention over a paged bf16 cache (page size 16). Each schedule is captured as one CUDA
graph of all the model's layers and replayed; the table gives its milliseconds:

- ``one batch``: every layer runs qkv, attention, o, gate/up, down over the whole batch, one
  stream (the engine's decode step as it is);
- ``halves, one stream``: the same over two half batches one after the other (what splitting
  costs: each product reads its weights twice);
- ``halves, two streams``: each half on its own stream, so one half's attention can run while
  the other's products do;
- ``attention only`` / ``products only``: all layers' attention, or all products, alone.

Overlap pays where ``halves, two streams`` beats ``one batch``; ``attention only`` plus
``products only`` is what one batch would take with nothing overlapped. CUDA only.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from typing import Callable


@dataclass(frozen=True, slots=True)
class OverlapCase:
    """One measured schedule: the model, batch, context, and the graph's replay time."""

    model: str
    batch: int
    ctx: int
    schedule: str
    ms: float


def halves(batch: int) -> tuple[int, int]:
    """Two half batches covering ``batch`` rows (the first takes the odd row)."""
    if batch < 2:
        raise ValueError(f"a batch of {batch} cannot be split in two")
    return batch - batch // 2, batch // 2


def _weights(model: str, seed: int) -> list[dict[str, object]]:
    """Each layer's projection weights (bf16, out x in), distinct per layer as in a model."""
    import torch

    from twinserve.bench.gemm_shapes import layer_gemms
    from twinserve.core.model_shapes import get_shape

    g = torch.Generator(device="cuda").manual_seed(seed)
    shapes = [(n, o, i) for n, o, i in layer_gemms(model) if n != "lm_head"]
    return [{n: torch.randn(o, i, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02 for n, o, i in shapes}
            for _ in range(get_shape(model).num_layers)]


def _layer_fns(model: str, weights: list[dict[str, object]], batch: int, ctx: int,
               seed: int) -> tuple[Callable[[int], None], Callable[[], None]]:
    """(products of layer i, attention) over ``batch`` decodes of context ``ctx``, as closures
    over their own activations and paged cache; the weights are shared."""
    import flashinfer
    import torch

    from twinserve.bench.step_kernels import paged_cache
    from twinserve.core.model_shapes import get_shape

    s = get_shape(model)
    dev, bf = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(seed)
    w0 = weights[0]
    x = torch.randn(batch, s.hidden_size, device=dev, dtype=bf, generator=g)
    qkv = torch.empty(batch, w0["qkv"].shape[0], device=dev, dtype=bf)  # type: ignore[attr-defined]
    o_in = torch.randn(batch, s.q_size, device=dev, dtype=bf, generator=g)
    h = torch.empty(batch, s.hidden_size, device=dev, dtype=bf)
    gu = torch.empty(batch, w0["gate_up"].shape[0], device=dev, dtype=bf)  # type: ignore[attr-defined]
    down_in = torch.randn(batch, s.intermediate_size, device=dev, dtype=bf, generator=g)
    y = torch.empty(batch, s.hidden_size, device=dev, dtype=bf)

    def products(i: int) -> None:
        ws = weights[i]
        torch.matmul(x, ws["qkv"].t(), out=qkv)  # type: ignore[attr-defined]
        torch.matmul(o_in, ws["o"].t(), out=h)  # type: ignore[attr-defined]
        torch.matmul(x, ws["gate_up"].t(), out=gu)  # type: ignore[attr-defined]
        torch.matmul(down_in, ws["down"].t(), out=y)  # type: ignore[attr-defined]

    heads, kv_heads, dim = s.num_heads, s.num_kv_heads, s.head_dim
    k, v, perm, indptr, last = paged_cache([ctx] * batch, kv_heads, dim, 16, seed=seed)
    q = torch.randn(batch, heads, dim, device=dev, dtype=bf, generator=g)
    out = torch.empty_like(q)
    work = torch.zeros(128 << 20, dtype=torch.uint8, device=dev)
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(work, "NHD", use_tensor_cores=True)
    w.plan(indptr, perm, last, num_qo_heads=heads, num_kv_heads=kv_heads, head_dim=dim, page_size=16,
           q_data_type=bf, kv_data_type=bf)

    def attention() -> None:
        w.run(q, (k, v), out=out)

    return products, attention


def _graph_ms(body: Callable[[], None], reps: int = 20) -> float:
    """Median replay time of ``body`` captured as one CUDA graph."""
    import torch

    from twinserve.bench.gemm_shapes import time_ms

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture (cuBLAS handles, workspaces)
        body()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return time_ms(graph.replay, reps)


def measure(model: str, batch: int, ctx: int) -> list[OverlapCase]:
    """Time every schedule of the module docstring for one model, batch and context."""
    import torch

    from twinserve.core.model_shapes import get_shape

    layers = get_shape(model).num_layers
    weights = _weights(model, 0)
    prod, attn = _layer_fns(model, weights, batch, ctx, 0)
    a, b = halves(batch)
    prod_a, attn_a = _layer_fns(model, weights, a, ctx, 1)
    prod_b, attn_b = _layer_fns(model, weights, b, ctx, 2)
    other = torch.cuda.Stream()

    def one_batch() -> None:
        for i in range(layers):
            prod(i)
            attn()

    def halves_one_stream() -> None:
        for i in range(layers):
            prod_a(i)
            attn_a()
            prod_b(i)
            attn_b()

    def halves_two_streams() -> None:
        main = torch.cuda.current_stream()
        other.wait_stream(main)
        for i in range(layers):  # two independent chains; the device interleaves them
            prod_a(i)
            attn_a()
            with torch.cuda.stream(other):  # b's chain starts with attention: half a layer apart
                attn_b()
                prod_b(i)
        main.wait_stream(other)

    def attention_only() -> None:
        for _ in range(layers):
            attn()

    def products_only() -> None:
        for i in range(layers):
            prod(i)

    schedules = {"one batch": one_batch, "halves, one stream": halves_one_stream,
                 "halves, two streams": halves_two_streams, "attention only": attention_only,
                 "products only": products_only}
    return [OverlapCase(model, batch, ctx, name, _graph_ms(fn)) for name, fn in schedules.items()]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", nargs="+", default=["qwen3-0.6b"])
    ap.add_argument("--batch", nargs="+", type=int, default=[256])
    ap.add_argument("--ctx", nargs="+", type=int, default=[1024])
    ap.add_argument("--json", default=None, help="append one JSON line per case to this file")
    a = ap.parse_args(argv)
    print(f"{'model':<12} {'batch':>5} {'ctx':>5}  {'schedule':<20} {'ms':>8}")
    for m in a.model:
        for bs in a.batch:
            for c in a.ctx:
                for case in measure(m, bs, c):
                    print(f"{case.model:<12} {case.batch:>5} {case.ctx:>5}  {case.schedule:<20} {case.ms:>8.3f}",
                          flush=True)
                    if a.json:
                        with open(a.json, "a") as f:
                            f.write(json.dumps(asdict(case)) + "\n")


if __name__ == "__main__":
    main()
