"""The profile's speculative phase: a second engine, the first's config with speculation on,
replays a real-text workload so that the calibration sees verify steps (their launch, their
``schedule()`` with the proposals, their ``complete()`` with the acceptance) and the plain
steps of an engine that may draft after them.

    python -m twinserve.experiments.calibrate --model DIR --device cuda --spec-replay ngram:8

The rows carry ``phase="spec"``; the workload (``code_edit`` by default) is built with the
tokenizer of the model directory and a seed apart from the measured runs' (the profile's seed
+ `SEED_OFFSET`), so a calibration never saw the requests it is later compared on.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from twinserve.calibration.host_fit import SPEC_PHASE
from twinserve.core.errors import UserError
from twinserve.engine.config import EngineConfig

SEED_OFFSET = 1000
DEFAULT_KWARGS: dict[str, Any] = {"num_requests": 64, "rate": 8.0}
# builder kwargs of one workload only (code_edit's answers capped at 256 tokens)
WORKLOAD_KWARGS: dict[str, dict[str, Any]] = {"code_edit": {"max_output": 256}}


def parse_spec(text: str) -> dict[str, Any]:
    """``METHOD:K`` (e.g. ``ngram:8``) as `SpecConfig` fields."""
    method, _, k = text.partition(":")
    if not method or not k.isdigit() or int(k) < 1:
        raise UserError(f"--spec-replay {text!r}: expected METHOD:K, e.g. ngram:8")
    return {"method": method, "num_tokens": int(k)}


def spec_replay_rows(cfg: EngineConfig, spec: str, workload: str = "code_edit", kwargs_json: str | None = None,
                     seed: int = 0, progress: bool = True) -> list[dict[str, Any]]:
    """Build an engine of ``cfg`` with ``spec`` (`parse_spec`), replay ``workload`` (its builder
    kwargs: `DEFAULT_KWARGS` and the workload's `WORKLOAD_KWARGS`, updated by ``kwargs_json``) on
    it, shut it down; return its step records as rows with ``phase="spec"`` and ``case=-1``
    (`profiler.step_rows`)."""
    from twinserve.core.workload import build as build_workload
    from twinserve.engine.engine import Engine
    from twinserve.engine.profiler import step_rows
    from twinserve.engine.replay import replay_workload

    if not (Path(str(cfg.model)) / "tokenizer_config.json").is_file():
        raise UserError(f"--spec-replay needs a model directory with a tokenizer and chat template, not "
                        f"{cfg.model!r} (e.g. twinserve-make-model --from-gguf smollm2-135m --out DIR)")
    kw = {**DEFAULT_KWARGS, **WORKLOAD_KWARGS.get(workload, {}), **(json.loads(kwargs_json) if kwargs_json else {})}
    wl = build_workload(workload, tokenizer=str(cfg.model), seed=seed + SEED_OFFSET, **kw)
    eng = Engine(replace(cfg, spec=parse_spec(spec)))
    try:
        # the model's own tokens, not the trace's answers: they are what prompt lookup matches
        _, records = replay_workload(eng.cfg, wl.with_vocab(eng.model_config.vocab_size), progress=progress,
                                     engine=eng, answers=False, warmup=eng.device.type == "cuda")
    finally:
        eng.shutdown()
    return step_rows(records, SPEC_PHASE, -1)
