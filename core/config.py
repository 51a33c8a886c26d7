"""`SchedulerConfig`: batch-formation knobs and the size of the page pool."""

from __future__ import annotations

from dataclasses import dataclass

from twinserve.core.batch import TOKEN_GRAPH_MODES


@dataclass(slots=True)
class SchedulerConfig:
    """Batch formation and memory geometry; policies are chosen separately, by name.

    - ``max_num_batched_tokens``: token budget of one step (prefill chunk tokens + one per decode).
    - ``max_running``: most requests holding KV at once.
    - ``chunked_prefill`` / ``chunk_size``: split long prompts into chunks of at most
      ``chunk_size`` tokens; without it a prompt is prefilled whole (so it must fit the budget).
    - ``mixed``: decodes and prefill chunks share a step; if false, prefill-first: a step is all
      prefill whenever a prefill can run, otherwise all decode.
    - ``page_size`` × ``num_pages``: the KV pool, in tokens per page and pages.
    - ``max_model_len``: longest prompt + output a request may have; longer ones are rejected.
    - ``max_graph_bs``: largest CUDA-graph decode batch (for padded-batch features).
    - ``piecewise_max_tokens``: largest other step that replays a token graph, padded
      (`batch.padded_token_count`; 0: none), for the ``padded_tokens`` feature;
      ``token_graph_mode``: "full" (the attention inside those graphs, so such a step is one
      replay), "piecewise" (the attention eager between graphs) or "hybrid" (full for steps
      of at most `batch.HYBRID_FULL_MAX_SEQS` sequences and `batch.HYBRID_FULL_MAX_TOKENS`
      tokens), for ``graph_replay``;
      ``hybrid_decode_heavy``: ``hybrid`` also replays whole the decode-heavy steps of at most
      ``max_running`` tokens (`batch.hybrid_replays_whole`; false for engines built before it).
    - ``gqa_group``: query heads per KV head on one rank, for the ``attn_tile`` feature
      (`batch.attn_tile_of`); the backends set it from the model (`ModelShape.gqa_group`).
    """

    max_num_batched_tokens: int = 8192
    max_running: int = 256
    chunked_prefill: bool = True
    chunk_size: int = 8192
    mixed: bool = True
    page_size: int = 16
    num_pages: int = 8192
    max_model_len: int = 32768
    max_graph_bs: int = 256
    piecewise_max_tokens: int = 2048
    token_graph_mode: str = "hybrid"
    hybrid_decode_heavy: bool = True
    gqa_group: int = 1

    def validate(self) -> None:
        if self.token_graph_mode not in TOKEN_GRAPH_MODES:
            raise ValueError(f"SchedulerConfig.token_graph_mode must be one of {TOKEN_GRAPH_MODES}, "
                             f"got {self.token_graph_mode!r}")
        for name in ("max_num_batched_tokens", "max_running", "chunk_size", "page_size", "num_pages",
                     "max_model_len", "gqa_group"):
            if getattr(self, name) < 1:
                raise ValueError(f"SchedulerConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.chunk_size > self.max_num_batched_tokens:
            self.chunk_size = self.max_num_batched_tokens

    @property
    def capacity_tokens(self) -> int:
        return self.page_size * self.num_pages
