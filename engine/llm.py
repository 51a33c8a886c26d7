"""`LLM`: offline batch generation on one `Engine` (prompts as text or token ids)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams, seed64
from twinserve.engine.config import EngineConfig
from twinserve.engine.engine import Engine
from twinserve.policies.scheduling.makespan import TARGET_TOKENS


@dataclass
class Output:
    """One output of one prompt: decoded ``text`` and ``token_ids`` of the output, the prompt's
    ids, the finish reason, how many prompt tokens came from the prefix cache, ``index`` (which
    of the prompt's ``n`` outputs) and, when asked for, ``logprobs`` (one entry per output token:
    its log-probability and the most likely alternatives as (id, log-probability) pairs) and
    ``prompt_logprobs`` (the same for prompt tokens 1 .. P-1)."""

    text: str
    token_ids: list[int]
    prompt_token_ids: list[int]
    finish_reason: str | None
    cached_tokens: int
    index: int = 0
    logprobs: list[tuple[float, list[tuple[int, float]]]] | None = None
    prompt_logprobs: list[tuple[float, list[tuple[int, float]]]] | None = None


def sibling_params(p: SamplingParams, k: int) -> SamplingParams:
    """The engine request of output ``k`` of ``p``: ``n=1``, and a seeded request's seed moved
    by ``k`` (so the outputs differ but stay reproducible)."""
    seed = p.seed if p.seed is None or k == 0 else seed64(p.seed + k)
    return dataclasses.replace(p, n=1, seed=seed)


class LLM:
    """``LLM(model_dir, **EngineConfig fields).generate(prompts, params)``.

    All prompts are submitted at once and served as one continuous batch; outputs come back in
    prompt order, a prompt's ``n`` outputs one after the other (``Output.index``). The first
    output of a prompt with ``n > 1`` is submitted at once and the other ``n - 1`` once it has
    its first token, so they find the prompt's KV in the prefix cache. Text prompts are
    tokenized with the model directory's tokenizer (with BOS).
    Unless ``scheduling`` is given, requests are scheduled by ``makespan`` (the longest outputs
    first, steps held near a fixed size while prompts wait: `policies.scheduling.makespan`),
    which finishes a batch known up front sooner than arrival order does, and unless
    ``token_graph_rows`` is given, the whole-step token graphs hold as many sequences as
    makespan's step size (320 tokens), so that its decode-heavy steps replay as one CUDA graph
    (`EngineConfig.token_graph_rows`).
    ``LLM(model, tp_size=2)`` runs tensor-parallel (rank 0 in this process, rank 1 in a child);
    ``shutdown()`` (or leaving a ``with LLM(...)`` block) stops the child ranks at once, which
    otherwise end when the LLM is garbage collected or the interpreter exits.
    """

    offline_scheduling = "makespan"
    offline_token_graph_rows = TARGET_TOKENS

    def __init__(self, model: str, **engine_kwargs: Any) -> None:
        engine_kwargs.setdefault("scheduling", self.offline_scheduling)
        engine_kwargs.setdefault("token_graph_rows", self.offline_token_graph_rows)
        self.engine = Engine(EngineConfig(model=model, **engine_kwargs))
        self._tokenizer = None
        self._next_rid = 0

    def shutdown(self) -> None:
        self.engine.shutdown()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.engine.tokenizer_path)
        return self._tokenizer

    def _add(self, toks: list[int], sp: SamplingParams) -> int:
        rid = self._next_rid
        self._next_rid += 1
        self.engine.add(Req(rid, toks, sp, arrival=self.engine.now()))
        return rid

    def generate(self, prompts: Sequence[str] | Sequence[Sequence[int]],
                 params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = True) -> list[Output]:
        params = params or SamplingParams()
        plist = list(params) if isinstance(params, (list, tuple)) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"{len(plist)} sampling params for {len(prompts)} prompts")
        for sp in plist:
            sp.validate()
        ids = [self.tokenizer(p)["input_ids"] if isinstance(p, str) else list(p) for p in prompts]
        eng = self.engine
        first_rid = self._next_rid
        slots: list[tuple[int, int]] = []  # (prompt index, output index) per result, in order
        rid_of: dict[tuple[int, int], int] = {}
        parked: dict[int, list[tuple[int, int]]] = {}  # first output's rid -> the others to add
        for i, (toks, sp) in enumerate(zip(ids, plist)):
            rid_of[(i, 0)] = first = self._add(toks, sibling_params(sp, 0))
            slots.extend((i, k) for k in range(sp.n))
            if sp.n > 1:
                parked[first] = [(i, k) for k in range(1, sp.n)]
        got: dict[int, list[int]] = {}
        lps: dict[int, list] = {}
        plps: dict[int, list] = {}
        info: dict[int, tuple[str | None, int]] = {}
        bar = None
        if use_tqdm:
            from tqdm import tqdm

            bar = tqdm(total=len(slots), desc="generate", unit="req")
        while len(info) < len(slots) and eng.has_work():
            for out in eng.step():
                if out.rid < first_rid:
                    continue  # an earlier call's request, still in flight when that call returned
                for i, k in parked.pop(out.rid, ()):
                    rid_of[(i, k)] = self._add(ids[i], sibling_params(plist[i], k))
                got.setdefault(out.rid, []).extend(out.new_token_ids)
                if out.logprobs is not None:
                    lps.setdefault(out.rid, []).extend(out.logprobs)
                if out.prompt_logprobs is not None:
                    plps[out.rid] = out.prompt_logprobs
                if out.finished:
                    info[out.rid] = (out.finish_reason, out.cached_tokens)
                    if bar is not None:
                        bar.update(1)
        if bar is not None:
            bar.close()
        results = []
        text_prompts = bool(prompts) and isinstance(prompts[0], str)
        for i, k in slots:
            rid = rid_of.get((i, k), -1)
            reason, cached = info.get(rid, (None, 0))
            toks = got.get(rid, [])
            text = self.tokenizer.decode(toks, skip_special_tokens=True) if text_prompts else ""
            lp = lps.get(rid, []) if plist[i].logprobs is not None else None
            results.append(Output(text, toks, list(ids[i]), reason, cached, k, lp, plps.get(rid)))
        return results
