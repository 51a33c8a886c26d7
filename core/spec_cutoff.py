"""`StepCosts` and `spec_batch_cutoff`: the batch size above which speculation stops paying.

A plain decode step of ``B`` requests emits ``B`` tokens in ``decode_s[B]`` seconds; a step in
which all of them verify a ``k``-token draft emits about ``B * L`` tokens (``L``: the mean
accepted length, accepted drafts + 1 per verify row) in ``verify_s[B]``. Speculation pays at
``B`` when ``verify_s[B] < L * decode_s[B]``. With ``spec.max_batch_size=auto`` the engine
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


def accepted_length_estimate(num_rows: int, num_accepted: int, k: int) -> float:
    """Mean tokens per verify row: the measured one after `MIN_VERIFY_ROWS` rows, else ``k + 1``
    (the most a ``k``-token draft gives, so that acceptance gets measured wherever it could pay)."""
    if num_rows < MIN_VERIFY_ROWS:
        return float(k + 1)
    return (num_accepted + num_rows) / num_rows
