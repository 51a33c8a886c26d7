"""Helpers for checking the engine against transformers (used by tests/engine and GPU checks)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

TINY_FAMILIES = ("tiny-llama", "tiny-qwen3", "tiny-qwen2", "tiny-mistral")


def hf_greedy(model, prompt: Sequence[int], n: int) -> list[int]:
    """``n`` greedy tokens from transformers' ``generate`` for one prompt, never stopping at EOS."""
    import torch
    from transformers import GenerationConfig

    gc = GenerationConfig(do_sample=False, max_new_tokens=n, min_new_tokens=n, eos_token_id=None, pad_token_id=0)
    ids = torch.tensor([list(prompt)], device=model.device)
    with torch.no_grad():
        out = model.generate(ids, generation_config=gc, attention_mask=torch.ones_like(ids))
    return out[0, len(prompt):].tolist()


def random_prompts(lengths: Sequence[int], vocab: int = 1024, seed: int = 0) -> list[list[int]]:
    """Prompts of the given lengths, ids uniform in [3, vocab) (no pad/bos/eos)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(3, vocab, n).tolist() for n in lengths]
