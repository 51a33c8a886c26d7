"""`GraphPlan`: how the engine runs a step (CUDA graphs, token graphs, attention tiles), and its rules.

The engine builds one plan from its config and the model, captures its graphs by it and records
each step's features under it; the simulator's backend builds the same plan from the run config,
and its step features (hence the cost model's inputs) follow the same rules. Pure Python: the
simulator and the calibration import it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from twinserve.core.config import scheduler_default

# The plan's defaults, named by the rules' keyword defaults and by `GraphPlan`'s fields alike.
MAX_GRAPH_BS = 256
PIECEWISE_MAX_TOKENS = 2048
TOKEN_GRAPH_MODE = "hybrid"
MAX_RUNNING: int = scheduler_default("max_running")

# Decode batch sizes that get a CUDA graph: 1, 2, 4, then every multiple of 8.
_SMALL_GRAPH_SIZES = (1, 2, 4)


def padded_batch_size(n: int, max_graph_bs: int = MAX_GRAPH_BS) -> int:
    """The decode batch size a CUDA-graph runner pads ``n`` sequences to.

    Sizes 1, 2, 4 and the multiples of 8 up to ``max_graph_bs`` are captured; larger batches run
    eagerly at their own size. The engine's runner and the cost model both call this function.
    """
    if n <= 0:
        return 0
    if n > max_graph_bs:
        return n
    for s in _SMALL_GRAPH_SIZES:
        if n <= s:
            return s
    return -(-n // 8) * 8


def _decode_graph(num_decodes: int, decode_only: bool, max_graph_bs: int) -> bool:
    """Whether the engine replays the step as a decode graph (the runner's rule)."""
    return decode_only and 0 < num_decodes <= max_graph_bs


def dense_layers(num_tokens: int, num_decodes: int, decode_only: bool, max_graph_bs: int = MAX_GRAPH_BS,
                 piecewise_max_tokens: int = PIECEWISE_MAX_TOKENS) -> tuple[int, bool]:
    """``(rows, eager)`` of a step's dense layers, as the engine's runner picks them: a decode
    graph's padded batch, else a piecewise graph's padded size, else the step's own tokens run
    eagerly (``eager`` is then true)."""
    if _decode_graph(num_decodes, decode_only, max_graph_bs):
        return padded_batch_size(num_decodes, max_graph_bs), False
    padded = padded_token_count(num_tokens, piecewise_max_tokens)
    return (padded, False) if padded else (num_tokens, True)


# Token-graph modes (the engine's ``token_graph_mode``), and the most sequences a step may have
# for ``hybrid`` to replay the whole-step graph: FlashInfer's CUDA-graph prefill plan of a graph
# of ``t`` tokens holds ``min(t, graph_rows)`` sequences (`GraphPlan.graph_rows`, at least
# ``max_running``), and above ``graph_rows`` tokens it
# gives every sequence a query tile of 128 rows, so a step with many decodes does more
# attention work there than in the eager plan, while its launch is hidden by the device anyway.
TOKEN_GRAPH_MODES = ("full", "piecewise", "hybrid")
HYBRID_FULL_MAX_SEQS = 32
# ... and the most (padded) tokens: above them a step's device work outlasts the pieces' launch
# (a few ms), and the whole-step graph's attention, which always splits the KV, was slower than
# the eager attention (a 7,000-token prompt: 5.6 % more device time on the H200). ``hybrid``
# captures its whole-step graphs only up to this size.
HYBRID_FULL_MAX_TOKENS = 2048
# ``hybrid`` also replays whole a step of more sequences when it has at most this many new
# tokens per sequence (mostly decodes) and is padded to at most ``graph_rows`` tokens: that
# graph's plan holds a sequence per token, so its tiles have 16 rows, as the eager plan's
# would (for a GQA group of 2; docs/engine.md has the measurements).
HYBRID_DECODE_HEAVY_TOKENS_PER_SEQ = 8


def decode_heavy_whole(num_seqs: int, num_tokens: int, padded_tokens: int, graph_rows: int,
                       decode_heavy: bool = True) -> bool:
    """Whether a token-graph step (``num_tokens`` over ``num_seqs`` sequences, padded to
    ``padded_tokens``) is decode-heavy within ``graph_rows`` tokens, so that ``hybrid`` replays
    it whole whatever its sequence count (never with ``decode_heavy`` false)."""
    return (decode_heavy and padded_tokens <= graph_rows
            and 0 < num_tokens <= HYBRID_DECODE_HEAVY_TOKENS_PER_SEQ * num_seqs)


def hybrid_replays_whole(num_seqs: int, num_tokens: int, padded_tokens: int, graph_rows: int,
                         decode_heavy: bool = True, max_full_seqs: int = HYBRID_FULL_MAX_SEQS) -> bool:
    """Whether ``hybrid`` replays a token-graph step as its whole-step graph rather than the
    pieces: padded to at most `HYBRID_FULL_MAX_TOKENS` (the full graphs' largest size), and
    of at most ``max_full_seqs`` sequences or `decode_heavy_whole`."""
    return padded_tokens <= HYBRID_FULL_MAX_TOKENS and (num_seqs <= max_full_seqs or decode_heavy_whole(
        num_seqs, num_tokens, padded_tokens, graph_rows, decode_heavy))


def replays_one_graph(num_decodes: int, decode_only: bool, eager: bool, max_graph_bs: int = MAX_GRAPH_BS,
                      token_graph_mode: str = "full", num_seqs: int = 0, num_tokens: int = 0,
                      padded_tokens: int = 0, graph_rows: int = MAX_RUNNING, decode_heavy: bool = True) -> bool:
    """Whether the engine runs a step as one CUDA-graph replay: a decode graph, or a token graph
    of mode ``full`` (attention inside; ``piecewise`` token graphs leave it eager between
    pieces; ``hybrid`` takes the full one by `hybrid_replays_whole`, else the pieces).
    ``eager`` is `dense_layers`' flag. Such a step's device work starts only once the replay is
    enqueued, at the end of its launch."""
    if _decode_graph(num_decodes, decode_only, max_graph_bs):
        return True
    if eager:
        return False
    return token_graph_mode == "full" or (token_graph_mode == "hybrid" and hybrid_replays_whole(
        num_seqs, num_tokens, padded_tokens, graph_rows, decode_heavy))


def wide_tiles_of(replay: bool, decode_only: bool, num_decodes: int, padded_tokens: int,
                  max_graph_bs: int = MAX_GRAPH_BS, graph_rows: int = MAX_RUNNING) -> bool:
    """Whether a step is a whole-step token graph whose attention plan uses 128-row query tiles:
    one replay (`replays_one_graph`) that is not a decode graph, padded to more tokens than
    the ``graph_rows`` sequences its FlashInfer wrapper holds. (FlashInfer's graph plan sizes
    its tiles from ``(tokens - sequences + 1) * gqa_group``: over 64, so 128-row tiles, for
    every padded size above 256 with 256 sequences and a GQA group of 2 or more.)"""
    return replay and not _decode_graph(num_decodes, decode_only, max_graph_bs) and padded_tokens > graph_rows


def attn_tile_of(graph_replay: Any, num_decodes: Any, num_seqs: Any, num_tokens: Any, gqa_group: int) -> Any:
    """The query-tile rows that FlashInfer's prefill plan (fa2) gives every sequence of a step
    whose attention it plans outside a CUDA graph: a step with prefill rows that is not one
    whole-step replay (it runs the pieces, or no graph). The plan sizes its tiles from the
    average packed query length, ``num_tokens * gqa_group // num_seqs`` (``num_seqs >= 1``):
    128 rows over 64, 64 rows over 16, else 16; each decode of the step then computes a whole
    tile over its context. 0 for a decode-only step (the decode kernel) and for a whole-step
    replay (its graph plan: `wide_tiles_of`). On ints or arrays alike."""
    avg = (num_tokens * gqa_group) // num_seqs
    tile = 16 + 48 * (avg > 16) + 64 * (avg > 64)
    return (1 - graph_replay) * (num_decodes < num_seqs) * tile


def graph_features(num_tokens: int, num_decodes: int, num_seqs: int, max_graph_bs: int = MAX_GRAPH_BS,
                   piecewise_max_tokens: int = PIECEWISE_MAX_TOKENS, token_graph_mode: str = TOKEN_GRAPH_MODE,
                   graph_rows: int = MAX_RUNNING, decode_heavy: bool = True) -> tuple[int, int, int, int]:
    """``(padded_tokens, eager_step, graph_replay, wide_tiles)`` of a step of ``num_tokens``
    new tokens over ``num_seqs`` sequences, ``num_decodes`` of them decodes, on an engine with
    those settings (`dense_layers`, `replays_one_graph`, `wide_tiles_of`): the `BatchFeatures`
    fields that say how the engine runs the step, for `Batch.features` and the simulator's
    decode stretches alike. ``graph_rows``: the sequences the whole-step graphs hold (`GraphPlan.graph_rows`)."""
    decode_only = num_decodes == num_seqs
    rows, eager = dense_layers(num_tokens, num_decodes, decode_only, max_graph_bs, piecewise_max_tokens)
    replay = replays_one_graph(num_decodes, decode_only, eager, max_graph_bs, token_graph_mode, num_seqs,
                               num_tokens, rows, graph_rows, decode_heavy)
    wide = wide_tiles_of(replay, decode_only, num_decodes, rows, max_graph_bs, graph_rows)
    return rows, int(eager), int(replay), int(wide)


PAD_STEP_MAX = 128  # the widest spacing of the token graphs' sizes (`padded_token_count`)


def padded_token_count(n: int, max_tokens: int = PIECEWISE_MAX_TOKENS) -> int:
    """The token count a piecewise-CUDA-graph step of ``n`` tokens is padded to (0: none).

    Steps that are not replayed as a decode graph and have ``1 <= n <= max_tokens`` tokens run
    their dense layers as graphs captured for ``n`` rounded up to a multiple of
    ``next_pow2(n) / 16`` held between 16 and 128 (under 1/8 padding above 128 tokens, and
    under 128 tokens, 1/16 of ``n``, above 2,048, where a step's dense layers cost too much to
    pad by more); larger steps, and every step when ``max_tokens`` is 0, run eagerly. The
    engine's runner uses this rule.
    """
    if n <= 0 or n > max_tokens:
        return 0
    step = min(PAD_STEP_MAX, max(16, (1 << (n - 1).bit_length()) // 16))
    return -(-n // step) * step


def piece_step_of(graph_replay: Any, eager_step: Any) -> Any:
    """1 for a step that runs its dense layers as captured pieces with the attention eager
    between them (neither one whole-graph replay nor kernel by kernel), else 0:
    ``1 - graph_replay - eager_step`` (the two are never both 1), on ints, floats or arrays.
    Its launch is one graph replay per piece and one attention call per layer, so its host
    work differs from both other kinds."""
    return 1 - graph_replay - eager_step


@dataclass(frozen=True, slots=True)
class GraphPlan:
    """The execution shape of an engine: which steps replay which CUDA graph.

    - ``max_graph_bs``: largest decode batch with a captured graph (`padded_batch_size`).
    - ``piecewise_max_tokens``: largest other step that replays a token graph, padded
      (`padded_token_count`); 0: none (an engine without graphs).
    - ``token_graph_mode``: one of `TOKEN_GRAPH_MODES`: "full" (the attention inside those
      graphs, so such a step is one replay), "piecewise" (the attention eager between graphs)
      or "hybrid" (full for steps of at most `HYBRID_FULL_MAX_SEQS` sequences and
      `HYBRID_FULL_MAX_TOKENS` tokens, `hybrid_replays_whole`).
    - ``hybrid_decode_heavy``: ``hybrid`` also replays whole the decode-heavy steps of at most
      ``graph_rows`` tokens (`decode_heavy_whole`; false: those steps take the pieces).
    - ``max_running``: the sequences the attention plans hold (the scheduler's ``max_running``).
    - ``token_graph_rows``: the sequences each whole-step token graph's attention plan holds is
      ``graph_rows = max(max_running, token_graph_rows)`` (0: ``max_running``). FlashInfer's
      graph plan has a fixed batch, and a step padded to at most that many tokens gets 16-row
      query tiles, so more rows let larger decode-heavy steps replay whole (`decode_heavy_whole`).
    - ``gqa_group``: query heads per KV head on one rank, for the ``attn_tile`` feature
      (`attn_tile_of`; `ModelShape.gqa_group`).

    Invariants (checked at construction): the mode is known, the sizes are >= 0 and the GQA
    group and ``max_running`` >= 1, ``token_graph_rows`` >= 0. Frozen: a backend that changes how it runs builds a new plan.
    """

    max_graph_bs: int = MAX_GRAPH_BS
    piecewise_max_tokens: int = PIECEWISE_MAX_TOKENS
    token_graph_mode: str = TOKEN_GRAPH_MODE
    hybrid_decode_heavy: bool = True
    max_running: int = MAX_RUNNING
    gqa_group: int = 1
    token_graph_rows: int = 0

    def __post_init__(self) -> None:
        if self.token_graph_mode not in TOKEN_GRAPH_MODES:
            raise ValueError(f"token_graph_mode must be one of {TOKEN_GRAPH_MODES}, got {self.token_graph_mode!r}")
        for name in ("max_graph_bs", "piecewise_max_tokens", "token_graph_rows"):
            if getattr(self, name) < 0:
                raise ValueError(f"GraphPlan.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("max_running", "gqa_group"):
            if getattr(self, name) < 1:
                raise ValueError(f"GraphPlan.{name} must be >= 1, got {getattr(self, name)}")

    @classmethod
    def from_knobs(cls, knobs: Mapping[str, Any], **over: Any) -> "GraphPlan":
        """The plan of a run config's knobs (the keys that name its fields, None: the default),
        ``over`` set last."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in knobs.items() if k in names and v is not None}
        values.update(over)
        return cls(**{k: type(getattr(DEFAULT_PLAN, k))(v) for k, v in values.items()})

    @property
    def graph_rows(self) -> int:
        """The sequences a whole-step token graph holds: ``max(max_running, token_graph_rows)``."""
        return max(self.max_running, self.token_graph_rows)

    def without_token_graphs(self) -> "GraphPlan":
        """This plan on an engine that replays no token graphs."""
        return replace(self, piecewise_max_tokens=0)

    def padded_decodes(self, n: int) -> int:
        """`padded_batch_size` of ``n`` decodes."""
        return padded_batch_size(n, self.max_graph_bs)

    def step_shape(self, num_tokens: int, num_decodes: int, num_seqs: int) -> tuple[int, int, int, int]:
        """`graph_features` of a step under this plan: ``(padded_tokens, eager_step,
        graph_replay, wide_tiles)``."""
        return graph_features(num_tokens, num_decodes, num_seqs, self.max_graph_bs, self.piecewise_max_tokens,
                              self.token_graph_mode, self.graph_rows, self.hybrid_decode_heavy)

    def attn_tile(self, graph_replay: Any, num_decodes: Any, num_seqs: Any, num_tokens: Any) -> Any:
        """`attn_tile_of` with this plan's GQA group."""
        return attn_tile_of(graph_replay, num_decodes, num_seqs, num_tokens, self.gqa_group)


DEFAULT_PLAN = GraphPlan()  # frozen: the defaults that other configs name instead of repeating them
