"""What bounds the side-by-side recipe on one GPU: the work every engine must do, and the
fastest it could be done at given kernel rates.

    python -m twinserve.bench.recipe_floor --model qwen3-0.6b --kv-tb-s 4.12 --gemm-tflops 790

For the requests of each seed (`bench.recipe`), counted exactly:

- **KV bytes**: every output token's step reads its sequence's whole context once (bf16 K and V
  of every layer); the last prompt token's step (which makes the first output token) counts too.
  No schedule reads less: batching shares weights, not KV.
- **GEMM FLOPs**: the dense layers run once per prompt and output token (the last output token
  is never fed back), the LM head once per output token.
- **Steps**: at least the longest output (``min_steps``).

The floor adds the KV read at ``--kv-tb-s`` (the attention kernel's best measured read rate), the
GEMMs at ``--gemm-tflops`` and nothing else (no norms, no launch gaps, no overlap of attention
with GEMMs), and gives the throughput no engine without such an overlap can pass; ``--vs
TOK_S`` prints that ceiling as a ratio to another engine's measured throughput.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from twinserve.bench.recipe import recipe
from twinserve.core.model_shapes import ModelShape, get_shape


@dataclass(frozen=True)
class RecipeWork:
    """The work of one run of the recipe on one model (bf16)."""

    output_tokens: int
    prompt_tokens: int
    kv_bytes: float
    gemm_flops: float
    min_steps: int

    def kv_s(self, kv_tb_s: float) -> float:
        return self.kv_bytes / (kv_tb_s * 1e12)

    def gemm_s(self, gemm_tflops: float) -> float:
        return self.gemm_flops / (gemm_tflops * 1e12)

    def floor_s(self, kv_tb_s: float, gemm_tflops: float) -> float:
        """Seconds at least: the KV read plus the GEMMs, back to back."""
        return self.kv_s(kv_tb_s) + self.gemm_s(gemm_tflops)


def recipe_work(shape: ModelShape, seed: int, n: int = 256) -> RecipeWork:
    """Count the work of the requests of ``seed`` (see the module docstring)."""
    r = recipe(seed, n=n)
    per_token_kv = shape.kv_bytes_per_token(2)
    ctx_reads = 0
    for prompt, out in zip(r.prompts, r.output_lens):
        p = len(prompt)
        # output token j (0-based) comes from a step whose sequence holds p + j tokens
        ctx_reads += out * p + out * (out - 1) // 2
    prompt_tokens = sum(len(p) for p in r.prompts)
    fed = prompt_tokens + r.output_tokens - len(r.prompts)
    dense = 2 * shape.num_layers * shape.layer_params()
    head = 2 * shape.vocab_size * shape.hidden_size
    return RecipeWork(output_tokens=r.output_tokens, prompt_tokens=prompt_tokens,
                      kv_bytes=float(ctx_reads * per_token_kv), gemm_flops=float(fed * dense + r.output_tokens * head),
                      min_steps=max(r.output_lens))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 999])
    ap.add_argument("--kv-tb-s", type=float, default=4.12, help="attention's KV read rate (TB/s)")
    ap.add_argument("--gemm-tflops", type=float, default=790.0, help="GEMM rate (TFLOP/s)")
    ap.add_argument("--vs", type=float, default=None, help="another engine's tok/s to compare the ceiling with")
    a = ap.parse_args(argv)
    shape = get_shape(a.model)
    print(f"| {a.model} seed | output tokens | KV read (TB) | GEMM (PFLOP) | KV s | GEMM s | floor s | "
          f"ceiling tok/s |" + (" ceiling / other |" if a.vs else ""))
    print("|---|---|---|---|---|---|---|---|" + ("---|" if a.vs else ""))
    for seed in a.seeds:
        w = recipe_work(shape, seed)
        floor = w.floor_s(a.kv_tb_s, a.gemm_tflops)
        ceil = w.output_tokens / floor
        print(f"| {seed} | {w.output_tokens:,} | {w.kv_bytes / 1e12:.2f} | {w.gemm_flops / 1e15:.2f} | "
              f"{w.kv_s(a.kv_tb_s):.2f} | {w.gemm_s(a.gemm_tflops):.2f} | {floor:.2f} | {ceil:,.0f} |"
              + (f" {ceil / a.vs:.2f}x |" if a.vs else ""))


if __name__ == "__main__":
    main()
