"""One step's decision (`Batch`) and the numbers the cost model needs (`BatchFeatures`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from twinserve.core.request import Req

# Decode batch sizes that get a CUDA graph: 1, 2, 4, then every multiple of 8.
_SMALL_GRAPH_SIZES = (1, 2, 4)


def padded_batch_size(n: int, max_graph_bs: int = 256) -> int:
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


def dense_layers(num_tokens: int, num_decodes: int, decode_only: bool, max_graph_bs: int = 256,
                 piecewise_max_tokens: int = 2048) -> tuple[int, bool]:
    """``(rows, eager)`` of a step's dense layers, as the engine's runner picks them: a decode
    graph's padded batch, else a piecewise graph's padded size, else the step's own tokens run
    eagerly (``eager`` is then true)."""
    if _decode_graph(num_decodes, decode_only, max_graph_bs):
        return padded_batch_size(num_decodes, max_graph_bs), False
    padded = padded_token_count(num_tokens, piecewise_max_tokens)
    return (padded, False) if padded else (num_tokens, True)


# Token-graph modes (the engine's ``token_graph_mode``), and the most sequences a step may have
# for ``hybrid`` to replay the whole-step graph: FlashInfer's CUDA-graph prefill plan of a graph
# of ``t`` tokens holds ``min(t, max_running)`` sequences, and above ``max_running`` tokens it
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
# tokens per sequence (mostly decodes) and is padded to at most ``max_running`` tokens: that
# graph's plan holds a sequence per token, so its tiles have 16 rows, as the eager plan's
# would (for a GQA group of 2; docs/engine.md has the measurements).
HYBRID_DECODE_HEAVY_TOKENS_PER_SEQ = 8


def decode_heavy_whole(num_seqs: int, num_tokens: int, padded_tokens: int, max_running: int,
                       decode_heavy: bool = True) -> bool:
    """Whether a token-graph step (``num_tokens`` over ``num_seqs`` sequences, padded to
    ``padded_tokens``) is decode-heavy within ``max_running`` tokens, so that ``hybrid`` replays
    it whole whatever its sequence count (``decode_heavy`` false: engines built before this)."""
    return (decode_heavy and padded_tokens <= max_running
            and 0 < num_tokens <= HYBRID_DECODE_HEAVY_TOKENS_PER_SEQ * num_seqs)


def hybrid_replays_whole(num_seqs: int, num_tokens: int, padded_tokens: int, max_running: int,
                         decode_heavy: bool = True, max_full_seqs: int = HYBRID_FULL_MAX_SEQS) -> bool:
    """Whether ``hybrid`` replays a token-graph step as its whole-step graph rather than the
    pieces: padded to at most `HYBRID_FULL_MAX_TOKENS` (the full graphs' largest size), and
    of at most ``max_full_seqs`` sequences or `decode_heavy_whole`."""
    return padded_tokens <= HYBRID_FULL_MAX_TOKENS and (num_seqs <= max_full_seqs or decode_heavy_whole(
        num_seqs, num_tokens, padded_tokens, max_running, decode_heavy))


def replays_one_graph(num_decodes: int, decode_only: bool, eager: bool, max_graph_bs: int = 256,
                      token_graph_mode: str = "full", num_seqs: int = 0, num_tokens: int = 0,
                      padded_tokens: int = 0, max_running: int = 256, decode_heavy: bool = True) -> bool:
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
        num_seqs, num_tokens, padded_tokens, max_running, decode_heavy))


def wide_tiles_of(replay: bool, decode_only: bool, num_decodes: int, padded_tokens: int,
                  max_graph_bs: int = 256, max_running: int = 256) -> bool:
    """Whether a step is a whole-step token graph whose attention plan uses 128-row query tiles:
    one replay (`replays_one_graph`) that is not a decode graph, padded to more tokens than
    the ``max_running`` sequences its FlashInfer wrapper holds. (FlashInfer's graph plan sizes
    its tiles from ``(tokens - sequences + 1) * gqa_group``: over 64, so 128-row tiles, for
    every padded size above 256 with 256 sequences and a GQA group of 2 or more.)"""
    return replay and not _decode_graph(num_decodes, decode_only, max_graph_bs) and padded_tokens > max_running


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


def graph_features(num_tokens: int, num_decodes: int, num_seqs: int, max_graph_bs: int = 256,
                   piecewise_max_tokens: int = 2048, token_graph_mode: str = "hybrid",
                   max_running: int = 256, decode_heavy: bool = True) -> tuple[int, int, int, int]:
    """``(padded_tokens, eager_step, graph_replay, wide_tiles)`` of a step of ``num_tokens``
    new tokens over ``num_seqs`` sequences, ``num_decodes`` of them decodes, on an engine with
    those settings (`dense_layers`, `replays_one_graph`, `wide_tiles_of`): the `BatchFeatures`
    fields that say how the engine runs the step, for `Batch.features` and the scheduler's
    decode stretches alike."""
    decode_only = num_decodes == num_seqs
    rows, eager = dense_layers(num_tokens, num_decodes, decode_only, max_graph_bs, piecewise_max_tokens)
    replay = replays_one_graph(num_decodes, decode_only, eager, max_graph_bs, token_graph_mode, num_seqs,
                               num_tokens, rows, max_running, decode_heavy)
    wide = wide_tiles_of(replay, decode_only, num_decodes, rows, max_graph_bs, max_running)
    return rows, int(eager), int(replay), int(wide)


PAD_STEP_MAX = 128  # the widest spacing of the token graphs' sizes (`padded_token_count`)


def padded_token_count(n: int, max_tokens: int = 2048) -> int:
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
class BatchFeatures:
    """Cost-model inputs of one step; the engine logs them, the simulator consumes them.

    Context lengths count the tokens a sequence attends to after this step (cached + new).
    ``prefill_attn`` is the exact number of causal query-key pairs of the prefill chunks:
    sum(new * start + new * (new + 1) / 2). ``decode_unique_ctx`` counts the decodes' context
    tokens once per distinct KV page: ``decode_ctx`` less the tokens of cached-prefix pages that
    another decode of the step reads too (read again, mostly from the L2 cache); left at -1 it
    means no sharing (``decode_ctx``). Invariant: ``0 <= decode_unique_ctx <= decode_ctx``.
    ``padded_tokens`` is the row count of the dense layers (GEMMs): ``padded_decodes`` for a
    decode graph, the piecewise-graph size (`padded_token_count`) for another step that has one,
    else ``new_tokens`` (the value it takes when left at -1). Invariant: ``padded_tokens >=
    new_tokens``. ``eager_step`` is 1 when the dense layers run without any CUDA graph (kernel
    by kernel: a much longer launch; `dense_layers`), else 0. ``graph_replay`` is 1 when the
    whole step is one CUDA-graph replay (`replays_one_graph`); left at -1 it takes the rule of
    profiles recorded before token graphs held the attention: a decode step with a padded
    batch. ``wide_tiles`` is 1 for such a replay of a prefill or mixed step padded to more
    tokens than ``max_running``: its FlashInfer graph plan (``max_running`` sequences) then gives
    every sequence a 128-row query tile, so each decode row computes a whole tile over its
    context (`wide_tiles_of`). ``attn_tile`` is the query-tile rows of the step's attention plan
    when it is planned outside a graph (`attn_tile_of`: 16, 64 or 128; 0 for a decode-only step
    or a whole-step replay). ``piece_step`` (derived, not a field: `piece_step_of`) is 1 for a
    step that is neither one replay nor eager: it runs the pieces.
    """

    num_seqs: int = 0
    num_decodes: int = 0
    num_prefills: int = 0
    new_tokens: int = 0
    prefill_tokens: int = 0
    decode_ctx: int = 0
    prefill_ctx: int = 0
    prefill_attn: int = 0
    padded_decodes: int = 0
    max_ctx: int = 0
    decode_unique_ctx: int = -1
    padded_tokens: int = -1
    eager_step: int = 0
    graph_replay: int = -1
    wide_tiles: int = 0
    attn_tile: int = 0

    @property
    def piece_step(self) -> int:
        """1 when the step runs the pieces (`piece_step_of`), else 0."""
        return piece_step_of(self.graph_replay, self.eager_step)

    def __post_init__(self) -> None:
        if self.graph_replay < 0:
            object.__setattr__(self, "graph_replay", int(self.num_prefills == 0 and self.padded_decodes > 0))
        if self.decode_unique_ctx < 0:
            object.__setattr__(self, "decode_unique_ctx", self.decode_ctx)
        if self.padded_tokens < 0:
            object.__setattr__(self, "padded_tokens", self.new_tokens)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return FEATURE_NAMES


FEATURE_NAMES: tuple[str, ...] = tuple(f.name for f in fields(BatchFeatures))
# Features derived from the fields, by the same formula on one step (`BatchFeatures`, the
# simulator's `FeatureScalars` and `FeatureColumns`) and on a profile's columns
# (`calibration.linear.with_derived_features`): calibration terms may read them too.
DERIVED_FEATURE_NAMES: tuple[str, ...] = ("piece_step",)


@dataclass(slots=True)
class Batch:
    """One step: which requests run and how many new tokens each computes.

    Invariants: all lists have one entry per request; ``starts[i]`` is the request's
    ``num_computed`` before the step; the request's token buffer holds ``starts[i] + new_tokens[i]``
    tokens or more; ``emits[i]`` is true when the step completes the request's known tokens, so
    one new token is sampled for it (its value arrives through ``Scheduler.complete``), and then
    ``out_pos[i]`` is that token's index among the request's outputs (else -1). ``is_decode[i]``
    marks one-token steps of a request that already has output. ``decode_shared_ctx``: tokens of
    the decodes' cached-prefix pages that more than one decode of the step reads, counted once
    per extra reader (set by the scheduler; 0 without a prefix cache). The graph fields after it
    are the engine's (`SchedulerConfig`), for `features`. ``drafts[i] = d > 0`` marks a
    speculative decode (core/spec_step.py): its ``1 + d`` new tokens are the last known token
    and ``d`` draft tokens, scored at every position; ``is_decode[i]`` is then false. None when
    no row speculates.
    """

    step: int
    reqs: list["Req"]
    starts: list[int]
    new_tokens: list[int]
    emits: list[bool]
    out_pos: list[int]
    is_decode: list[bool]
    max_graph_bs: int = 256
    decode_shared_ctx: int = 0
    piecewise_max_tokens: int = 2048
    token_graph_mode: str = "hybrid"
    max_running: int = 256
    hybrid_decode_heavy: bool = True
    gqa_group: int = 1
    drafts: list[int] | None = None

    def __len__(self) -> int:
        return len(self.reqs)

    @property
    def num_tokens(self) -> int:
        return sum(self.new_tokens)

    @property
    def decode_only(self) -> bool:
        return all(self.is_decode)

    def features(self) -> BatchFeatures:
        nd = 0
        decode_ctx = 0
        prefill_tokens = 0
        prefill_ctx = 0
        prefill_attn = 0
        max_ctx = 0
        for s, n, d in zip(self.starts, self.new_tokens, self.is_decode):
            ctx = s + n
            if ctx > max_ctx:
                max_ctx = ctx
            if d:
                nd += 1
                decode_ctx += ctx
            else:
                prefill_tokens += n
                prefill_ctx += ctx
                prefill_attn += n * s + n * (n + 1) // 2
        new_tokens = prefill_tokens + nd
        rows, eager, replay, wide = graph_features(new_tokens, nd, len(self.reqs), self.max_graph_bs,
                                                   self.piecewise_max_tokens, self.token_graph_mode,
                                                   self.max_running, self.hybrid_decode_heavy)
        return BatchFeatures(
            num_seqs=len(self.reqs),
            num_decodes=nd,
            num_prefills=len(self.reqs) - nd,
            new_tokens=new_tokens,
            prefill_tokens=prefill_tokens,
            decode_ctx=decode_ctx,
            prefill_ctx=prefill_ctx,
            prefill_attn=prefill_attn,
            padded_decodes=padded_batch_size(nd, self.max_graph_bs),
            max_ctx=max_ctx,
            decode_unique_ctx=decode_ctx - self.decode_shared_ctx,
            padded_tokens=rows,
            eager_step=eager,
            graph_replay=replay,
            wide_tiles=wide,
            attn_tile=attn_tile_of(replay, nd, len(self.reqs), new_tokens, self.gqa_group),
        )
