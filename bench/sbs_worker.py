"""One engine's side of the side-by-side: ``python -m twinserve.bench.sbs_worker ENGINE ...``.

Builds the engine once (``ms``: mini-sglang's offline ``LLM`` with its own recipe settings;
``tw``: twinserve's ``LLM`` with the same token budget), runs an untimed warm-up of the recipe,
then one timed run per seed given, printing one JSON line per run; ``--profile-seed`` adds one
run under ``torch.profiler`` whose kernel totals go, as JSON, to ``--profile-out``. Each run's
requests come from `bench.recipe.recipe` (a fresh seed per run: no run reuses another's
prefixes). Needs CUDA for ``ms``; ``tw`` also runs on the CPU (tests).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable

from twinserve.bench.kernel_families import KernelTime, Profile, busy_time, gap_buckets
from twinserve.bench.recipe import Recipe, recipe

Generate = Callable[[Recipe], int]


def minisgl_engine(model_dir: str, temperature: float, max_tokens: int, path: str | None) -> Generate:
    """mini-sglang's LLM as its own benchmark builds it (FlashInfer attention, page size 1)."""
    if path:
        sys.path.insert(0, path)
    from minisgl.core import SamplingParams
    from minisgl.llm import LLM

    llm = LLM(model_dir, max_seq_len_override=4096, max_extend_tokens=max_tokens, cuda_graph_max_bs=256,
              page_size=1, attention_backend="fi", use_dummy_weight=True)

    def gen(r: Recipe) -> int:
        sps = [SamplingParams(temperature=temperature, ignore_eos=True, max_tokens=o) for o in r.output_lens]
        return sum(len(x["token_ids"]) for x in llm.generate(r.prompts, sps))

    return gen


def twinserve_engine(model_dir: str, temperature: float, max_tokens: int, overrides: dict[str, Any]) -> Generate:
    """twinserve's LLM with random weights, the recipe's token budget, its offline scheduling
    default (``makespan``) and any EngineConfig overrides (``scheduler`` entries merge into the
    budget's; ``scheduling=fcfs`` schedules in arrival order)."""
    from twinserve.core.sampling import SamplingParams
    from twinserve.engine.llm import LLM

    sched = {"max_num_batched_tokens": max_tokens, "chunk_size": max_tokens, "max_running": 256}
    sched.update(overrides.pop("scheduler", {}))
    llm = LLM(model_dir, load_format="dummy", scheduler=sched, **overrides)

    def gen(r: Recipe) -> int:
        llm.engine.flush_cache()
        sps = [SamplingParams(temperature=temperature, ignore_eos=True, max_tokens=o) for o in r.output_lens]
        return sum(len(o.token_ids) for o in llm.generate(r.prompts, sps, use_tqdm=False))

    gen.engine = llm.engine  # type: ignore[attr-defined]
    return gen


def profile_run(gen: Generate, r: Recipe, engine: str) -> Profile:
    """Run ``r`` under torch.profiler; the CUDA kernels' totals, span, busy time and gaps."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        gen(r)
        torch.cuda.synchronize()
    totals: dict[str, list[float]] = {}
    spans: list[tuple[float, float]] = []
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        a, b = e.time_range.start / 1e6, e.time_range.end / 1e6
        if b <= a:
            continue
        spans.append((a, b))
        t = totals.setdefault(e.name, [0, 0.0])
        t[0] += 1
        t[1] += b - a
    span = max(b for _, b in spans) - min(a for a, _ in spans) if spans else 0.0
    kernels = [KernelTime(n, int(c), s) for n, (c, s) in totals.items()]
    return Profile(engine, kernels, span, busy_time(spans), gap_buckets(spans))


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``key=value`` pairs (``scheduler.key=value`` nests) with JSON values where they parse."""
    out: dict[str, Any] = {}
    for it in items:
        k, _, v = it.partition("=")
        try:
            val = json.loads(v)
        except json.JSONDecodeError:
            val = v
        if k.startswith("scheduler."):
            out.setdefault("scheduler", {})[k.split(".", 1)[1]] = val
        else:
            out[k] = val
    return out


