"""`StepCosts` and `spec_batch_cutoff`: the batch size above which speculation stops paying.

A plain decode step of ``B`` requests emits ``B`` tokens in ``decode_s[B]`` seconds; a step in
which they speculate costs at most ``verify_s[B]`` (all of them verifying a ``k``-token draft)
and emits about ``B * L`` tokens, ``L`` the mean tokens per decode row: 1, plus the accepted
draft tokens per verify row times the share of decode rows whose proposer found a draft.
Speculation pays at ``B`` when ``verify_s[B] < L * decode_s[B]``. With ``spec.max_batch_size=auto`` the engine
measures both costs at a few batch sizes (engine/spec_costs.py) and speculates only in steps
formed while at most the cutoff runs; ``L`` starts at ``k + 1`` (every draft accepted: the
engine speculates wherever that would pay until it has measured) and follows the measured mean
once `MIN_VERIFY_ROWS` verify rows have been settled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

MIN_VERIFY_ROWS = 64  # verify rows settled before the measured mean replaces the prior


@dataclass(frozen=True)
class StepCosts:
    """Seconds per engine step at measured batch sizes: ``decode_s[B]`` with ``B`` plain decodes,
    ``verify_s[B]`` with ``B`` rows verifying a full ``k``-token draft. Both have the same keys."""

    decode_s: Mapping[int, float]
    verify_s: Mapping[int, float]

    def __post_init__(self) -> None:
        if set(self.decode_s) != set(self.verify_s) or not self.decode_s:
            raise ValueError("StepCosts: decode_s and verify_s need the same, non-empty batch sizes")


def spec_batch_cutoff(costs: StepCosts, accepted_length: float) -> int:
    """The largest measured batch size ``B`` such that speculation pays at every measured size
    up to ``B`` (0: it pays at none, even batch 1). Pure and monotone: a larger
    ``accepted_length`` never gives a smaller cutoff."""
    cut = 0
    for b in sorted(costs.decode_s):
        if costs.verify_s[b] < accepted_length * costs.decode_s[b]:
            cut = b
        else:
            break
    return cut


def accepted_length_estimate(num_rows: int, num_accepted: int, k: int, proposal_rate: float = 1.0) -> float:
    """Mean tokens per decode row of a speculating step: after `MIN_VERIFY_ROWS` verify rows,
    1 plus their mean accepted draft tokens times ``proposal_rate`` (the share of decode rows
    that got a draft; the others emit one token); before, ``k + 1`` (the most a ``k``-token
    draft gives, so that acceptance gets measured wherever it could pay)."""
    if num_rows < MIN_VERIFY_ROWS:
        return float(k + 1)
    return 1.0 + proposal_rate * num_accepted / num_rows
