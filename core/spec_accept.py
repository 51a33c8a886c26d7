"""`AcceptanceModel`: how many draft tokens a backend without a model proposes and accepts.

The simulator knows each request's answer (``output_hint``) but has no model to draft with, so
it draws both numbers per verify row: the proposal's length ``d`` from ``length_probs`` (index
n: the chance a proposer finds ``n`` tokens to propose, 0 meaning a plain decode) cut to the
room the step leaves, and the accepted count by walking the positions, position j accepted with
probability ``rates[j]`` given that the ones before it were. The draft it returns is the answer's
next ``a`` tokens then a token that differs from the answer, so the scheduler's own acceptance
(`core.spec.accept_greedy` against the answer) keeps exactly ``a`` drafts and emits the answer.

Sources: ``spec.acceptance`` (one rate for every position, or a list of k rates; every proposal
then has k tokens) or ``spec.acceptance_file`` (a JSON file: either ``{"acceptance_rates":
[...], "proposed_length_counts": [...]}`` or an engine run's ``summary.json`` with its
``spec_decode_*`` counters, from which `from_counters` derives both, the time a draft
model's proposals took per step, ``draft_step_s``, which the simulator adds to such steps, and
``no_match_rate``, the share of the requests the engine checked past a pending token
(``spec_decode_num_after_checked``) after which no draft could follow
(``spec_decode_num_after_no_match``): the simulator draws the same, `may_draft_after`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from twinserve.core.errors import UserError
from twinserve.core.request import Req
from twinserve.core.spec import SpecConfig
from twinserve.core.spec_ngram import NgramIndex


@dataclass(frozen=True)
class AcceptanceModel:
    """Per-position conditional acceptance ``rates`` (k values in [0, 1]) and the proposal
    length distribution ``length_probs`` (k + 1 values summing to 1). Draws are a pure function
    of (``seed``, request id, output index): the same run gives the same table."""

    rates: tuple[float, ...]
    length_probs: tuple[float, ...]
    seed: int = 0
    draft_step_s: float = 0.0  # seconds a draft model's proposals add to a step with verify rows
    # the chance that no draft can follow a request's next token, whatever it is (an engine's
    # prompt lookup then keeps its overlap: `SpecDecoding.may_draft_next`)
    no_match_rate: float = 0.0

    def __post_init__(self) -> None:
        if not self.rates or any(not 0.0 <= a <= 1.0 for a in self.rates):
            raise UserError(f"spec acceptance rates must lie in [0, 1], got {list(self.rates)}", key="spec.acceptance")
        if not 0.0 <= self.no_match_rate <= 1.0:
            raise UserError(f"spec acceptance: no-match rate {self.no_match_rate} is not in [0, 1]",
                            key="spec.acceptance_file")
        if len(self.length_probs) != len(self.rates) + 1 or abs(sum(self.length_probs) - 1.0) > 1e-6:
            raise UserError("spec acceptance: proposed-length probabilities must be k + 1 values summing to 1",
                            key="spec.acceptance_file")

    @property
    def k(self) -> int:
        return len(self.rates)

    @property
    def mean_accepted_length(self) -> float:
        """Expected tokens a full k-token verify row emits (accepted drafts + 1)."""
        return 1.0 + float(np.cumprod(self.rates).sum())

    def draw(self, rid: int, pos: int, room: int) -> tuple[int, int]:
        """(proposal length d <= room, accepted a <= d) for request ``rid`` at output ``pos``."""
        rng = np.random.default_rng([self.seed, rid, pos])
        d = min(int(rng.choice(self.k + 1, p=self.length_probs)), room)
        u = rng.random(self.k)
        a = 0
        while a < d and u[a] < self.rates[a]:
            a += 1
        return d, a

    def may_draft_after(self, r: Req) -> bool:
        """Whether ``r`` might draft after its latest token: false with ``no_match_rate``, drawn
        from (``seed``, request id, output index) like the proposals."""
        if self.no_match_rate <= 0.0:
            return True
        pos = r.num_tokens - r.prompt_len
        return bool(np.random.default_rng([self.seed, r.rid, pos, 1]).random() >= self.no_match_rate)

    def propose(self, r: Req, k: int) -> np.ndarray:
        """A draft for the decode of ``r`` (at most ``k`` tokens) built from its answer."""
        h = r.output_hint
        if h is None:
            return np.zeros(0, dtype=np.int32)
        base = r.num_tokens - r.prompt_len  # output index of the token this step samples
        d, a = self.draw(r.rid, base, min(k, len(h) - base))
        out = np.asarray(h[base:base + d], dtype=np.int32).copy()
        if a < d:
            out[a] = out[a] + 1 if out[a] < np.iinfo(np.int32).max else 0  # any other token is a rejection
        return out

    @classmethod
    def from_counters(cls, stats: Mapping[str, Any], seed: int = 0) -> "AcceptanceModel":
        """The model an engine's ``spec_decode_*`` counters measured: rate j = drafts whose
        position j was accepted / drafts that reached it; lengths from the proposal counts; a
        draft model's mean proposal time per step (``spec_decode_draft_s_per_step``) when it ran."""
        k = 0
        while f"spec_decode_num_reached_pos{k}" in stats:
            k += 1
        if k == 0:
            raise UserError("spec.acceptance_file: no spec_decode_num_reached_pos* counters in it",
                            key="spec.acceptance_file")
        reached = np.array([float(stats[f"spec_decode_num_reached_pos{j}"]) for j in range(k)])
        acc = np.array([float(stats[f"spec_decode_num_accepted_tokens_pos{j}"]) for j in range(k)])
        rates = np.where(reached > 0, acc / np.maximum(reached, 1), 0.0)
        lens = np.array([float(stats.get(f"spec_decode_num_proposed_len{n}", 0)) for n in range(k + 1)])
        checked = float(stats.get("spec_decode_num_after_checked", 0))
        no_match = float(stats.get("spec_decode_num_after_no_match", 0)) / checked if checked else 0.0
        return cls(tuple(rates.tolist()), _probs(lens), seed, float(stats.get("spec_decode_draft_s_per_step", 0.0)),
                   no_match)

    @classmethod
    def from_config(cls, spec: Mapping[str, Any], k: int, seed: int = 0) -> "AcceptanceModel":
        """From a run config's ``spec`` node: ``acceptance`` (a rate or k rates) or
        ``acceptance_file``; UserError when neither is set or they disagree with k."""
        rates = spec.get("acceptance")
        path = spec.get("acceptance_file")
        if rates is not None and path:
            raise UserError("set spec.acceptance or spec.acceptance_file, not both", key="spec.acceptance")
        if path:
            data = read_acceptance_file(path)
            if "acceptance_rates" in data:
                m = cls(tuple(float(a) for a in data["acceptance_rates"]),
                        _probs(np.asarray(data["proposed_length_counts"], dtype=float)), seed)
            else:
                m = cls.from_counters(data, seed)
            if m.k != k:
                raise UserError(f"spec.acceptance_file {path} has {m.k} positions, spec.num_tokens is {k}",
                                key="spec.num_tokens")
            return m
        if rates is None:
            raise UserError("the simulator needs an acceptance model with speculation: spec.acceptance "
                            "(a rate, or spec.num_tokens rates) or spec.acceptance_file", key="spec.acceptance")
        vals = [float(rates)] * k if isinstance(rates, (int, float)) else [float(a) for a in rates]
        if len(vals) != k:
            raise UserError(f"spec.acceptance has {len(vals)} rates, spec.num_tokens is {k}", key="spec.acceptance")
        return cls(tuple(vals), tuple([0.0] * k + [1.0]), seed)


