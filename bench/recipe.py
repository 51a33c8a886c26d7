"""mini-sglang's offline throughput recipe: the requests both engines of a side-by-side get.

``recipe(seed)`` draws, with Python's ``random`` seeded by ``seed``, ``n`` prompts of token ids
uniform in [0, 10000] whose lengths, and the output lengths, are uniform in [100, 1024]
(inclusive, `random.randint`), generated with ``ignore_eos``. Seed 0 gives exactly the requests
of mini-sglang's own benchmark; the side-by-side gives every timed run a seed of its own, the
same for both engines, so that no run can reuse another run's prefixes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Recipe:
    """One run's requests: ``prompts[i]`` (token ids) and ``output_lens[i]`` tokens to generate."""

    prompts: list[list[int]]
    output_lens: list[int]

    @property
    def output_tokens(self) -> int:
        return sum(self.output_lens)


def recipe(seed: int, n: int = 256, lo: int = 100, hi: int = 1024, vocab: int = 10000) -> Recipe:
    """The requests of one run (see the module docstring); the draw order is mini-sglang's."""
    rng = random.Random(seed)
    prompts = [[rng.randint(0, vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]
    outs = [rng.randint(lo, hi) for _ in range(n)]
    return Recipe(prompts, outs)
