"""`RequestOptions`: the engine's per-request state for the options beyond plain sampling.

It turns the live requests' penalties, biases, min-tokens, min-p, grammars and log-probability
requests into one step's `SamplingExtras`, and holds the log-probabilities each request's
outputs got until they are reported. A request with no such option is never registered, so a
step of plain requests costs one emptiness test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from twinserve.core.batch import Batch
from twinserve.core.request import Req
from twinserve.engine.logits_processing import LogprobsOut, PromptLogprobsSpec, SamplingExtras

# one output position's log-probabilities: (the sampled token's, [(id, logprob)] most likely first)
TokenLogprobs = tuple[float, list[tuple[int, float]]]


@dataclass
class _Live:
    req: Req
    bias_ids: np.ndarray
    bias_vals: np.ndarray
    ban_ids: np.ndarray
    grammar: Any = None
    logprobs: dict[int, TokenLogprobs] = field(default_factory=dict)
    prompt_lp: dict[int, TokenLogprobs] = field(default_factory=dict)  # prompt index -> entry
    prompt_sent: bool = False


class RequestOptions:
    """Tracks the live requests that set an option (``SamplingParams.has_extras``).

    Contract: ``add(req)`` validates the options against the model (ValueError) and registers
    the request; ``drop(rid)`` forgets it. ``build(reqs, out_pos)`` gives the `SamplingExtras`
    of one step's sampled rows (``reqs[j]`` samples its output ``out_pos[j]``), None when no row
    sets an option; it reads the outputs before ``out_pos[j]``, which must be known on the host
    for the requests of ``needs_sync``. ``record(reqs, out_pos, lp)`` stores a step's
    log-probabilities and ``take(rid, start, n)`` hands back those of outputs
    ``start .. start + n - 1`` (None for a request that asked for none). Prompt logprobs go the
    same way: ``prompt_spec(batch)`` names the step's prompt positions, ``record_prompt`` stores
    their values, ``take_prompt(rid)`` hands back prompt tokens 1 .. P-1 once.
    """

    def __init__(self, vocab_size: int, eos_token_ids: Sequence[int], tokenizer_path: str) -> None:
        self.vocab = int(vocab_size)
        self.eos = np.asarray(sorted({int(t) for t in eos_token_ids}), dtype=np.int64)
        self.tokenizer_path = tokenizer_path
        self.live: dict[int, _Live] = {}
        self.synced: set[int] = set()  # requests whose options read their token history
        self.prompt_rids: set[int] = set()  # requests that want their prompt's logprobs
        self._grammar = None

    def __bool__(self) -> bool:
        return bool(self.live)

    def add(self, req: Req) -> None:
        p = req.params
        if not p.has_extras:
            return
        bias = {int(t): float(b) for t, b in p.logit_bias.items()}
        bad = [t for t in bias if t >= self.vocab]
        if bad:
            raise ValueError(f"logit_bias token id {bad[0]} is outside the vocabulary [0, {self.vocab})")
        ban = np.zeros(0, dtype=np.int64)
        if p.min_tokens > 0:
            stops = {int(t) for t in p.stop_token_ids if t < self.vocab}
            if not p.ignore_eos:
                stops.update(int(t) for t in self.eos)
            ban = np.asarray(sorted(stops), dtype=np.int64)
        grammar = None
        if p.json_schema is not None:
            if p.ignore_eos or p.min_tokens:
                raise ValueError("json_schema cannot be combined with ignore_eos or min_tokens (the "
                                 "output ends when the JSON value is complete)")
            grammar = self._compiler().matcher(p.json_schema)
        self.live[req.rid] = _Live(req, np.fromiter(bias, np.int64, len(bias)),
                                   np.fromiter(bias.values(), np.float32, len(bias)), ban, grammar)
        if p.needs_history:
            self.synced.add(req.rid)
        if p.prompt_logprobs is not None:
            self.prompt_rids.add(req.rid)

    def drop(self, rid: int) -> None:
        if self.live.pop(rid, None) is not None:
            self.synced.discard(rid)
            self.prompt_rids.discard(rid)

    def prompt_spec(self, batch: Batch) -> PromptLogprobsSpec | None:
        """The prompt positions of ``batch`` whose logprobs a request wants (None: none)."""
        if not self.prompt_rids:
            return None
        idx, tgt, rids, pos = [], [], [], []
        k = 0
        off = 0
        for r, s, n, dec in zip(batch.reqs, batch.starts, batch.new_tokens, batch.is_decode):
            end = min(s + n, r.prompt_len - 1)
            if not dec and r.rid in self.prompt_rids and end > s:
                p = np.arange(s, end, dtype=np.int64)
                idx.append(off + p - s)
                tgt.append(r.tokens[p + 1].astype(np.int64))
                rids.append(np.full(p.size, r.rid, np.int64))
                pos.append(p + 1)
                k = max(k, r.params.prompt_logprobs or 0)
            off += n
        if not idx:
            return None
        return PromptLogprobsSpec(np.concatenate(idx), np.concatenate(tgt), k, np.concatenate(rids),
                                  np.concatenate(pos))

    def record_prompt(self, spec: PromptLogprobsSpec, lp: LogprobsOut) -> None:
        token = lp.token.float().numpy()
        top_ids = lp.top_ids.numpy()
        top_lp = lp.top_lp.float().numpy()
        for i, (rid, p) in enumerate(zip(spec.rids.tolist(), spec.positions.tolist())):
            st = self.live.get(rid)
            if st is None:
                continue
            k = st.req.params.prompt_logprobs or 0
            st.prompt_lp[p] = (float(token[i]), list(zip(top_ids[i, :k].tolist(), top_lp[i, :k].tolist())))

    def take_prompt(self, rid: int) -> list[TokenLogprobs] | None:
        st = self.live.get(rid)
        if st is None or st.req.params.prompt_logprobs is None or st.prompt_sent:
            return None
        st.prompt_sent = True
        got = st.prompt_lp
        return [got.get(p, (float("nan"), [])) for p in range(1, st.req.prompt_len)]

    def needs_sync(self, reqs: Sequence[Req]) -> bool:
        """Whether a step of ``reqs`` has a request whose options read its token history."""
        synced = self.synced
        return bool(synced) and any(r.rid in synced for r in reqs)

    def _compiler(self):
        if self._grammar is None:
            from twinserve.engine.grammar import GrammarCompiler

            self._grammar = GrammarCompiler(self.tokenizer_path, self.vocab, self.eos.tolist())
        return self._grammar

    def build(self, reqs: Sequence[Req], out_pos: Sequence[int]) -> SamplingExtras | None:
        live = self.live
        rows = [j for j, r in enumerate(reqs) if r.rid in live]
        if not rows:
            return None
        n = len(reqs)
        presence = np.zeros(n, np.float32)
        frequency = np.zeros(n, np.float32)
        repetition = np.ones(n, np.float32)
        min_p = np.zeros(n, np.float32)
        logprobs = np.full(n, -1, np.int64)
        parts: dict[str, list[np.ndarray]] = {k: [] for k in (
            "bias_rows", "bias_ids", "bias_vals", "ban_rows", "ban_ids", "count_rows", "count_ids",
            "seen_rows", "seen_ids", "mask_rows")}
        masks: list[np.ndarray] = []
        penalized = False
        for j in rows:
            st = live[reqs[j].rid]
            r, p, pos = st.req, st.req.params, out_pos[j]
            min_p[j] = p.min_p
            if p.logprobs is not None:
                logprobs[j] = p.logprobs
            if st.bias_ids.size:
                parts["bias_rows"].append(np.full(st.bias_ids.size, j, np.int64))
                parts["bias_ids"].append(st.bias_ids)
                parts["bias_vals"].append(st.bias_vals)
            if st.ban_ids.size and pos < p.min_tokens:
                parts["ban_rows"].append(np.full(st.ban_ids.size, j, np.int64))
                parts["ban_ids"].append(st.ban_ids)
            outputs = r.tokens[r.prompt_len: r.prompt_len + pos]
            if p.penalized:
                penalized = True
                presence[j], frequency[j], repetition[j] = p.presence_penalty, p.frequency_penalty, p.repetition_penalty
                if (p.presence_penalty or p.frequency_penalty) and pos:
                    parts["count_rows"].append(np.full(pos, j, np.int64))
                    parts["count_ids"].append(outputs.astype(np.int64))
                if p.repetition_penalty != 1.0:
                    seen = np.unique(r.tokens[: r.prompt_len + pos]).astype(np.int64)
                    parts["seen_rows"].append(np.full(seen.size, j, np.int64))
                    parts["seen_ids"].append(seen)
            if st.grammar is not None:
                parts["mask_rows"].append(np.array([j], np.int64))
                masks.append(st.grammar.bitmask(outputs))

        def cat(k: str, dtype: type = np.int64) -> np.ndarray:
            return np.concatenate(parts[k]) if parts[k] else np.zeros(0, dtype)

        words = (self.vocab + 31) // 32
        return SamplingExtras(
            presence=presence, frequency=frequency, repetition=repetition, min_p=min_p,
            logprobs=logprobs, bias_rows=cat("bias_rows"), bias_ids=cat("bias_ids"),
            bias_vals=cat("bias_vals", np.float32), ban_rows=cat("ban_rows"), ban_ids=cat("ban_ids"),
            count_rows=cat("count_rows"), count_ids=cat("count_ids"), seen_rows=cat("seen_rows"),
            seen_ids=cat("seen_ids"), mask_rows=cat("mask_rows"),
            mask_bits=np.stack(masks) if masks else np.zeros((0, words), np.int32),
            penalized=penalized)

    def record(self, reqs: Sequence[Req], out_pos: Sequence[int], lp: LogprobsOut) -> None:
        token = lp.token.float().numpy()
        top_ids = lp.top_ids.numpy()
        top_lp = lp.top_lp.float().numpy()
        for i, j in enumerate(lp.rows.tolist()):
            st = self.live.get(reqs[j].rid)
            if st is None:
                continue
            k = st.req.params.logprobs or 0
            st.logprobs[out_pos[j]] = (float(token[i]), list(zip(top_ids[i, :k].tolist(),
                                                                  top_lp[i, :k].tolist())))

    def take(self, rid: int, start: int, n: int) -> list[TokenLogprobs] | None:
        st = self.live.get(rid)
        if st is None or st.req.params.logprobs is None:
            return None
        got = st.logprobs
        return [got.pop(i, (float("nan"), [])) for i in range(start, start + n)]
