"""32k+ prompts through chunked prefill on CUDA (bf16, FlashInfer) against transformers, on the
long-context shapes qwen3-8b (40,960 positions) and llama3.1-8b (131,072, Llama 3.1 rope
scaling) cut to two layers (random weights; every other dimension the real model's).

As in test_engine_gpu.py: max |ours_bf16 − hf_fp32| <= 2 × max |hf_bf16 − hf_fp32| + 0.02, at
the first and last positions of every 8,192-token chunk and the last prompt positions.
"""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="needs flashinfer"),
]

from twinserve.core.model_shapes import get_shape  # noqa: E402
from twinserve.engine.llm import LLM  # noqa: E402
from twinserve.engine.testing import chunked_prefill_logits, hf_logits, random_prompts  # noqa: E402

CHUNK = 8192
LONG = {"qwen3-8b": 33000, "llama3.1-8b": 40000}   # prompt tokens: past 32k, and past 8,192 x 4


@pytest.mark.parametrize("name", sorted(LONG))
def test_gpu_long_prompt_chunked_prefill_logits(name, tiny_model_dir, hf_model):
    shape = dataclasses.replace(get_shape(name), name=f"{name}-2layers", num_layers=2)
    d = tiny_model_dir(shape, "bfloat16")
    n = LONG[name]
    pages = -(-n // 16) + 16
    llm = LLM(str(d), device="cuda", dtype="bfloat16", num_pages=pages, cuda_graphs=False,
              scheduler={"chunk_size": CHUNK, "max_num_batched_tokens": CHUNK})
    prompt = random_prompts([n], vocab=shape.vocab_size, seed=3)[0]
    rows = sorted({r for s in range(0, n, CHUNK) for r in (s, min(s + CHUNK, n) - 1)} | {n - 2})
    ours, steps = chunked_prefill_logits(llm, prompt, rows)
    assert steps == -(-n // CHUNK)
    del llm
    torch.cuda.empty_cache()
    ref = hf_logits(hf_model(d, torch.float32, "cuda"), prompt, rows, chunk=2048)
    hfb = hf_logits(hf_model(d, torch.bfloat16, "cuda"), prompt, rows, chunk=2048)
    our_err = (ours - ref).abs().max().item()
    hf_err = (hfb - ref).abs().max().item()
    print(f"{name} ({n} tokens, {steps} chunks): engine bf16 err {our_err:.4f}, transformers bf16 err {hf_err:.4f}")
    assert ref.std().item() > 0.05
    assert our_err <= 2 * hf_err + 0.02
