"""`LLM`: offline batch generation on one `Engine` (prompts as text or token ids)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.engine.config import EngineConfig
from twinserve.engine.engine import Engine


@dataclass
class Output:
    """One prompt's result: decoded ``text`` and ``token_ids`` of the output, the prompt's ids,
    the finish reason and how many prompt tokens came from the prefix cache."""

    text: str
    token_ids: list[int]
    prompt_token_ids: list[int]
    finish_reason: str | None
    cached_tokens: int


class LLM:
    """``LLM(model_dir, **EngineConfig fields).generate(prompts, params)``.

    All prompts are submitted at once and served as one continuous batch; outputs come back in
    prompt order. Text prompts are tokenized with the model directory's tokenizer (with BOS).
    ``LLM(model, tp_size=2)`` runs tensor-parallel (rank 0 in this process, rank 1 in a child);
    ``shutdown()`` (or leaving a ``with LLM(...)`` block) stops the child ranks at once, which
    otherwise end when the LLM is garbage collected or the interpreter exits.
    """

    def __init__(self, model: str, **engine_kwargs: Any) -> None:
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

    def generate(self, prompts: Sequence[str] | Sequence[Sequence[int]],
                 params: SamplingParams | Sequence[SamplingParams] | None = None,
                 use_tqdm: bool = True) -> list[Output]:
        params = params or SamplingParams()
        plist = list(params) if isinstance(params, (list, tuple)) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"{len(plist)} sampling params for {len(prompts)} prompts")
        ids = [self.tokenizer(p)["input_ids"] if isinstance(p, str) else list(p) for p in prompts]
        eng = self.engine
        rids = []
        for toks, sp in zip(ids, plist):
            rid = self._next_rid
            self._next_rid += 1
            eng.add(Req(rid, toks, sp, arrival=eng.now()))
            rids.append(rid)
        got: dict[int, list[int]] = {r: [] for r in rids}
        info: dict[int, tuple[str | None, int]] = {}
        bar = None
        if use_tqdm:
            from tqdm import tqdm

            bar = tqdm(total=len(rids), desc="generate", unit="req")
        while len(info) < len(rids) and eng.has_work():
            for out in eng.step():
                if out.rid not in got:
                    continue
                got[out.rid].extend(out.new_token_ids)
                if out.finished:
                    info[out.rid] = (out.finish_reason, out.cached_tokens)
                    if bar is not None:
                        bar.update(1)
        if bar is not None:
            bar.close()
        results = []
        for rid, toks in zip(rids, ids):
            reason, cached = info.get(rid, (None, 0))
            text = self.tokenizer.decode(got[rid], skip_special_tokens=True) if isinstance(prompts[0], str) else ""
            results.append(Output(text, got[rid], list(toks), reason, cached))
        return results
