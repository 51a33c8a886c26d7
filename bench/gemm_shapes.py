"""Dense-layer GEMM speed of a model shape at the token counts its steps use (CUDA).

    python -m twinserve.bench.gemm_shapes --model llama3-8b --tokens 1 64 256 2048 8192 16384

For each projection of one layer (fused qkv, o, fused gate/up, down) and the LM head, the
median time of ``x @ W.T`` over rotating inputs, its TFLOP/s, and the same product written with
``out=`` into a row slice of a larger buffer (how graph pieces call it). Prints one table.
``--lt`` adds a column with cuBLASLt as torch's preferred BLAS library, ``--split-k S ...`` one
per split: ``S`` products over K/S as one batched product, then their sum (bf16 partials).
"""

from __future__ import annotations

import argparse


def layer_gemms(model: str) -> list[tuple[str, int, int]]:
    """(name, out features, in features) of one layer's projections and the LM head."""
    from twinserve.core.model_shapes import get_shape

    s = get_shape(model)
    return [("qkv", s.q_size + 2 * s.kv_size, s.hidden_size), ("o", s.hidden_size, s.q_size),
            ("gate_up", 2 * s.intermediate_size, s.hidden_size), ("down", s.hidden_size, s.intermediate_size),
            ("lm_head", s.vocab_size, s.hidden_size)]


def time_ms(fn, reps: int = 20) -> float:
    import torch

    for _ in range(3):
        fn()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in ev:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    t = sorted(a.elapsed_time(b) for a, b in ev)
    return t[len(t) // 2]


def split_k_product(xs: list, w, splits: int):
    """``x @ w.T`` as ``splits`` products over slices of K in one batched call, then summed."""
    import torch

    n, k = w.shape
    ws = w.view(n, splits, k // splits).permute(1, 2, 0)  # [splits, K/splits, N]
    i = [0]

    def run():
        i[0] = (i[0] + 1) % len(xs)
        x = xs[i[0]]
        parts = torch.bmm(x.view(x.shape[0], splits, k // splits).transpose(0, 1), ws)
        return parts.sum(0)
    return run


def main(argv: list[str] | None = None) -> None:
    import torch
    import torch.nn.functional as F

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 64, 256, 1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--lt", action="store_true", help="also time with cuBLASLt preferred")
    ap.add_argument("--split-k", type=int, nargs="*", default=[], help="also time these K splits")
    args = ap.parse_args(argv)
    dev, dt = "cuda", torch.bfloat16
    extra = (["cuBLASLt ms"] if args.lt else []) + [f"split-k {s} ms" for s in args.split_k]
    print(f"| {args.model} gemm | tokens | ms | TFLOP/s | ms with out= slice |" + "".join(f" {e} |" for e in extra))
    print("|---|---|---|---|---|" + "---|" * len(extra))
    for name, n, k in layer_gemms(args.model):
        w = torch.randn(n, k, device=dev, dtype=dt) * 0.02
        for m in args.tokens:
            xs = [torch.randn(m, k, device=dev, dtype=dt) for _ in range(4)]
            buf = torch.empty(max(args.tokens) + 64, n, device=dev, dtype=dt)
            i = [0]

            def plain():
                i[0] = (i[0] + 1) % 4
                return F.linear(xs[i[0]], w)

            def sliced():
                i[0] = (i[0] + 1) % 4
                return torch.mm(xs[i[0]], w.t(), out=buf[:m])

            a, b = time_ms(plain), time_ms(sliced)
            cols = []
            if args.lt:
                before = torch.backends.cuda.preferred_blas_library()
                torch.backends.cuda.preferred_blas_library("cublaslt")
                cols.append(time_ms(plain))
                torch.backends.cuda.preferred_blas_library(before)
            for sk in args.split_k:
                cols.append(time_ms(split_k_product(xs, w, sk)) if k % sk == 0 else float("nan"))
            print(f"| {name} {n}x{k} | {m} | {a:.3f} | {2 * m * n * k / a / 1e9:.0f} | {b:.3f} |"
                  + "".join(f" {c:.3f} |" for c in cols), flush=True)
            del xs, buf
        del w


if __name__ == "__main__":
    main()
