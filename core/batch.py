"""One step's decision (`Batch`) and the numbers the cost model needs (`BatchFeatures`).

How the engine runs a step (its graphs) is not the scheduler's decision: `Batch.features` takes
the backend's `GraphPlan` (core/graph_plan.py)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from twinserve.core.graph_plan import GraphPlan, piece_step_of

if TYPE_CHECKING:
    from twinserve.core.request import Req


def verify_step_of(verify_rows: Any) -> Any:
    """1 where a step has rows that verify a draft (``verify_rows > 0``), else 0; on ints,
    floats or arrays. Such a step's launch scores every draft position and waits for the
    tokens before the next step is formed, so its host work differs from a plain step's."""
    return (verify_rows > 0) * 1


def prompt_rows_of(num_prefills: Any, verify_rows: Any) -> Any:
    """Rows of a step that compute a prompt chunk: its prefill rows less those that verify a
    draft (a verify row is counted among the prefills); on ints, floats or arrays. After
    launching such a row, a speculating engine's loop checks whether the request may draft."""
    return num_prefills - verify_rows


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
    step that is neither one replay nor eager: it runs the pieces. ``verify_rows`` counts the
    rows that verify a draft (speculative decoding, ``Batch.drafts``); ``verify_step``
    (derived) is 1 when there is one, and ``prompt_rows`` (derived) counts the prefill rows that
    are not verify rows. ``first_decodes`` counts the decode rows that are their request's first
    decode (the step samples its second output token): an engine launches those with more host
    work. Invariant: ``0 <= first_decodes <= num_decodes``.
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
    verify_rows: int = 0
    first_decodes: int = 0

    @property
    def piece_step(self) -> int:
        """1 when the step runs the pieces (`piece_step_of`), else 0."""
        return piece_step_of(self.graph_replay, self.eager_step)

    @property
    def verify_step(self) -> int:
        """1 when a row of the step verifies a draft (`verify_step_of`), else 0."""
        return verify_step_of(self.verify_rows)

    @property
    def prompt_rows(self) -> int:
        """Prefill rows that compute a prompt chunk (`prompt_rows_of`)."""
        return prompt_rows_of(self.num_prefills, self.verify_rows)

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
DERIVED_FEATURE_NAMES: tuple[str, ...] = ("piece_step", "verify_step", "prompt_rows")


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
    per extra reader (set by the scheduler; 0 without a prefix cache). ``drafts[i] = d > 0`` marks a
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
    decode_shared_ctx: int = 0
    drafts: list[int] | None = None

    def __len__(self) -> int:
        return len(self.reqs)

    @property
    def num_tokens(self) -> int:
        return sum(self.new_tokens)

    @property
    def decode_only(self) -> bool:
        return all(self.is_decode)

    def features(self, plan: GraphPlan) -> BatchFeatures:
        """The step's cost-model inputs, its graph fields as ``plan`` runs it."""
        nd = 0
        first = 0
        decode_ctx = 0
        prefill_tokens = 0
        prefill_ctx = 0
        prefill_attn = 0
        max_ctx = 0
        for r, s, n, d in zip(self.reqs, self.starts, self.new_tokens, self.is_decode):
            ctx = s + n
            if ctx > max_ctx:
                max_ctx = ctx
            if d:
                nd += 1
                decode_ctx += ctx
                if r.num_tokens - r.prompt_len == 2:  # its first output and this step's placeholder
                    first += 1
            else:
                prefill_tokens += n
                prefill_ctx += ctx
                prefill_attn += n * s + n * (n + 1) // 2
        new_tokens = prefill_tokens + nd
        rows, eager, replay, wide = plan.step_shape(new_tokens, nd, len(self.reqs))
        return BatchFeatures(
            num_seqs=len(self.reqs),
            num_decodes=nd,
            num_prefills=len(self.reqs) - nd,
            new_tokens=new_tokens,
            prefill_tokens=prefill_tokens,
            decode_ctx=decode_ctx,
            prefill_ctx=prefill_ctx,
            prefill_attn=prefill_attn,
            padded_decodes=plan.padded_decodes(nd),
            max_ctx=max_ctx,
            decode_unique_ctx=decode_ctx - self.decode_shared_ctx,
            padded_tokens=rows,
            eager_step=eager,
            graph_replay=replay,
            wide_tiles=wide,
            attn_tile=plan.attn_tile(replay, nd, len(self.reqs), new_tokens),
            verify_rows=0 if self.drafts is None else sum(1 for d in self.drafts if d > 0),
            first_decodes=first,
        )
