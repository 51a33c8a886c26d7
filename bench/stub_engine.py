"""`StubEngine`: an engine without a model, for timing the server's own path.

Every step sleeps ``step_s`` (the time a GPU would compute; the CPU stays free for the server's
other processes, as on a GPU host) and gives every live request one token, so a request with
``max_tokens = k`` finishes on its k-th step after being added. Its token ids are its prompt's,
cycled, so the detokenizer has real text to decode.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

from twinserve.engine.outputs import StepOutput


@dataclass(slots=True)
class StubEngineConfig:
    """``model``: a model directory (its tokenizer and ``config.json``'s ``vocab_size``)."""

    model: str
    max_model_len: int = 4096
    step_s: float = 0.005


@dataclass(slots=True)
class _Live:
    rid: int
    prompt: list[int]
    max_tokens: int
    done: int = 0


class StubEngine:
    """The `EngineLoop` interface (add / abort / step / has_work / stats) over no model.

    Invariant: each added request gets exactly one finishing output: its ``max_tokens``-th token
    ("length") or, after ``abort``, an empty one ("abort") on the next step."""

    def __init__(self, cfg: StubEngineConfig) -> None:
        self.cfg = cfg
        with open(os.path.join(cfg.model, "config.json")) as f:
            self.vocab_size = int(json.load(f)["vocab_size"])
        self.max_model_len = cfg.max_model_len
        self.eos_token_ids: tuple[int, ...] = ()
        self.tokenizer_path = cfg.model
        self.live: dict[int, _Live] = {}
        self.pending: list[StepOutput] = []

    def add(self, req: Any) -> None:
        self.live[int(req.rid)] = _Live(int(req.rid), [int(t) for t in req.prompt], int(req.params.max_tokens))

    def abort(self, rid: int) -> bool:
        r = self.live.pop(rid, None)
        if r is None:
            return False
        self.pending.append(StepOutput(rid, [], True, "abort", len(r.prompt)))
        return True

    def has_work(self) -> bool:
        return bool(self.live or self.pending)

    def step(self) -> list[StepOutput]:
        time.sleep(self.cfg.step_s)
        outs, self.pending = self.pending, []
        for r in list(self.live.values()):
            tok = r.prompt[r.done % len(r.prompt)]
            r.done += 1
            fin = r.done >= r.max_tokens
            outs.append(StepOutput(r.rid, [tok], fin, "length" if fin else None, len(r.prompt)))
            if fin:
                del self.live[r.rid]
        return outs

    def stats(self) -> dict[str, Any]:
        return {"running": len(self.live), "waiting": 0, "kv_usage": 0.0, "cache_hit_rate": 0.0}

    def shutdown(self) -> None:
        pass
