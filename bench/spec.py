"""Speculative decoding against plain decoding on one checkpoint and a real-text workload.

    twinserve-bench spec --model DIR [--workload code_edit] [--num-tokens 4] [--requests 64]
        [--ngram-batch 1 64] [--layers 24 28] [--layers-batch 1 16] [--max-output N]
        [--spec-max-batch-size B|auto] [--ngram-k K ...] [--ngram-min N ...] [--ngram-max N]
        [--device auto] [--out DIR] [--name NAME]

Every request of the workload (tokenized by the checkpoint's own tokenizer, greedy,
``max_tokens`` = its output length, EOS ignored so every run emits the same number of tokens)
is queued at once with ``max_running=B``: once without speculation for each batch size B, then
with ``spec.method=ngram`` at each ``--ngram-batch`` and with ``spec.method=draft
spec.draft=layers:N`` for each N of ``--layers`` at each ``--layers-batch``. One JSON line per
run: mean TPOT (over requests: (finish - first token) / (outputs - 1)), output tokens per
second, with a draft model the wall time of its proposals (``draft_s``), the acceptance rate (accepted / proposed), the mean accepted length, the TPOT ratio to
the plain run of the same batch and whether the run emitted the plain run's tokens. With
``--out DIR``: ``runs_<name>.json`` (``--name``, default the workload; all rows, rewritten after each run, so a crash keeps
the runs before it) and per speculating run ``spec_<workload>_<method>_b<B>.json`` holding its ``spec_decode_*``
counters under ``"spec"`` (a `spec.acceptance_file` for the simulator). A run that fails is a
row with its ``error``; the others still run. On a GPU each engine first runs `Engine.warmup`.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class SpecRun:
    """One engine run of the benchmark: a speculation config (empty: plain) at a batch size."""

    label: str
    batch: int
    spec: dict[str, Any]


def plan(ngram_batch: list[int], layers: list[int], layers_batch: list[int], k: int,
         max_batch_size: int = 0, ngram: list[dict[str, int]] | None = None) -> list[SpecRun]:
    """Plain runs first (one per batch size used), then the speculating ones (each with
    ``spec.max_batch_size``): an ngram run per batch size and per entry of ``ngram`` (spec keys
    such as ``num_tokens`` and ``ngram_min`` over the defaults; labelled ``ngram`` when there
    is one entry, else ``ngram-`` and its values)."""
    sizes = sorted(set(ngram_batch) | (set(layers_batch) if layers else set()))
    cap = {"num_tokens": k, "max_batch_size": max_batch_size}
    runs = [SpecRun("none", b, {}) for b in sizes]
    variants = ngram or [{}]
    for v in variants:
        tag = "-".join(f"{key.replace('ngram_', '')}{val}" for key, val in v.items())
        label = "ngram" if len(variants) == 1 else f"ngram-{tag}"
        runs += [SpecRun(label, b, {"method": "ngram", **cap, **v}) for b in ngram_batch]
    runs += [SpecRun(f"layers:{n}", b, {"method": "draft", "draft": f"layers:{n}", **cap})
             for n in layers for b in layers_batch]
    return runs


def run_once(model: str, prompts: list[np.ndarray], outs: list[int], run: SpecRun,
             device: str) -> tuple[dict[str, Any], list[list[int]]]:
    """One engine, all requests queued at once; returns (row, each request's output ids)."""
    from twinserve.core.request import Req
    from twinserve.core.sampling import SamplingParams
    from twinserve.engine.engine import Engine, EngineConfig

    eng = Engine(EngineConfig(model=model, device=device, spec=run.spec, scheduler={"max_running": run.batch},
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
        row: dict[str, Any] = {"batch": run.batch, "spec": run.label, "requests": len(reqs), "device": eng.device.type,
                               "mean_tpot_ms": 1e3 * float(np.mean(tpot)), "output_tok_s": sum(outs) / wall,
                               "wall_s": wall}
        counters = eng.scheduler.spec.stats() if eng.scheduler.spec is not None else {}
        if "spec_max_batch_size" in eng.stats():  # spec.max_batch_size=auto: the cutoff it found
            row["spec_max_batch_size"] = eng.stats()["spec_max_batch_size"]
            c = eng.scheduler.spec.costs
            row["step_costs_ms"] = {str(b): [1e3 * c.decode_s[b], 1e3 * c.verify_s[b]] for b in sorted(c.decode_s)}
        if run.spec.get("method") == "draft":  # the draft model's proposals, summed over steps
            row["draft_s"] = float(sum(rec.extra.get("spec_draft_s", 0.0) for rec in eng.steps))
        if counters:
            proposed = counters["spec_decode_num_draft_tokens"]
            row["acceptance_rate"] = counters["spec_decode_num_accepted_tokens"] / proposed if proposed else 0.0
            row["mean_accepted_length"] = counters["spec_decode_mean_accepted_length"]
            row["counters"] = counters
        return row, [r.output_ids.tolist() for r in reqs]
    finally:
        eng.shutdown()


def _max_batch(value: str) -> int:
    from twinserve.core.spec import AUTO_MAX_BATCH

    return AUTO_MAX_BATCH if value == "auto" else int(value)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(prog="twinserve-bench spec", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--workload", default="code_edit", choices=["code_edit", "questions"])
    ap.add_argument("--num-tokens", type=int, default=4)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--ngram-batch", type=int, nargs="*", default=[1, 64])
    ap.add_argument("--layers", type=int, nargs="*", default=[24, 28])
    ap.add_argument("--layers-batch", type=int, nargs="*", default=[1, 16])
    ap.add_argument("--max-output", type=int, default=None, help="cap each request's output length")
    ap.add_argument("--ngram-min", type=int, nargs="*", default=[], help="spec.ngram_min of the ngram runs, one run each (default: the config's)")
    ap.add_argument("--ngram-max", type=int, default=None, help="spec.ngram_max of the ngram runs")
    ap.add_argument("--ngram-k", type=int, nargs="*", default=[], help="k of the ngram runs, one run each with each --ngram-min (default: --num-tokens)")
    ap.add_argument("--spec-max-batch-size", type=_max_batch, default=0,
                    help="spec.max_batch_size of the speculating runs (0: no limit; auto: the engine measures it)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", default=None, help="folder for runs_NAME.json and the spec_*.json counter files")
    ap.add_argument("--name", default=None, help="NAME of runs_NAME.json (default: the workload)")
    args = ap.parse_args(argv)
    from twinserve.core.workload import WORKLOADS

    wl = WORKLOADS.create(args.workload, tokenizer=args.model, num_requests=args.requests, rate=1.0)
    prompts = [wl.prompt_tokens(s) for s in wl]
    outs = [s.output_len if args.max_output is None else min(s.output_len, args.max_output) for s in wl]
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    plain: dict[int, tuple[dict[str, Any], list[list[int]]]] = {}
    ngram = [{**({"num_tokens": k} if k else {}), **({"ngram_min": m} if m else {}),
              **({"ngram_max": args.ngram_max} if args.ngram_max else {})}
             for k in (args.ngram_k or [0]) for m in (args.ngram_min or [0])]
    for run in plan(args.ngram_batch, args.layers, args.layers_batch, args.num_tokens, args.spec_max_batch_size, ngram):
        try:
            row, toks = run_once(args.model, prompts, outs, run, args.device)
        except Exception as e:  # one failed run leaves the others to run
            row, toks = {"batch": run.batch, "spec": run.label, "error": f"{type(e).__name__}: {e}",
                         "traceback": traceback.format_exc(limit=4)}, None
        row["workload"] = args.workload
        if run.spec and toks is not None:
            base = plain.get(run.batch)
            if base is not None:
                row["same_tokens"] = toks == base[1]
                row["tpot_ratio_to_plain"] = base[0]["mean_tpot_ms"] / row["mean_tpot_ms"]
            if out is not None:
                name = f"spec_{args.workload}_{run.label.replace(':', '')}_b{run.batch}.json"
                (out / name).write_text(json.dumps({"spec": row["counters"]}, indent=2) + "\n")
        elif toks is not None:
            plain[run.batch] = (row, toks)
        print(json.dumps({k: v for k, v in row.items() if k not in ("counters", "traceback")}), flush=True)
        rows.append(row)
        if out is not None:
            (out / f"runs_{args.name or args.workload}.json").write_text(json.dumps(rows, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()
