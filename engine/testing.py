"""Helpers for checking the engine against transformers (used by tests/engine and GPU checks)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from twinserve.core.model_shapes import ModelShape

TINY_FAMILIES = ("tiny-llama", "tiny-qwen3", "tiny-qwen2", "tiny-mistral")

# the GPU tests' tiny shapes: head_dim 128 and GQA groups 4 (llama: tensor-core decode) and 2
# (the others: CUDA-core decode), the FlashInfer kernel variants the benchmark shapes use, so the
# GPU host compiles each kernel once
GPU_SHAPES = {
    "llama": ModelShape("gpu-llama", "llama", 256, 3, 8, 2, 128, 512, 1024, max_position_embeddings=4096),
    "qwen3": ModelShape("gpu-qwen3", "qwen3", 256, 3, 4, 2, 128, 512, 1024, tie_word_embeddings=True,
                        rope_theta=1e6, max_position_embeddings=4096),
    "qwen2": ModelShape("gpu-qwen2", "qwen2", 256, 2, 4, 2, 128, 512, 1024, tie_word_embeddings=True,
                        max_position_embeddings=4096),
    "mistral": ModelShape("gpu-mistral", "mistral", 256, 2, 4, 2, 128, 512, 1024, max_position_embeddings=4096),
}


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


def sequence_step(seqs: Sequence[tuple[Sequence[int], int, Sequence[int]]], page_size: int):
    """One step of ``seqs`` = (new token ids, start position, page ids), without a scheduler:
    its ``(AttentionInputs, ids, positions, slots)``."""
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
    inputs = AttentionInputs(i32(qo), i32(kv), i32(indptr), i32(indices), i32(last), decode_only=False)
    return inputs, torch.tensor(ids), torch.tensor(pos), torch.tensor(slots)


def plan_sequences(attn, seqs: Sequence[tuple[Sequence[int], int, Sequence[int]]], page_size: int):
    """Plan ``attn`` for the step of `sequence_step` and return its ``(ids, positions, slots)``
    tensors: the inputs of a forward."""
    inputs, ids, pos, slots = sequence_step(seqs, page_size)
    attn.plan(inputs)
    return ids, pos, slots


def cpu_model_and_pools(model_dir, page_size: int, copies: int = 2, num_pages: int = 64):
    """A float32 CPU model of ``model_dir`` (its weights loaded) and ``copies`` KV pools with a
    torch attention backend each (8 sequences, 64 pages a sequence): ``(model, pools, attns)``,
    so that one forward can run on each copy and their KV be compared."""
    import torch

    from twinserve.engine.attention.base import AttentionSpec
    from twinserve.engine.attention.torch_backend import TorchAttention
    from twinserve.engine.kv_pool import KVGeometry, KVPool
    from twinserve.engine.layers.kernels import TorchKernels
    from twinserve.engine.loader import load_weights
    from twinserve.engine.model_config import ModelConfig
    from twinserve.engine.models import build_model

    mc = ModelConfig.from_dir(model_dir)
    model = build_model(mc, TorchKernels(), torch.float32, torch.device("cpu"))
    load_weights(model, model_dir)
    geom = KVGeometry(mc.num_layers, num_pages, page_size, mc.num_kv_heads, mc.head_dim, torch.float32)
    pools = [KVPool(geom, "cpu") for _ in range(copies)]
    attns = [TorchAttention(AttentionSpec(mc.num_heads, mc.num_kv_heads, mc.head_dim, torch.float32, p, 64))
             for p in pools]
    return model, pools, attns


def padded_step_plan(seed: int = 3) -> list[list[tuple[list[int], int, list[int]]]]:
    """Two steps for the padded-graph checks, as `sequence_step` inputs: a 30-token prefill on
    scattered pages, then its last 7 tokens beside a new 11-token prompt (18 tokens, fewer than
    the first step: its rows stay in the graphs' buffers, under the padding)."""
    a, b = random_prompts([37, 11], seed=seed)
    pages_a = [5, 2, 9, 7, 30, 31, 12, 13, 14, 15]
    pages_b = [40, 41, 42]
    return [[(a[:30], 0, pages_a)], [(a[30:], 30, pages_a), (b, 0, pages_b)]]


def greedy_mismatches(llm, hf, prompts: Sequence[Sequence[int]], n: int) -> list[int]:
    """Generate ``n`` greedy tokens per prompt with ``llm`` (one batch, EOS ignored) and return
    the indices of the prompts whose tokens differ from transformers' ``hf`` (`hf_greedy`)."""
    from twinserve.core.sampling import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    outs = llm.generate(list(prompts), params, use_tqdm=False)
    return [i for i, (p, o) in enumerate(zip(prompts, outs)) if o.token_ids != hf_greedy(hf, p, n)]


def reference_processed_row(row, tokens: Sequence[int], prompt_len: int, pos: int, params, eos: Sequence[int]):
    """One row of logits after `SamplingParams`' processors, computed token by token in plain
    torch (the reference for `engine.logits_processing`): ``tokens[:prompt_len]`` is the prompt,
    ``tokens[prompt_len:prompt_len + pos]`` the outputs before the one being sampled."""
    import collections

    row = row.clone()
    for t, b in params.logit_bias.items():
        row[t] += b
    if pos < params.min_tokens:
        banned = set(params.stop_token_ids) | (set() if params.ignore_eos else set(eos))
        for t in banned:
            row[t] = float("-inf")
    outs = list(tokens[prompt_len: prompt_len + pos])
    if params.repetition_penalty != 1.0:
        for t in set(tokens[:prompt_len]) | set(outs):
            row[t] = row[t] / params.repetition_penalty if row[t] > 0 else row[t] * params.repetition_penalty
    for t, c in collections.Counter(outs).items():
        row[t] -= params.frequency_penalty * c + params.presence_penalty
    return row


def chunked_prefill_logits(llm, prompt: list[int], rows: list[int]):
    """Logits of one long prompt prefilled by the engine's own scheduler in chunks: run
    ``prompt`` through ``llm.engine``'s scheduler, model and attention backend step by step until
    its prefill is done; return (float32 logits at prompt positions ``rows``, the number of
    steps it took)."""
    import torch

    from twinserve.core.request import Req
    from twinserve.core.sampling import SamplingParams
    from twinserve.engine.models.decoder import ForwardContext
    from twinserve.engine.step_inputs import build_step_inputs

    eng = llm.engine
    sched = eng.scheduler
    req = Req(10**9, prompt, SamplingParams(max_tokens=1, temperature=0))
    sched.add(req)
    hidden, steps = [], 0
    while sum(h.shape[0] for h in hidden) < len(prompt):
        batch = sched.schedule(0.0)
        assert len(batch) == 1, "one request, one row a step"
        inp = build_step_inputs(batch, eng.pool.page_size, eng.pool.scratch_page, {})
        dev = inp.packed.to(eng.device)
        v = inp.views(dev)
        eng.attn.plan(inp.attn)
        with torch.inference_mode():
            hidden.append(eng.model(v["ids"], ForwardContext(v["positions"], v["slots"], eng.attn)).clone())
        sched.complete(batch, np.zeros(len(batch), dtype=np.int64), 0.0)
        steps += 1
    h = torch.cat(hidden)
    with torch.inference_mode():
        return eng.model.compute_logits(h[torch.tensor(rows, device=h.device)]).float(), steps


def hf_logits(hf, prompt: list[int], rows: list[int], chunk: int | None = None):
    """transformers' logits (as float32) at positions ``rows``: the LM head applied to those rows
    of the final hidden states only, so a long prompt never materialises [T, vocab]. With
    ``chunk``, the prompt goes through in pieces of that many tokens over transformers' own KV
    cache, so its attention never holds a [T, T] score matrix either."""
    import torch

    dev = next(hf.parameters()).device
    ids = torch.tensor([prompt], device=dev)
    with torch.inference_mode():
        if chunk is None:
            last = hf.model(ids).last_hidden_state[0]
            return hf.lm_head(last[torch.tensor(rows, device=dev)]).float()
        past, picked = None, []
        for start in range(0, len(prompt), chunk):
            out = hf.model(ids[:, start:start + chunk], past_key_values=past, use_cache=True)
            past = out.past_key_values
            here = [r - start for r in rows if start <= r < start + chunk]
            if here:
                picked.append(hf.lm_head(out.last_hidden_state[0, here]).float())
        return torch.cat(picked)
