"""A prompt far past the original context of a Llama-3.1-scaled model, prefilled in chunks by
the engine's scheduler, gives transformers' logits (float32, CPU; max |Δlogit| <= 1e-4)."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from twinserve.core.model_shapes import get_shape  # noqa: E402
from twinserve.engine.llm import LLM  # noqa: E402
from twinserve.engine.testing import chunked_prefill_logits, hf_logits, random_prompts  # noqa: E402

ATOL = 1e-4
SCALED = dataclasses.replace(
    get_shape("tiny-llama"), name="tiny-llama3.1-long", num_layers=2, max_position_embeddings=4096,
    rope_theta=500000.0,
    rope_scaling=(("factor", 8.0), ("high_freq_factor", 4.0), ("low_freq_factor", 1.0),
                  ("original_max_position_embeddings", 128), ("rope_type", "llama3")))


def test_chunked_long_prompt_matches_transformers(tiny_model_dir, hf_model) -> None:
    d = tiny_model_dir(SCALED)
    n, chunk = 1500, 256
    llm = LLM(str(d), device="cpu", dtype="float32", num_pages=128, cpu_kv_tokens=2048,
              scheduler={"chunk_size": chunk, "max_num_batched_tokens": chunk})
    prompt = random_prompts([n], seed=5)[0]
    rows = [0, 127, 128, chunk - 1, chunk, 1000, n - 2, n - 1]
    ours, steps = chunked_prefill_logits(llm, prompt, rows)
    assert steps == -(-n // chunk)
    ref = hf_logits(hf_model(d), prompt, rows)
    err = (ours - ref).abs().max().item()
    assert err <= ATOL, f"max |Δlogit| = {err:.2e}"
    assert ref.std().item() > 0.05
    # the chunked reference (transformers over its own KV cache, as the GPU test uses it) agrees
    by_chunks = hf_logits(hf_model(d), prompt, rows, chunk=300)
    assert (by_chunks - ref).abs().max().item() <= ATOL
