"""The graphs of prefill and mixed steps, per padded token count, selected by name.

- ``full`` (`StepGraphs`, engine/step_graph.py): the whole forward, attention included;
- ``piecewise`` (`PiecewiseGraphs`, engine/piecewise_graph.py): the dense layers between
  attention calls, the attention eager;
- ``hybrid`` (`HybridGraphs`): the pieces for every size, the full graphs for the sizes up to
  `core.graph_plan.HYBRID_FULL_MAX_TOKENS`; a step of at most `core.graph_plan.HYBRID_FULL_MAX_SEQS`
  sequences and that many tokens replays the full graph (its launch is what paces a small
  step), and so does a decode-heavy step of at most ``max_rows`` tokens
  (`core.graph_plan.decode_heavy_whole`: its plan's tiles are as small as the eager plan's); any
  other step replays the pieces (above ``max_rows`` tokens FlashInfer's graph plan would give
  each of its many decodes a 128-row query tile).

All pad a step of ``n`` tokens to ``core.graph_plan.padded_token_count(n, max_tokens)`` and are
driven by the runner as ``t = size_for(n)``; ``whole = plan(t, attention_inputs)`` (True when the
step will be one graph replay); ``forward(t, ids, positions, slots) -> hidden [n, H]``.
"""

from __future__ import annotations

from typing import Protocol

import torch

from twinserve.core.graph_plan import HYBRID_FULL_MAX_SEQS, HYBRID_FULL_MAX_TOKENS, MAX_RUNNING, hybrid_replays_whole
from twinserve.core.registry import Registry
from twinserve.engine.attention.base import AttentionBackend, AttentionInputs
from twinserve.engine.capture_log import CaptureLog
from twinserve.engine.kv_pool import KVPool
from twinserve.engine.models.decoder import CausalLM


class TokenGraphs(Protocol):
    """What the runner needs of a token-count graph set (see the module docstring)."""

    max_tokens: int
    sizes: list[int]

    def size_for(self, num_tokens: int) -> int: ...

    def plan(self, t: int, inputs: AttentionInputs) -> bool: ...

    def forward(self, t: int, ids: torch.Tensor, positions: torch.Tensor,
                slots: torch.Tensor) -> torch.Tensor: ...


TOKEN_GRAPHS: Registry[TokenGraphs] = Registry("token graph mode")
# Every factory takes (model, attn, pool, max_tokens, max_rows, stream, decode_heavy, log); only
# ``hybrid`` reads ``decode_heavy`` (`HybridGraphs`); ``log`` (a `CaptureLog`) orders and records
# the captures (`core.capture_schedule.TOKEN_SETS` lists the sets each mode builds, in order).


class HybridGraphs:
    """The full graphs for steps of at most ``max_full_seqs`` sequences and
    `core.graph_plan.HYBRID_FULL_MAX_TOKENS` padded tokens, or (``decode_heavy``) of few tokens per
    sequence padded to at most ``max_rows`` tokens (`core.graph_plan.hybrid_replays_whole`), the
    pieces otherwise.

    Invariants: ``forward`` runs the set that the last ``plan`` chose (the runner always calls
    them in pairs); the full set's sizes are the pieces' sizes up to its own cap, and every size
    the rule sends to it is among them; ``size_for`` is the pieces'.
    """

    def __init__(self, full: TokenGraphs, pieces: TokenGraphs, max_full_seqs: int = HYBRID_FULL_MAX_SEQS,
                 max_rows: int = MAX_RUNNING, decode_heavy: bool = True) -> None:
        if full.sizes != [t for t in pieces.sizes if t <= max(full.sizes)] or (
                max(full.sizes) < min(pieces.max_tokens, HYBRID_FULL_MAX_TOKENS)):
            raise ValueError("hybrid token graphs need the full set captured for the pieces' sizes up to "
                             f"min(their cap, {HYBRID_FULL_MAX_TOKENS})")
        self.full, self.pieces, self.max_full_seqs = full, pieces, max_full_seqs
        self.max_rows, self.decode_heavy = max_rows, decode_heavy
        self.max_tokens, self.sizes = pieces.max_tokens, pieces.sizes
        self._chosen: TokenGraphs = full

    @property
    def graphs(self) -> dict:
        """Every captured graph of both sets (for counts)."""
        return {**{("full", k): g for k, g in self.full.graphs.items()},  # type: ignore[attr-defined]
                **{("pieces", k): g for k, g in self.pieces.graphs.items()}}  # type: ignore[attr-defined]

    def size_for(self, num_tokens: int) -> int:
        return self.pieces.size_for(num_tokens)

    def plan(self, t: int, inputs: AttentionInputs) -> bool:
        whole = hybrid_replays_whole(inputs.batch_size, inputs.num_tokens, t, self.max_rows, self.decode_heavy,
                                     self.max_full_seqs)
        self._chosen = self.full if whole else self.pieces
        return self._chosen.plan(t, inputs)

    def forward(self, t: int, ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        return self._chosen.forward(t, ids, positions, slots)


@TOKEN_GRAPHS.register("full")
def _full(model: CausalLM, attn: AttentionBackend, pool: KVPool, max_tokens: int, max_rows: int,
          stream: "torch.cuda.Stream | None" = None, decode_heavy: bool = True,
          log: CaptureLog | None = None) -> TokenGraphs:
    from twinserve.engine.step_graph import StepGraphs

    return StepGraphs(model, attn, pool, max_tokens, max_rows, stream=stream, log=log)


@TOKEN_GRAPHS.register("piecewise")
def _piecewise(model: CausalLM, attn: AttentionBackend, pool: KVPool, max_tokens: int, max_rows: int,
               stream: "torch.cuda.Stream | None" = None, decode_heavy: bool = True,
               log: CaptureLog | None = None) -> TokenGraphs:
    from twinserve.engine.piecewise_graph import PiecewiseGraphs

    return PiecewiseGraphs(model, attn, max_tokens, stream=stream, log=log)


@TOKEN_GRAPHS.register("hybrid")
def _hybrid(model: CausalLM, attn: AttentionBackend, pool: KVPool, max_tokens: int, max_rows: int,
            stream: "torch.cuda.Stream | None" = None, decode_heavy: bool = True,
            log: CaptureLog | None = None) -> TokenGraphs:
    full = _full(model, attn, pool, min(max_tokens, HYBRID_FULL_MAX_TOKENS), max_rows, stream, log=log)
    return HybridGraphs(full, _piecewise(model, attn, pool, max_tokens, max_rows, stream, log=log),
                        max_rows=max_rows, decode_heavy=decode_heavy)
