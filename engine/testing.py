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


def plan_sequences(attn, seqs: Sequence[tuple[Sequence[int], int, Sequence[int]]], page_size: int):
    """Plan ``attn`` for one step of ``seqs`` = (new token ids, start position, page ids) and
    return its ``(ids, positions, slots)`` tensors: the inputs of a forward, without a scheduler."""
    import torch

    from twinserve.engine.attention.base import AttentionInputs

    ids, pos, slots, qo, kv, indptr, indices, last = [], [], [], [], [], [0], [], []
    for toks, start, pages in seqs:
        n = len(toks)
        p = np.arange(start, start + n)
        ids += list(toks)
        pos += p.tolist()
        slots += [pages[t // page_size] * page_size + t % page_size for t in p]
        total = start + n
        npg = -(-total // page_size)
        qo.append(n)
        kv.append(total)
        indices += list(pages[:npg])
        indptr.append(len(indices))
        last.append(total - (npg - 1) * page_size)
    i32 = lambda a: np.asarray(a, dtype=np.int32)  # noqa: E731
    attn.plan(AttentionInputs(i32(qo), i32(kv), i32(indptr), i32(indices), i32(last), decode_only=False))
    return torch.tensor(ids), torch.tensor(pos), torch.tensor(slots)
