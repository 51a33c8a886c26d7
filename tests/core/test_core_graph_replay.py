"""Which steps the engine runs as one CUDA-graph replay (`core.graph_plan.replays_one_graph`), the
``graph_replay`` feature the scheduler records for the simulator's host model, and the query
tiles of the steps whose attention is planned outside a graph (``attn_tile``)."""

from __future__ import annotations

import numpy as np
import pytest

from twinserve.core.batch import BatchFeatures
from twinserve.core.graph_plan import HYBRID_FULL_MAX_SEQS, GraphPlan, replays_one_graph


@pytest.mark.parametrize("mode,seqs,want", [
    ("full", 100, True), ("piecewise", 3, False),
    ("hybrid", HYBRID_FULL_MAX_SEQS, True), ("hybrid", HYBRID_FULL_MAX_SEQS + 1, False),
])
def test_token_graph_steps_replay_whole_by_mode(mode, seqs, want):
    assert replays_one_graph(seqs - 1, False, False, 256, mode, seqs) is want
    assert replays_one_graph(seqs - 1, False, True, 256, mode, seqs) is False  # eager: no graph


def test_decode_graphs_are_one_replay_in_every_mode():
    for mode in ("full", "piecewise", "hybrid"):
        assert replays_one_graph(64, True, False, 256, mode, 64)
        # more decodes than the largest decode graph: a token graph, whole only in some modes
        assert replays_one_graph(300, True, False, 256, mode, 300) is (mode == "full")


def test_features_left_unset_take_the_older_rule():
    assert BatchFeatures(num_seqs=8, num_decodes=8, padded_decodes=8, new_tokens=8).graph_replay == 1
    assert BatchFeatures(num_seqs=2, num_decodes=1, num_prefills=1, padded_decodes=1,
                         new_tokens=40).graph_replay == 0
    assert BatchFeatures(num_seqs=2, num_prefills=2, new_tokens=40, graph_replay=1).graph_replay == 1


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="token_graph_mode"):
        GraphPlan(token_graph_mode="whole")


def test_wide_tiles_mark_whole_step_graphs_above_the_sequence_count():
    from twinserve.core.graph_plan import wide_tiles_of

    assert wide_tiles_of(True, False, 10, 288, 256, 256)       # a mixed whole-step graph of 288 tokens
    assert not wide_tiles_of(True, False, 10, 256, 256, 256)   # 256 tokens over 256 rows: narrow tiles
    assert not wide_tiles_of(False, False, 10, 288, 256, 256)  # the pieces: attention planned eagerly
    assert not wide_tiles_of(True, True, 200, 288, 256, 256)   # a decode graph
    assert wide_tiles_of(True, True, 300, 320, 256, 256)       # decodes beyond the graphs, whole
    assert wide_tiles_of(True, False, 3, 48, 256, 32)          # a smaller running cap


def test_the_features_mark_wide_tiles_for_large_whole_steps():
    from twinserve.core.batch import Batch

    class R:  # just what Batch.features reads
        num_tokens = prompt_len = 0

    reqs = [R() for _ in range(3)]
    b = Batch(0, reqs, [0, 100, 200], [400, 1, 1], [True] * 3, [0] * 3, [False, True, True])
    f = b.features(GraphPlan(token_graph_mode="full"))
    assert (f.padded_tokens, f.graph_replay, f.wide_tiles) == (416, 1, 1)
    g = b.features(GraphPlan(token_graph_mode="piecewise"))
    assert (g.graph_replay, g.wide_tiles) == (0, 0)