def rows_histogram(recs: list, top: int = 12) -> str:
    """Steps and device seconds per padded row count of the dense layers, for the ``top`` row
    counts with the most device time (one run's step-size mix): ``"rows:steps/seconds ..."``."""
    acc: dict[int, list[float]] = {}
    for x in recs:
        a = acc.setdefault(int(x.features.padded_tokens), [0, 0.0])
        a[0] += 1
        a[1] += x.duration
    best = sorted(acc.items(), key=lambda kv: -kv[1][1])[:top]
    return " ".join(f"{k}:{int(v[0])}/{v[1]:.3f}" for k, v in best)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine", choices=["ms", "tw"])
    ap.add_argument("model_dir")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--num-requests", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=16384, help="token budget of a step")
    ap.add_argument("--lens", type=int, nargs=2, default=[100, 1024], metavar=("LO", "HI"),
                    help="prompt and output lengths are uniform in [LO, HI]")
    ap.add_argument("--warmup-requests", type=int, default=64)
    ap.add_argument("--minisgl", default=None, help="folder holding mini-sglang's python package")
    ap.add_argument("--profile-seed", type=int, default=None)
    ap.add_argument("--profile-out", default=None)
    ap.add_argument("--label", default=None, help="name of this engine variant in the output")
    ap.add_argument("--set", nargs="*", default=[], help="twinserve EngineConfig overrides key=value")
    args = ap.parse_args(argv)
    label = args.label or args.engine
    with open(f"{args.model_dir}/config.json") as f:
        vocab = min(10000, int(json.load(f)["vocab_size"]) - 1)  # the recipe's ids, within small test vocabularies
    t0 = time.perf_counter()
    if args.engine == "ms":
        gen = minisgl_engine(args.model_dir, args.temperature, args.max_tokens, args.minisgl)
    else:
        gen = twinserve_engine(args.model_dir, args.temperature, args.max_tokens, parse_overrides(args.set))
    setup = time.perf_counter() - t0
    t = time.perf_counter()
    gen(recipe(10_000, n=args.warmup_requests, vocab=vocab, lo=args.lens[0], hi=args.lens[1]))
    print(json.dumps({"engine": label, "event": "ready", "setup_s": round(setup, 1),
                      "warmup_s": round(time.perf_counter() - t, 1)}), flush=True)
    eng = getattr(gen, "engine", None)
    for seed in args.seeds:
        r = recipe(seed, n=args.num_requests, vocab=vocab, lo=args.lens[0], hi=args.lens[1])
        n0, p0 = (len(eng.steps), eng.scheduler.num_preemptions) if eng is not None else (0, 0)
        t = time.perf_counter()
        n = gen(r)
        s = time.perf_counter() - t
        row = {"engine": label, "event": "run", "seed": seed, "seconds": round(s, 3),
               "requested_tokens": r.output_tokens, "generated_tokens": n, "tok_s": round(r.output_tokens / s, 1)}
        if eng is not None:
            recs = eng.steps[n0:]
            row.update(steps=len(recs), prefill_steps=sum(1 for x in recs if x.features.prefill_tokens),
                       preemptions=int(eng.scheduler.num_preemptions - p0),
                       device_s=round(sum(x.duration for x in recs), 3), by_rows=rows_histogram(recs))
        print(json.dumps(row), flush=True)
    if args.profile_seed is not None:
        prof = profile_run(gen, recipe(args.profile_seed, n=args.num_requests, vocab=vocab, lo=args.lens[0], hi=args.lens[1]), label)
        if args.profile_out:
            with open(args.profile_out, "w") as f:
                json.dump(prof.to_dict(), f)
        print(json.dumps({"engine": label, "event": "profile", "span_s": round(prof.span_s, 3),
                          "busy_s": round(prof.busy_s, 3)}), flush=True)


if __name__ == "__main__":
    main()
