"""`SpecDecoding`: the scheduler's side of speculative decoding (drafts in, accepted tokens out).

The `Scheduler` calls it at three points of a step:

- ``draft(r, budget)`` while forming the batch, for a decode of ``r``: proposes up to ``k``
  tokens (fewer when the token budget, ``max_tokens`` or the proposer allow less; none for a
  request with sampling options beyond temperature, top-k, top-p and the seed, or for one
  replaying a recorded answer). The row then computes ``1 + d`` tokens, counted against the budget, and
  its pages for all of them are taken before the step.
- ``stage(r, d)`` when the batch is launched: the ``d`` draft tokens join the request's token
  buffer as if known, so the row's input ids are ``[last token, draft...]`` and its one
  placeholder output sits after them.
- ``accept(sched, r, start, d, out_pos, target, now)`` when the step completes, with the
  target's token at each of the row's ``1 + d`` positions (greedy: its argmax; sampled: the
  rejection sampler's choice, the draft token where accepted, see engine/spec_sampler.py): keeps
  the agreeing prefix
  of the draft and the target's token after it (`accept_greedy`), applies the stop rules token
  by token, rolls ``num_computed`` back to the accepted tokens and gives the pages beyond them
  back to the allocator.

Counters (``num_drafts`` verify rows, ``num_draft_tokens`` proposed, ``num_accepted_tokens``,
``accepted_per_pos[j]``: drafts whose position j was accepted) follow vLLM's names;
``reached_per_pos[j]`` counts the drafts whose position j was checked (the draft has it and
every earlier one was accepted: ``accepted_per_pos / reached_per_pos`` are the per-position
acceptance rates) and ``proposed_len[n]`` the proposals of n tokens (0: none found) among
those the step left room for k.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from twinserve.core.request import PLACEHOLDER, Req, ReqState
from twinserve.core.spec import SpecConfig, accept_greedy
from twinserve.core.spec_cutoff import StepCosts, accepted_length_estimate, spec_batch_cutoff

if TYPE_CHECKING:
    from twinserve.core.scheduler import Scheduler


class SpecDecoding:
    """Draft bookkeeping of one scheduler. Invariant: a staged draft's tokens lie in its
    request's buffer only between the launch and the completion of its verify step; a batch
    with verify rows is completed before the next is scheduled, and a request whose token is
    still pending (an overlapped plain step in flight) does not draft. `may_draft_next` is
    false only when no running request could draft in the next step whatever its pending token
    turns out to be (then an engine keeps overlapping its plain steps)."""

    def __init__(self, cfg: SpecConfig, propose: Callable[[Req, int], np.ndarray] | None = None,
                 hinted: bool = False, prepare: Callable[[list[Req], int], None] | None = None,
                 may_after: Callable[[Req], bool] | None = None) -> None:
        """``propose(r, k)``: up to ``k`` draft ids for the decode of ``r`` (whose KV covers all
        its known tokens but the last); None: ``cfg``'s token-only proposer on ``r``'s tokens.
        ``hinted``: requests with an ``output_hint`` speculate too (the simulator, whose answers
        are hints; an engine replays hints without speculation). ``prepare(reqs, k)``: called
        by `prepare_step` with the decodes that may speculate in the coming step, so that a
        model proposer drafts for all of them in one batch before ``propose`` asks one by one.
        ``may_after(r)``: whether ``r`` might draft once the token after its known ones is known
        (None: the token-only proposer's own answer, else always), for `may_draft_next`."""
        cfg.validate()
        if not cfg.enabled:
            raise ValueError("SpecDecoding needs a spec method and num_tokens >= 1")
        self.cfg = cfg
        self.k = cfg.num_tokens
        self._retain: Callable[[set[int]], None] | None = None
        # whether r might draft once its one pending token is known (None: always)
        self._may_after: Callable[[Req], bool] | None = may_after
        if propose is None:
            proposer = cfg.proposer()
            per_request = getattr(proposer, "propose_for", None)
            if per_request is not None:  # an incremental proposer keeps state per request id
                propose = lambda r, k: per_request(r.rid, r.tokens[: r.num_tokens], k)  # noqa: E731
                self._retain = proposer.retain
                after = getattr(proposer, "may_propose_after", None)
                if after is not None and may_after is None:
                    self._may_after = lambda r: after(r.rid, r.tokens[: r.num_tokens - 1])  # noqa: E731
            else:
                propose = lambda r, k: proposer.propose(r.tokens[: r.num_tokens], k)  # noqa: E731
        self.propose = propose
        self.hinted = hinted
        self.prepare = prepare
        self._num_running = 0
        self.prepare_s = 0.0  # wall time of the latest prepare (a draft model's proposals), seconds
        self.prepare_total_s = 0.0  # of every prepare with requests to draft for
        self.num_prepares = 0
        self.draft_price: Any = None  # the simulator's price of a draft model's proposals (simulator/draft_price.py)
        self._drafts: dict[int, np.ndarray] = {}
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.accepted_per_pos = np.zeros(self.k, dtype=np.int64)
        self.reached_per_pos = np.zeros(self.k, dtype=np.int64)
        self.proposed_len = np.zeros(self.k + 1, dtype=np.int64)
        self.step_counts: dict[int, list[int]] = {}  # step id -> [draft tokens, accepted], see `settle_step`
        self._step: list[int] = [0, 0]
        self.paused = False  # set by the engine while a live request uses sampling options
        self.held = False  # set by the simulator for a step that overlaps its predecessor: no drafts
        self.num_after_checked = 0  # requests `may_draft_next` asked about past a pending token
        self.num_after_no_match = 0  # ... of which no draft could follow
        # speculate in steps formed while at most this many run; auto: set from `set_costs`
        self.costs: StepCosts | None = None
        self.max_batch: float = cfg.max_batch_size if cfg.max_batch_size > 0 else float("inf")

    def set_costs(self, costs: StepCosts) -> None:
        """Measured step costs (``spec.max_batch_size=auto``): from now on the cutoff follows
        `spec_batch_cutoff` of them and the running accepted-length estimate."""
        self.costs = costs
        self._update_cap()

    def _update_cap(self) -> None:
        if self.costs is not None:
            asked = int(self.proposed_len.sum())  # decode rows with room for k that asked for a draft
            rate = 1.0 - self.proposed_len[0] / asked if asked else 1.0
            self.max_batch = spec_batch_cutoff(
                self.costs, accepted_length_estimate(self.num_drafts, self.num_accepted_tokens, self.k, rate))

    def reset_counters(self) -> None:
        """Zero the counters (an engine's step-cost measurement leaves none behind)."""
        self.num_drafts = self.num_draft_tokens = self.num_accepted_tokens = 0
        self.accepted_per_pos[:] = 0
        self.reached_per_pos[:] = 0
        self.proposed_len[:] = 0
        self.step_counts.clear()
        self.prepare_total_s, self.num_prepares = 0.0, 0
        self.num_after_checked = self.num_after_no_match = 0
        self._update_cap()

    def may_draft(self, num_running: int) -> bool:
        """Whether a step formed while ``num_running`` requests run may have verify rows: an
        engine with overlap scheduling completes its in-flight step before such a step."""
        return not self.paused and num_running <= self.max_batch

    def may_draft_next(self, running: list[Req], settled: bool = False) -> bool:
        """Whether the next step may have verify rows once the in-flight plain step's tokens are
        known: `may_draft` of the running count, and some running request may draft then: one
        decoding without a pending token, or one whose proposer may find a match after its one
        pending token (requests between prefill chunks and ones that never speculate cannot).
        ``settled``: the previous step is complete (the simulator's loop), and every decoding
        request's last token stands for the one an overlapping engine would have pending.
        Counts every request it asks about in ``num_after_checked`` / ``num_after_no_match``.
        Requests of ``running`` that ended (the scheduler drops them at its next schedule) do
        not count."""
        running = [r for r in running if r.state is ReqState.RUNNING]
        if not self.may_draft(len(running)):
            return False
        if self._may_after is None:
            return True
        may = False
        for r in running:
            p = r.params
            if p.has_extras or (r.output_hint is not None and not self.hinted) or p.max_tokens - r.num_output <= 1:
                continue
            decoding = r.num_tokens - r.num_computed == 1 and r.num_tokens > r.prompt_len
            if (r.pending == 1 and r.tokens[r.num_tokens - 1] == PLACEHOLDER) or (settled and decoding and not r.pending):
                self.num_after_checked += 1
                if self._may_after(r):
                    may = True
                else:
                    self.num_after_no_match += 1
            elif r.pending or decoding:
                may = True
        return may

    def _may_speculate(self, r: Req) -> bool:
        p = r.params
        return not (self.paused or self.held or p.has_extras or (r.output_hint is not None and not self.hinted)
                    or r.pending or self._num_running > self.max_batch)

    def prepare_step(self, running: list[Req]) -> None:
        """Before a step is formed (the scheduler calls it with its running requests): note how
        many run (``spec.max_batch_size``) and hand the decodes that may speculate to ``prepare``."""
        self._num_running = len(running)
        self._update_cap()
        if self._retain is not None:  # requests that stopped running: their proposer state goes
            self._retain({r.rid for r in running})
        if self.prepare is None:
            return
        t0 = time.perf_counter()
        reqs = [r for r in running
                if r.num_tokens - r.num_computed == 1 and r.num_tokens > r.prompt_len
                and r.params.max_tokens - r.num_output > 1 and self._may_speculate(r)]
        self.prepare(reqs, self.k)
        self.prepare_s = time.perf_counter() - t0
        if reqs:
            self.prepare_total_s += self.prepare_s
            self.num_prepares += 1

    def draft(self, r: Req, budget: int) -> int:
        """Propose for the decode of ``r`` with ``budget`` tokens left in the step (its own
        token included); returns how many tokens the draft has (0: a plain decode). Requests
        with options beyond the plain sampling fields do not speculate, and none does while
        ``paused``."""
        p = r.params
        room = min(self.k, budget - 1, p.max_tokens - r.num_output - 1)
        if room < 1 or not self._may_speculate(r):
            return 0
        d = self.propose(r, room)
        if room == self.k:  # a proposal the step did not cut short
            self.proposed_len[d.size] += 1
        if d.size:
            self._drafts[r.rid] = d.astype(np.int32)
        else:
            self._drafts.pop(r.rid, None)
        return int(d.size)

    def settle_step(self, step: int, num_draft_tokens: int) -> None:
        """Start settling batch ``step`` (its rows propose ``num_draft_tokens`` in all): the
        accepted tokens of the `accept` calls that follow are counted in ``step_counts[step]``,
        which the backend takes for its step record (``spec_num_draft_tokens``,
        ``spec_num_accepted_tokens``)."""
        self._step = self.step_counts.setdefault(step, [num_draft_tokens, 0])

    def stage(self, r: Req, d: int) -> None:
        """Append ``r``'s ``d``-token draft (from ``draft``) to its token buffer."""
        toks = self._drafts.pop(r.rid)
        if toks.size != d:
            raise RuntimeError(f"request {r.rid}: a draft of {toks.size} tokens staged as {d}")
        r.append_tokens(toks, d)

    def accept(self, sched: "Scheduler", r: Req, start: int, d: int, out_pos: int, target: np.ndarray,
               now: float) -> None:
        """Settle the verify row of ``r`` (computed from ``start``, with a ``d``-token draft
        whose placeholder output is ``out_pos``) given the target's ``1 + d`` tokens."""
        base = out_pos - d  # output index of the token sampled after the last known one
        draft = r.tokens[start + 1 : start + 1 + d]
        kept = accept_greedy(draft, target)
        a = kept.size - 1
        self.num_drafts += 1
        self.num_draft_tokens += d
        self.num_accepted_tokens += a
        self._step[1] += a
        self.accepted_per_pos[:a] += 1
        self.reached_per_pos[:min(a + 1, d)] += 1
        p = r.params
        eos = sched.eos
        n_out = base + kept.size
        finished = None
        for j, tok in enumerate(kept.tolist()):
            pos = base + j
            r.set_output(pos, tok, now)
            if pos + 1 >= p.max_tokens:
                finished, n_out = "length", pos + 1
                break
            if (tok in eos and not p.ignore_eos) or tok in p.stop_token_ids:
                finished, n_out = "stop", pos + 1
                break
        r.truncate_outputs(n_out)
        # KV is valid for the last known token and the accepted drafts only
        r.num_computed = min(start + 1 + a, r.num_tokens)
        if finished is not None:
            sched._finish(r, finished, n_out, now)
            return
        ps = sched.config.page_size
        keep = max(-(-r.num_computed // ps), r.num_cache_pages)
        if len(r.pages) > keep:
            sched.allocator.free(r.pages[keep:])
            del r.pages[keep:]

    def stats(self) -> dict[str, float]:
        """Totals so far, with the mean accepted length per verify row (accepted drafts + 1)."""
        return combined_stats([self])


def combined_stats(specs: "list[SpecDecoding]") -> dict[str, float]:
    """The counters of one or more schedulers' `SpecDecoding` (replicas) summed, with the mean
    accepted length per verify row (accepted drafts + 1) over all of them."""
    n = sum(sp.num_drafts for sp in specs)
    acc = sum(sp.num_accepted_tokens for sp in specs)
    out: dict[str, float] = {
        "spec_decode_num_drafts": n,
        "spec_decode_num_draft_tokens": sum(sp.num_draft_tokens for sp in specs),
        "spec_decode_num_accepted_tokens": acc,
        "spec_decode_mean_accepted_length": (acc + n) / n if n else 0.0,
    }
    out["spec_decode_num_after_checked"] = sum(sp.num_after_checked for sp in specs)
    out["spec_decode_num_after_no_match"] = sum(sp.num_after_no_match for sp in specs)
    preps = sum(sp.num_prepares for sp in specs)
    if preps:  # a draft model ran: its mean proposal time per step
        out["spec_decode_draft_s_per_step"] = sum(sp.prepare_total_s for sp in specs) / preps
    for name, attr in (("num_accepted_tokens_pos", "accepted_per_pos"), ("num_reached_pos", "reached_per_pos"),
                       ("num_proposed_len", "proposed_len")):
        total = np.sum([getattr(sp, attr) for sp in specs], axis=0)
        for j, c in enumerate(total.tolist()):
            out[f"spec_decode_{name}{j}"] = c
    return out