def test_hybrid_replays_decode_heavy_steps_within_the_running_cap_whole():
    from twinserve.core.graph_plan import HYBRID_DECODE_HEAVY_TOKENS_PER_SEQ, decode_heavy_whole, wide_tiles_of

    k = HYBRID_DECODE_HEAVY_TOKENS_PER_SEQ
    assert decode_heavy_whole(40, k * 40, 256, 256) and not decode_heavy_whole(40, k * 40 + 1, 256, 256)
    assert not decode_heavy_whole(40, 200, 288, 256)   # padded above the running cap: 128-row tiles
    assert not decode_heavy_whole(40, 200, 256, 256, decode_heavy=False)
    # hybrid: 100 sequences of 2 tokens each (padded to 208) replay whole, of 20 each in pieces
    assert replays_one_graph(99, False, False, 256, "hybrid", 100, 200, 208, 256)
    assert not replays_one_graph(99, False, False, 256, "hybrid", 100, 2000, 2048, 256)
    assert not replays_one_graph(99, False, False, 256, "hybrid", 100, 200, 208, 256, decode_heavy=False)
    assert not replays_one_graph(99, False, False, 256, "hybrid", 100, 300, 320, 256)
    assert replays_one_graph(99, False, False, 256, "hybrid", 20, 2000, 2048, 256)  # few sequences
    # within the cap the graph's plan holds a sequence per token: no wide tiles
    assert not wide_tiles_of(True, False, 99, 208, 256, 256)


def test_the_plans_decode_heavy_flag_and_running_cap_reach_the_features():
    from twinserve.core.batch import Batch

    class R:  # just what Batch.features reads
        num_tokens = prompt_len = 0

    reqs = [R() for _ in range(40)]
    args = (0, reqs, [100] * 39 + [0], [1] * 39 + [200], [True] * 40, [0] * 40, [True] * 39 + [False])
    f = Batch(*args).features(GraphPlan(token_graph_mode="hybrid"))
    assert (f.new_tokens, f.padded_tokens, f.graph_replay, f.wide_tiles) == (239, 240, 1, 0)
    g = Batch(*args).features(GraphPlan(token_graph_mode="hybrid", hybrid_decode_heavy=False))
    assert (g.graph_replay, g.wide_tiles) == (0, 0)
    h = Batch(*args).features(GraphPlan(token_graph_mode="hybrid", max_running=128))  # 240 tokens > 128
    assert h.graph_replay == 0


def test_wider_token_graphs_replay_larger_decode_heavy_steps_whole():
    """``token_graph_rows`` above ``max_running``: a step of 200 decodes and a 100-token prompt
    chunk (300 tokens, padded to 320) replays whole, without wide tiles, where graphs of
    ``max_running`` rows send it to the pieces; below ``max_running`` the cap still holds."""
    from twinserve.core.batch import Batch

    class R:  # just what Batch.features reads
        num_tokens = prompt_len = 0

    reqs = [R() for _ in range(201)]
    args = (0, reqs, [100] * 200 + [0], [1] * 200 + [100], [True] * 201, [0] * 201, [True] * 200 + [False])
    narrow = GraphPlan(token_graph_mode="hybrid", max_running=256)
    wide = GraphPlan(token_graph_mode="hybrid", max_running=256, token_graph_rows=320)
    assert (narrow.graph_rows, wide.graph_rows) == (256, 320)
    assert GraphPlan(max_running=256, token_graph_rows=128).graph_rows == 256
    f, g = Batch(*args).features(narrow), Batch(*args).features(wide)
    assert (f.padded_tokens, f.graph_replay) == (320, 0)
    assert (g.padded_tokens, g.graph_replay, g.wide_tiles) == (320, 1, 0)
    with pytest.raises(ValueError):
        GraphPlan(token_graph_rows=-1)


def test_piece_step_marks_the_steps_that_run_the_pieces():
    """`piece_step` is 1 exactly when a step is neither one graph replay nor eager: hybrid's
    steps of many sequences that are not decode-heavy, piecewise token-graph steps."""
    from twinserve.core.batch import Batch
    from twinserve.core.graph_plan import piece_step_of

    class R:  # just what Batch.features reads
        num_tokens = prompt_len = 0

    def feats(n_dec: int, prefill: int, mode: str = "hybrid") -> BatchFeatures:
        reqs = [R() for _ in range(n_dec + 1)]
        return Batch(0, reqs, [100] * n_dec + [0], [1] * n_dec + [prefill], [True] * (n_dec + 1),
                     [0] * (n_dec + 1), [True] * n_dec + [False]).features(GraphPlan(token_graph_mode=mode))

    whole = feats(HYBRID_FULL_MAX_SEQS - 1, 300)       # few sequences: one replay
    pieces = feats(HYBRID_FULL_MAX_SEQS + 10, 300)     # many, not decode-heavy: the pieces
    eager = feats(HYBRID_FULL_MAX_SEQS + 10, 3000)     # above the largest token graph: eager
    assert [(f.graph_replay, f.eager_step, f.piece_step) for f in (whole, pieces, eager)] == [
        (1, 0, 0), (0, 0, 1), (0, 1, 0)]
    assert feats(40, 300, "piecewise").piece_step == 1 and feats(40, 300, "full").piece_step == 0
    decode = BatchFeatures(num_seqs=8, num_decodes=8, padded_decodes=8, new_tokens=8)
    assert decode.piece_step == 0
    assert piece_step_of(1.0, 0.0) == 0.0 and piece_step_of(0, 0) == 1


