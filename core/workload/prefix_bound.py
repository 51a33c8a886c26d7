"""`prefix_bound`: the prefix-cache hit rate a workload allows with an infinite cache.

Requests are taken in arrival order. Each prompt is cut into blocks, a block named by the chain
of blocks before it (so a block only matches after an identical prefix, as in a radix cache);
a request's hit is the length of its leading run of blocks some earlier request already had,
capped at ``prompt_len - 1`` (the last prompt token is always computed, as the schedulers do).

- Requests with ``hash_ids``: block ``i`` is ``hash_ids[i]`` over the workload's
  ``block_size`` tokens (the last block may be partial; it matches up to the length an earlier
  request had of it). Tokens past the hashed blocks are unique to the request.
- Requests with explicit ``tokens``: blocks of ``token_block`` ids, matched only when full. What
  such a request leaves in the cache is its prompt followed by its answer (``output_tokens``),
  as a backend's cache holds it, so a later turn that repeats the answer hits on it.
- Other requests have unique pseudo-random tokens: no hit, but they count as prompt tokens.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass

import numpy as np

from twinserve.core.workload.spec import RequestSpec
from twinserve.core.workload.workload import Workload

TOKEN_BLOCK = 16  # block of explicit token ids: the schedulers' default page size


@dataclass(frozen=True, slots=True)
class PrefixBound:
    """``hit_tokens`` of ``prompt_tokens`` an infinite prefix cache serves (``requests`` counted)."""

    hit_tokens: int
    prompt_tokens: int
    requests: int

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else float("nan")


def _blocks(w: Workload, s: RequestSpec, token_block: int) -> Iterator[tuple[object, int, bool]]:
    """(block, its tokens in this request, whether it lies in the prompt) for the blocks the
    request can match (those in the prompt) and leaves behind (those and the answer's)."""
    if s.hash_ids:
        for i, h in enumerate(s.hash_ids):
            n = min(w.block_size, s.prompt_len - i * w.block_size)
            if n <= 0:
                return
            yield h, n, True
    elif s.tokens is not None:
        ids = np.concatenate([w.prompt_tokens(s), w.output_tokens(s)])
        for i in range(0, ids.size - token_block + 1, token_block):
            yield ids[i:i + token_block].tobytes(), token_block, i + token_block <= s.prompt_len


def prefix_bound(w: Workload, rids: Collection[int] | None = None,
                 token_block: int = TOKEN_BLOCK) -> PrefixBound:
    """The infinite-cache bound over the requests of ``w`` (only those in ``rids`` if given),
    in arrival order; see the module docstring."""
    seen: dict[int, int] = {}  # chained block key (a 64-bit hash) -> longest length of it seen
    hit = total = count = 0
    for s in w:
        if rids is not None and s.rid not in rids:
            continue
        count += 1
        total += s.prompt_len
        key = 0
        got, matching = 0, True
        for block, n, in_prompt in _blocks(w, s, token_block):
            key = hash((key, block))
            before = seen.get(key, 0)
            if matching and in_prompt:
                got += min(n, before)
                matching = before >= n
            if n > before:
                seen[key] = n
        hit += min(got, s.prompt_len - 1)
    return PrefixBound(hit, total, count)