def may_draft_after(accept: AcceptanceModel, cfg: SpecConfig) -> Callable[[Req], bool] | None:
    """The simulator's `SpecDecoding` ``may_after``: whether a request might draft once its
    pending token is known. Right after its prompt, prompt lookup's answer (``ngram``) depends
    on the prompt alone, which the simulator has: `NgramIndex.may_match_after` gives it exactly
    as the engine's check does. Later tokens are the engine's, which the simulator lacks:
    ``accept``'s measured no-match rate decides. None (always) with neither."""
    exact = cfg.method == "ngram"
    if not exact and accept.no_match_rate <= 0.0:
        return None

    def may(r: Req) -> bool:
        if exact and r.num_tokens - 1 == r.prompt_len:
            return NgramIndex(cfg.ngram_min, cfg.ngram_max).may_match_after(r.tokens[: r.prompt_len])
        return accept.may_draft_after(r)

    return may


def read_acceptance_file(path: str | Path) -> dict[str, Any]:
    """The counters of ``spec.acceptance_file``: a summary.json's ``spec`` section, or the whole
    file; UserError naming the file when it cannot be read."""
    try:
        data = json.loads(Path(str(path)).read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"spec.acceptance_file {path}: {e}", key="spec.acceptance_file") from None
    return data.get("spec", data)  # a summary.json keeps the counters in its "spec" section


def _probs(counts: np.ndarray) -> tuple[float, ...]:
    total = float(counts.sum())
    if total <= 0:
        raise UserError("spec acceptance: no proposals counted", key="spec.acceptance_file")
    return tuple((counts / total).tolist())
