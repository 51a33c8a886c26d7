"""Fitting a profile of the engine with piecewise CUDA graphs: the derived feature columns, and
a llama3-8b H200 profile of that engine whose step grid falls in a slow-host episode as a whole
(tests/sim/data: the profile's 945 grid steps and its last 200 replay steps, float32)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from twinserve.simulator.cost import Provenance
from twinserve.calibration import fit_calibration
from twinserve.calibration.linear import with_derived_features

PROFILE = Path(__file__).resolve().parent / "data/h200_llama3-8b_piecewise_grid.parquet"


def test_older_profiles_get_the_dense_rows_and_eager_flags_that_held_then() -> None:
    steps = pd.DataFrame({"num_prefills": [0, 1, 1, 1], "num_decodes": [8, 3, 0, 30],
                          "padded_decodes": [8, 8, 0, 32], "new_tokens": [8, 131, 4000, 300],
                          "decode_ctx": [800, 300, 0, 3000]})
    old = with_derived_features(steps)  # recorded before the piecewise graphs: all but graphs eager
    assert old["eager_step"].tolist() == [0, 1, 1, 1] and old["padded_tokens"].tolist() == [8, 131, 4000, 300]
    assert old["decode_unique_ctx"].tolist() == [800, 300, 0, 3000]
    # the engine's graph_tokens column says which steps replayed the pieces
    new = with_derived_features(steps.assign(graph_tokens=[0.0, 144.0, 0.0, np.nan]))
    assert new["eager_step"].tolist() == [0, 0, 1, 1]  # NaN: not recorded, eager
    kept = steps.assign(eager_step=[1, 1, 1, 1])
    assert with_derived_features(kept)["eager_step"].tolist() == [1, 1, 1, 1]  # recorded: left alone


def test_long_prefill_spans_in_a_slow_host_episode_stay_in_the_device_fit() -> None:
    steps = pd.read_parquet(PROFILE)
    cal = fit_calibration(steps, Provenance("h200", "llama3-8b", 1))
    prefill_rows = int(((steps.num_prefills > 0) & (steps.num_decodes == 0)).sum())
    # the grid, where the prefill-only steps are, is one slow-host episode; the prefill spans are
    # several times their launch, so the device set their pace and they are fitted
    assert cal.host.slow_share > 0.3
    assert cal.regimes["prefill"].n > 0.8 * prefill_rows and cal.regimes["prefill"].mape < 0.05
    # the prefill launch is fitted on the prefill rows (eager above 2048 tokens: a longer launch)
    launch = cal.host.launch
    assert launch["prefill"].coef != launch["mixed"].coef
    eager = dict(zip(launch["prefill"].terms, launch["prefill"].coef)).get("eager_step", 0.0)
    assert eager > 1e-3 and np.isfinite(launch["prefill"].mape)


def test_one_replay_steps_of_profiles_without_the_column() -> None:
    from twinserve.core.graph_plan import HYBRID_FULL_MAX_SEQS
    from twinserve.calibration.linear import assume_token_graph_mode

    k = HYBRID_FULL_MAX_SEQS
    steps = pd.DataFrame({"num_prefills": [0, 1, 1, 1, 0], "num_decodes": [8, 3, 0, k + 4, 300],
                          "num_seqs": [8, 4, 1, k + 5, 300], "padded_decodes": [8, 8, 0, 40, 304],
                          "new_tokens": [8, 131, 4000, 300, 300], "decode_ctx": [800, 300, 0, 3000, 9000],
                          "graph_tokens": [0.0, 144.0, 0.0, 320.0, 320.0]})
    # the engine timed a replay (replay_end) only where the whole step was one graph
    timed = with_derived_features(steps.assign(replay_end=[1.0, 2.0, np.nan, np.nan, 3.0]))
    assert timed["graph_replay"].tolist() == [1, 1, 0, 0, 1]
    assert with_derived_features(steps)["graph_replay"].tolist() == [1, 0, 0, 0, 1]  # older rule
    # wide query tiles: a whole-step token graph above 256 tokens, not a decode graph
    assert timed.assign(padded_tokens=[8, 144, 4000, 320, 320]).pipe(with_derived_features)[
        "wide_tiles"].tolist() == [0, 0, 0, 0, 1]
    by_mode = {m: assume_token_graph_mode(steps, m)["graph_replay"].tolist() for m in ("full", "piecewise", "hybrid")}
    # a decode-only step beyond the decode graphs (300) took a token graph: whole only in "full"
    assert by_mode == {"full": [1, 1, 0, 1, 1], "piecewise": [1, 0, 0, 0, 0], "hybrid": [1, 1, 0, 0, 0]}
    recorded = steps.assign(graph_replay=[0, 0, 0, 0, 0])
    assert assume_token_graph_mode(recorded, "full")["graph_replay"].tolist() == [0] * 5
