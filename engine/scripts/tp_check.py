"""TP=N against TP=1 on one model, on the GPU (bf16, FlashInfer, CUDA graphs, overlap):
``python3 engine/scripts/tp_check.py --shape gpu-llama|llama3-8b|... [--tp 2] [--json FILE]``.

1. TP=1 generates ``--new`` greedy tokens for each prompt (sequences S).
2. Teacher forcing: on a flushed prefix cache, both degrees prefill ``prompt + S[:k]`` for
   several k (one token each); their last-position logits are compared: max |Δlogit| relative to
   the logits' std, and argmax agreement (where they disagree, TP=1's gap between its top token
   and TP=N's pick, i.e. whether it is a near-tie).
3. TP=N generates greedily too (decode through CUDA graphs + overlap): exact-match count and
   first divergence against S.

Shapes from core.model_shapes (``--shape``; random TP-consistent "dummy" weights) or the
head_dim-128 test shapes "gpu-llama" / "gpu-qwen3" (a bf16 checkpoint with std 0.1 weights).
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time

import numpy as np
import torch

from twinserve.core.model_shapes import ModelShape
from twinserve.core.sampling import SamplingParams
from twinserve.engine.llm import LLM
from twinserve.engine.model_maker import make_model
from twinserve.engine.testing import random_prompts

TEST_SHAPES = {
    "gpu-llama": ModelShape("gpu-llama", "llama", 256, 3, 8, 2, 128, 512, 1024, max_position_embeddings=4096),
    "gpu-qwen3": ModelShape("gpu-qwen3", "qwen3", 256, 3, 4, 2, 128, 512, 1024, tie_word_embeddings=True,
                            rope_theta=1e6, max_position_embeddings=4096),
}


def _model(shape: str) -> tuple[str, str]:
    out = tempfile.mkdtemp(prefix=f"tpcheck-{shape}-")
    if shape in TEST_SHAPES:
        return str(make_model(TEST_SHAPES[shape], out, dtype="bfloat16", std=0.1)), "safetensors"
    return str(make_model(shape, out, weights=False)), "dummy"


def _record(llm: LLM) -> list[torch.Tensor]:
    rec: list[torch.Tensor] = []
    model = llm.engine.model
    orig = model.compute_logits

    def wrapped(h: torch.Tensor) -> torch.Tensor:
        out = orig(h)
        rec.append(out.float().cpu())
        return out

    model.compute_logits = wrapped
    return rec


def _forced_logits(llm: LLM, prompts: list[list[int]]) -> torch.Tensor:
    llm.engine.flush_cache()
    rec = _record(llm)
    llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True), use_tqdm=False)
    out = torch.cat(rec)
    assert out.shape[0] == len(prompts), (out.shape, len(prompts))
    return out


def run(shape: str, tp: int, n_prompts: int, new: int, max_graph_bs: int, cuda_graphs: bool = True) -> dict:
    path, fmt = _model(shape)
    vocab = 1024 if shape in TEST_SHAPES else 10000
    prompts = random_prompts(list(np.random.default_rng(0).integers(16, 400, n_prompts)), vocab=vocab, seed=3)
    greedy = SamplingParams(temperature=0.0, max_tokens=new, ignore_eos=True)
    kw = dict(load_format=fmt, max_graph_bs=max_graph_bs, cuda_graphs=cuda_graphs, tp_cuda_graphs=cuda_graphs,
              scheduler={"max_num_batched_tokens": 32768, "chunk_size": 32768})
    t = time.perf_counter()
    with LLM(path, **kw) as llm:
        t1 = time.perf_counter() - t
        seqs = [o.token_ids for o in llm.generate(prompts, greedy, use_tqdm=False)]
        forced = [p + s[:k] for p, s in zip(prompts, seqs) for k in (0, new // 4, new // 2, new - 1)]
        ref = _forced_logits(llm, forced)
    gc.collect()  # the logits recorder ties the model in a reference cycle
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    t = time.perf_counter()
    with LLM(path, tp_size=tp, **kw) as llm:
        tn = time.perf_counter() - t
        seqs_n = [o.token_ids for o in llm.generate(prompts, greedy, use_tqdm=False)]
        got = _forced_logits(llm, forced)
    diff = (got - ref).abs().max().item()
    a1, an = ref.argmax(-1), got.argmax(-1)
    agree = (a1 == an)
    gaps = (ref.gather(1, a1[:, None]) - ref.gather(1, an[:, None]))[~agree, 0]
    firsts = [next((i for i, (x, y) in enumerate(zip(s, sn)) if x != y), len(s)) for s, sn in zip(seqs, seqs_n)]
    res = {"shape": shape, "tp": tp, "cuda_graphs": cuda_graphs, "prompts": n_prompts, "new_tokens": new, "forced_rows": len(forced),
           "max_abs_dlogit": diff, "logit_std": ref.std().item(), "argmax_agree": int(agree.sum()),
           "max_gap_where_disagree": float(gaps.max()) if gaps.numel() else 0.0,
           "greedy_identical_seqs": sum(s == sn for s, sn in zip(seqs, seqs_n)),
           "first_divergence": firsts, "init_s_tp1": t1, "init_s_tpn": tn}
    print(f"tp check {shape} tp={tp} graphs={cuda_graphs}: max|dlogit| {diff:.3g} (logit std {res['logit_std']:.3f}); argmax agree "
          f"{res['argmax_agree']}/{len(forced)} (max TP=1 gap where not: {res['max_gap_where_disagree']:.3g}); "
          f"greedy {new}-token sequences identical {res['greedy_identical_seqs']}/{n_prompts}, first divergence "
          f"{firsts}; init {t1:.1f} s (tp=1) {tn:.1f} s (tp={tp})", flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="gpu-llama")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--max-graph-bs", type=int, default=32)
    ap.add_argument("--no-cuda-graphs", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    res = run(args.shape, args.tp, args.prompts, args.new, args.max_graph_bs, not args.no_cuda_graphs)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
