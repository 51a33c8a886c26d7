"""The simulator's acceptance model (core/spec_accept.py): configured rates, drafts built from
the answer that the scheduler's own acceptance keeps exactly as drawn, measured counters."""

from __future__ import annotations

import numpy as np
import pytest

from helpers_core import make_req
from twinserve.core.errors import UserError
from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.core.spec import accept_greedy
from twinserve.core.spec_accept import AcceptanceModel


def test_rates_from_config_and_errors():
    m = AcceptanceModel.from_config({"acceptance": 0.5}, 3)
    assert m.rates == (0.5, 0.5, 0.5) and m.length_probs == (0.0, 0.0, 0.0, 1.0)
    assert m.mean_accepted_length == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    with pytest.raises(UserError, match="3 rates, spec.num_tokens is 2"):
        AcceptanceModel.from_config({"acceptance": [0.5, 0.4, 0.3]}, 2)
    with pytest.raises(UserError, match="acceptance"):
        AcceptanceModel.from_config({}, 2)
    with pytest.raises(UserError, match="in \\[0, 1\\]"):
        AcceptanceModel.from_config({"acceptance": 1.5}, 2)


def test_drafts_from_the_answer_keep_the_drawn_count():
    m = AcceptanceModel((0.8, 0.6, 0.4), (0.0, 0.0, 0.0, 1.0), seed=7)
    answer = np.arange(100, 160, dtype=np.int32)
    accepted = []
    for rid in range(400):
        r = Req(rid, np.array([1, 2, 3], dtype=np.int32), SamplingParams(max_tokens=60), output_hint=answer)
        r.append_tokens(answer[:5], 5)  # five outputs known: the step samples output 5
        d = m.propose(r, 3)
        _, a = m.draw(rid, 5, 3)
        assert d.size == 3
        kept = accept_greedy(d, answer[5:5 + d.size + 1])
        assert kept.size - 1 == a and kept.tolist() == answer[5:5 + a + 1].tolist()
        accepted.append(a)
    got = np.bincount(accepted, minlength=4) / len(accepted)
    want = np.array([0.2, 0.8 * 0.4, 0.8 * 0.6 * 0.6, 0.8 * 0.6 * 0.4])
    assert np.abs(got - want).max() < 0.06
    assert m.propose(make_req(0, [1, 2], max_tokens=4), 3).size == 0  # no answer: no draft


def test_from_counters_measures_rates_and_lengths():
    m = AcceptanceModel.from_counters({
        "spec_decode_num_reached_pos0": 10, "spec_decode_num_accepted_tokens_pos0": 8,
        "spec_decode_num_reached_pos1": 8, "spec_decode_num_accepted_tokens_pos1": 2,
        "spec_decode_num_proposed_len0": 5, "spec_decode_num_proposed_len1": 5, "spec_decode_num_proposed_len2": 10})
    assert m.rates == pytest.approx((0.8, 0.25)) and m.length_probs == pytest.approx((0.25, 0.25, 0.5))
    assert m.no_match_rate == 0.0  # no spec_decode_num_after_* counters: every request may draft


def test_no_match_rate_from_counters_and_its_draws():
    m = AcceptanceModel.from_counters({
        "spec_decode_num_reached_pos0": 10, "spec_decode_num_accepted_tokens_pos0": 8,
        "spec_decode_num_proposed_len0": 5, "spec_decode_num_proposed_len1": 5,
        "spec_decode_num_after_checked": 40, "spec_decode_num_after_no_match": 30})
    assert m.no_match_rate == pytest.approx(0.75)
    reqs = [make_req(i, 5, max_tokens=4) for i in range(400)]
    draws = [m.may_draft_after(r) for r in reqs]
    assert draws == [m.may_draft_after(r) for r in reqs]  # a pure function of seed, rid, position
    assert abs(1 - sum(draws) / len(draws) - 0.75) < 0.07
    with pytest.raises(UserError):
        AcceptanceModel((0.5,), (0.5, 0.5), no_match_rate=1.5)


def test_the_check_after_a_prompt_reads_the_prompt_and_later_ones_the_measured_rate():
    """Right after its prompt, whether prompt lookup may draft depends on the prompt alone
    (`NgramIndex.may_match_after`): the simulator answers it exactly, whatever the engine's
    no-match rate; past the first output that rate decides."""
    from twinserve.core.request import PLACEHOLDER
    from twinserve.core.spec import SpecConfig
    from twinserve.core.spec_accept import may_draft_after

    cfg = SpecConfig(method="ngram", num_tokens=4)  # ngram_min 3: the last 2 tokens must recur
    never = AcceptanceModel((0.5,) * 4, (0.0,) * 4 + (1.0,), no_match_rate=1.0)
    always = AcceptanceModel((0.5,) * 4, (0.0,) * 4 + (1.0,), no_match_rate=0.0)
    repeat, fresh = make_req(0, [5, 6, 9, 1, 5, 6]), make_req(1, [5, 6, 9, 1, 2, 3])
    for r in (repeat, fresh):
        r.append_placeholder()
        assert r.tokens[r.num_tokens - 1] == PLACEHOLDER
    assert may_draft_after(never, cfg)(repeat) and not may_draft_after(always, cfg)(fresh)
    repeat.set_output(0, 7, 0.0)
    repeat.append_placeholder()  # past the first output: the measured rate
    assert not may_draft_after(never, cfg)(repeat) and may_draft_after(always, cfg)(repeat)
    # a method without a token-only proposer and no measured no-match: no check at all
    assert may_draft_after(always, SpecConfig(method="draft", num_tokens=4, draft="layers:2")) is None
