"""Speculative decoding against plain decoding on one checkpoint and a real-text workload.

    python -m twinserve.engine.spec_bench --model DIR [--workload code_edit] [--batch 1 64]
        [--num-tokens 4] [--requests 64] [--device auto] [--out results.json]

For each batch size B, every request of the workload (tokenized by the checkpoint's own
tokenizer, greedy, ``max_tokens`` = its output length, EOS ignored so both runs emit the same
number of tokens) is queued at once with ``max_running=B``, once without speculation and once
with ``spec.method=ngram``. It prints, per run, the mean TPOT (over requests: (finish - first
token) / (outputs - 1)), output tokens per second, and with speculation the proposed and
accepted token counts; it checks that both runs emitted the same tokens. On a GPU each engine
first runs `Engine.warmup`.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.core.workload import WORKLOADS
from twinserve.engine.engine import Engine, EngineConfig


def run_once(model: str, prompts: list[np.ndarray], outs: list[int], batch: int, spec: dict[str, Any],
             device: str) -> tuple[dict[str, float], list[list[int]]]:
    """One engine, all requests queued at once; returns (summary, each request's output ids)."""
    eng = Engine(EngineConfig(model=model, device=device, spec=spec, scheduler={"max_running": batch},
                              cpu_kv_tokens=65536))
    try:
        if eng.device.type == "cuda":
            eng.warmup()
        eng.reset_clock()
        reqs = [Req(i, p, SamplingParams(temperature=0.0, max_tokens=o, ignore_eos=True), arrival=0.0)
                for i, (p, o) in enumerate(zip(prompts, outs))]
        t0 = time.perf_counter()
        for r in reqs:
            eng.add(r)
        while eng.has_work():
            eng.step()
        wall = time.perf_counter() - t0
        tpot = [(r.t_finish - r.t_first_token) / (r.num_output - 1) for r in reqs if r.num_output > 1]
        summary = {"batch": batch, "spec": spec.get("method", "none"), "requests": len(reqs),
                   "mean_tpot_ms": 1e3 * float(np.mean(tpot)), "output_tok_s": sum(outs) / wall, "wall_s": wall}
        summary.update({k: v for k, v in eng.stats().items() if k.startswith("spec_decode")})
        return summary, [r.output_ids.tolist() for r in reqs]
    finally:
        eng.shutdown()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m twinserve.engine.spec_bench", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--workload", default="code_edit", choices=["code_edit", "questions"])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--num-tokens", type=int, default=4)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    wl = WORKLOADS.create(args.workload, tokenizer=args.model, num_requests=args.requests, rate=1.0)
    prompts = [wl.prompt_tokens(s) for s in wl]
    outs = [s.output_len for s in wl]
    rows = []
    for b in args.batch:
        plain, want = run_once(args.model, prompts, outs, b, {}, args.device)
        spec, got = run_once(args.model, prompts, outs, b, {"method": "ngram", "num_tokens": args.num_tokens},
                             args.device)
        spec["same_tokens"] = got == want
        for row in (plain, spec):
            print(json.dumps(row))
            rows.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