def test_hybrid_replays_whole_only_up_to_its_full_graphs_largest_size():
    """Above `core.graph_plan.HYBRID_FULL_MAX_TOKENS` padded tokens no step is whole in ``hybrid``,
    neither one of few sequences nor a decode-heavy one (a ``max_running`` above that size)."""
    from twinserve.core.graph_plan import HYBRID_FULL_MAX_TOKENS, hybrid_replays_whole

    top = HYBRID_FULL_MAX_TOKENS
    assert hybrid_replays_whole(1, top, top, 256) and not hybrid_replays_whole(1, top + 100, top + 128, 256)
    assert hybrid_replays_whole(top // 4, top, top, 4096)  # decode-heavy (4 tokens a sequence)
    assert not hybrid_replays_whole(top // 2, top + 100, top + 128, 4096)


@pytest.mark.parametrize("tokens,seqs,group,want", [
    (8, 1, 2, 16),      # 16 packed rows: 16-row tiles
    (9, 1, 2, 64),      # 18: over 16
    (32, 1, 2, 64),     # 64: not over 64
    (33, 1, 2, 128),    # 66
    (300, 101, 2, 16),  # a decode-heavy step: 600 // 101 = 5
    (8292, 104, 2, 128),
    (300, 101, 4, 16),  # the same step under a GQA group of 4: 1200 // 101 = 11
    (300, 11, 4, 128),  # 1200 // 11 = 109
])
def test_attn_tile_follows_flashinfers_plan_rule(tokens, seqs, group, want):
    from twinserve.core.graph_plan import attn_tile_of

    decodes = seqs - 1
    assert attn_tile_of(0, decodes, seqs, tokens, group) == want
    assert attn_tile_of(1, decodes, seqs, tokens, group) == 0       # a whole-step replay: its graph plan
    assert attn_tile_of(0, seqs, seqs, seqs, group) == 0            # decode only: the decode kernel
    arr = attn_tile_of(np.array([0, 1]), np.array([decodes] * 2), np.array([seqs] * 2),
                       np.array([tokens] * 2), group)
    assert list(arr) == [want, 0]


def test_a_plans_gqa_group_sets_the_attention_tiles():
    from twinserve.core.batch import Batch

    class R:  # just what Batch.features reads
        num_tokens = prompt_len = 0

    reqs = [R() for _ in range(3)]
    args = (0, reqs, [0, 100, 200], [40, 1, 1], [True] * 3, [0] * 3, [False, True, True])
    # 42 tokens over 3 sequences: 14 (group 1, 16-row tiles), 28 (group 2, 64), 84 (group 6, 128)
    for group, want in ((1, 16), (2, 64), (6, 128)):
        f = Batch(*args).features(GraphPlan(token_graph_mode="piecewise", gqa_group=group))
        assert (f.graph_replay, f.attn_tile) == (0, want)
    assert Batch(*args).features(GraphPlan(token_graph_mode="full", gqa_group=6)).attn_tile == 0
    with pytest.raises(ValueError, match="gqa_group"):
        GraphPlan(gqa_group=0)


def test_a_models_gqa_group_is_per_rank():
    from twinserve.core.model_shapes import get_shape

    assert get_shape("qwen3-0.6b").gqa_group() == 2 and get_shape("llama3-8b").gqa_group() == 4
    assert get_shape("llama3-8b").gqa_group(2) == 4      # heads and KV heads both split
    assert get_shape("llama3-8b").gqa_group(16) == 2     # 8 KV heads on 16 ranks: one each, replicated
