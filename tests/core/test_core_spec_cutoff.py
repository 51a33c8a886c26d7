"""`spec_batch_cutoff` on fake step costs, and `SpecDecoding` speculating only up to the cutoff."""

from __future__ import annotations

import numpy as np
import pytest

from helpers_core import make_req
from twinserve.core.spec import AUTO_MAX_BATCH, SpecConfig
from twinserve.core.spec_cutoff import (
    MIN_VERIFY_ROWS, StepCosts, accepted_length_estimate, spec_batch_cutoff,
)
from twinserve.core.spec_step import SpecDecoding

SIZES = (1, 2, 4, 8, 16, 32, 64)


def fake_costs(host_s: float = 1e-3, per_token_s: float = 2e-5, k: int = 4) -> StepCosts:
    """A host-bound engine: a fixed host cost per step (a verify step pays it twice: no overlap,
    more inputs) plus device time linear in the step's tokens."""
    decode = {b: host_s + per_token_s * b for b in SIZES}
    verify = {b: 2 * host_s + per_token_s * b * (k + 1) for b in SIZES}
    return StepCosts(decode, verify)


def test_cutoff_is_the_largest_size_where_speculation_pays():
    c = fake_costs()
    # L (1e-3 + 2e-5 b) > 2e-3 + 1e-4 b  <=>  b < (L - 2) 1e-3 / (1e-4 - 2e-5 L)  (L < 5)
    assert spec_batch_cutoff(c, 2.5) == 8  # pays below b = 10
    assert spec_batch_cutoff(c, 3.0) == 16  # pays below b = 25
    assert spec_batch_cutoff(c, 2.0) == 0  # never: the verify step costs twice the decode step
    assert spec_batch_cutoff(c, 5.0) == 64  # pays everywhere measured


def test_cutoff_stops_at_the_first_size_that_does_not_pay():
    c = StepCosts({1: 1.0, 2: 1.0, 4: 1.0}, {1: 1.5, 2: 3.0, 4: 1.5})
    assert spec_batch_cutoff(c, 2.0) == 1  # 4 would pay again, but 2 does not


def test_cutoff_grows_with_the_accepted_length():
    c = fake_costs()
    cuts = [spec_batch_cutoff(c, a) for a in np.linspace(1.0, 5.0, 41)]
    assert cuts == sorted(cuts) and cuts[0] == 0 and cuts[-1] == 64


def test_costs_need_matching_sizes():
    with pytest.raises(ValueError):
        StepCosts({1: 1.0}, {2: 1.0})


def test_accepted_length_estimate_waits_for_enough_rows():
    assert accepted_length_estimate(MIN_VERIFY_ROWS - 1, 0, k=4) == 5.0  # optimistic until measured
    assert accepted_length_estimate(100, 150, k=4) == 2.5


def test_auto_is_a_max_batch_size_value():
    assert SpecConfig.of({"method": "ngram", "num_tokens": 4, "max_batch_size": "auto"}).max_batch_size == AUTO_MAX_BATCH
    with pytest.raises(ValueError):
        SpecConfig.of({"method": "ngram", "num_tokens": 4, "max_batch_size": -2})


def _decoding(rid: int):
    r = make_req(rid, [1, 2, 3, 1, 2], max_tokens=16)
    r.append_tokens(np.array([3], dtype=np.int32), 1)  # an output: the request decodes "1 2 3 1 2 3"
    return r


def test_spec_decoding_speculates_up_to_the_measured_cutoff():
    spec = SpecDecoding(SpecConfig("ngram", 4, 1, 2, max_batch_size=AUTO_MAX_BATCH))
    costs = fake_costs()
    spec.set_costs(costs)
    reqs = [_decoding(i) for i in range(8)]
    # nothing measured yet: every draft assumed accepted (5 tokens a row), which pays at every size
    assert spec.max_batch == spec_batch_cutoff(costs, 5.0) == 64
    spec.prepare_step(reqs)
    assert spec.draft(reqs[0], budget=64) > 0
    # measured acceptance: 3 tokens per verify row -> the cutoff moves to 16
    spec.num_drafts, spec.num_accepted_tokens = MIN_VERIFY_ROWS, 2 * MIN_VERIFY_ROWS
    spec.prepare_step(reqs)
    assert spec.max_batch == 16 and spec.draft(reqs[0], budget=64) > 0
    spec.prepare_step(reqs * 3)  # 24 running: above the cutoff
    assert spec.draft(reqs[0], budget=64) == 0 and not spec.may_draft(24)
    # 2 tokens per row: a verify step costs more than two decode steps at every size
    spec.num_accepted_tokens = MIN_VERIFY_ROWS
    spec.prepare_step(reqs[:1])
    assert spec.max_batch == 0 and spec.draft(reqs[0], budget=64) == 0 and not spec.may_draft(1)
    spec.reset_counters()  # back to the optimistic start
    assert spec.max_batch == 64


def test_rows_without_a_draft_lower_the_cutoff():
    """Step costs measured on the H200 (SmolLM2-135M, k = 8, ms): with 5.19 tokens per verify row
    speculation pays up to 64 rows if every row gets a draft, but when only 3 in 10 do, each
    row emits about 2.26 tokens and it pays only up to 8."""
    costs = StepCosts({1: 1.092, 2: 1.097, 4: 1.091, 8: 1.103, 16: 1.097, 32: 1.097, 64: 1.350},
                      {1: 2.197, 2: 2.241, 4: 2.398, 8: 2.487, 16: 2.762, 32: 3.364, 64: 6.969})
    rows, accepted = 1000, 4190
    assert accepted_length_estimate(rows, accepted, k=8, proposal_rate=0.3) == pytest.approx(2.257)
    assert spec_batch_cutoff(costs, accepted_length_estimate(rows, accepted, k=8)) == 64
    assert spec_batch_cutoff(costs, accepted_length_estimate(rows, accepted, k=8, proposal_rate=0.3)) == 8


def test_spec_decoding_counts_the_rows_that_found_no_draft():
    from twinserve.core.spec_step import SpecDecoding

    spec = SpecDecoding(SpecConfig.of({"method": "ngram", "num_tokens": 8, "max_batch_size": "auto"}))
    spec.num_drafts, spec.num_accepted_tokens = 1000, 4190
    spec.proposed_len[8] = 1000
    spec.proposed_len[0] = 2333  # 3 in 10 of the rows that asked got a draft
    spec.set_costs(StepCosts({1: 1.092, 8: 1.103, 16: 1.097, 64: 1.350}, {1: 2.197, 8: 2.487, 16: 2.762, 64: 6.969}))
    assert spec.max_batch == 8
    spec.proposed_len[0] = 0
    spec.set_costs(spec.costs)
    assert spec.max_batch == 64
