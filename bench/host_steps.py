"""Host-cost benchmark of the engine's steps: ``twinserve-bench host-steps``.

The serving loop's host work sets the pace of small eager steps (a short prefill riding on a
batch of decodes): on the H200 the eager launch of such a step took about 10 ms for both
qwen3-0.6b and llama3-8b, against well under 1 ms for a CUDA-graph decode. This benchmark
holds one step shape fixed and reports, per kind of step, the medians of the engine's timeline
columns (`Engine` docstring), so that changes to the launch path can be measured before/after:

- ``mixed``: ``--decodes`` running requests plus one new ``--prompt``-token request a step
  (eager on CUDA; each new request asks for one token, so the shape repeats);
- ``decode``: the same decodes alone (a CUDA-graph replay where graphs are on).

Several ``--decodes`` / ``--prompt`` values pair up into step shapes, one series each in turn
on the same engine (``--decodes 32 1 --prompt 128 4096``: the fixed mixed step, then a lone
4,096-token prefill beside one decode).

Printed per kind: ``launch_s`` (host launch work), ``launch_cpu_s`` (the thread's CPU time over
it: far below ``launch_s`` means the thread was descheduled or blocked), ``sched_s``,
``complete_s``, the post-replay part of a graph launch (``launch_end - replay_end``), the
device span and the period between consecutive steps (the loop's pace). ``--cprofile N`` also runs the mixed series under cProfile and prints its N
costliest functions (own time), the first place to look for launch overhead.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.bench.offline import add_fast_plan_arg, add_token_graph_args, append_jsonl, build_engine, engine_args
from twinserve.engine.engine import Engine

COLUMNS = ("launch_s", "launch_cpu_s", "sched_s", "complete_s", "post_s", "duration", "period_s")


@dataclass(slots=True)
class HostStats:
    """Medians over the ``n`` steps of one kind (seconds)."""

    kind: str
    n: int
    launch_s: float
    launch_cpu_s: float
    sched_s: float
    complete_s: float
    post_s: float
    duration: float
    period_s: float  # between consecutive steps' starts: the loop's pace (throughput)

    def line(self) -> str:
        ms = {c: getattr(self, c) * 1e3 for c in COLUMNS}
        return (f"{self.kind:7s} n={self.n:4d}  launch {ms['launch_s']:7.3f} ms (cpu {ms['launch_cpu_s']:7.3f})  "
                f"sched {ms['sched_s']:6.3f}  complete {ms['complete_s']:6.3f}  post {ms['post_s']:6.3f}  "
                f"device {ms['duration']:7.3f}  period {ms['period_s']:7.3f} ms")


def _stats(kind: str, recs: list[Any]) -> HostStats:
    def med(f) -> float:
        v = np.array([f(r) for r in recs], dtype=np.float64)
        v = v[np.isfinite(v)]
        return float(np.median(v)) if v.size else float("nan")

    return HostStats(kind, len(recs), med(lambda r: r.extra.get("launch_s", np.nan)),
                     med(lambda r: r.extra.get("launch_cpu_s", np.nan)),
                     med(lambda r: r.extra.get("sched_s", np.nan)),
                     med(lambda r: r.extra.get("complete_s", np.nan)),
                     med(lambda r: r.extra.get("launch_end", np.nan) - r.extra.get("replay_end", np.nan)),
                     med(lambda r: r.duration),
                     float(np.median(np.diff([r.start for r in recs]))) if len(recs) > 2 else float("nan"))


class _Series:
    """Drives ``eng`` through the fixed shapes: ``decodes`` long-running requests (context
    ``ctx`` to start) and, per mixed step, one new ``prompt``-token request of one token."""

    def __init__(self, eng: Engine, decodes: int, ctx: int, prompt: int, seed: int = 0) -> None:
        self.eng, self.decodes, self.prompt = eng, decodes, prompt
        self.rng = np.random.default_rng(seed)
        self.vocab = min(10000, eng.model_config.vocab_size)
        self.rid = 50_000_000
        self.ctx = ctx

    def _req(self, n: int, max_tokens: int) -> Req:
        self.rid += 1
        return Req(self.rid, self.rng.integers(0, self.vocab, n).astype(np.int32),
                   SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True), arrival=self.eng.now())

    def start(self, steps: int) -> None:
        for _ in range(self.decodes):
            self.eng.add(self._req(self.ctx, 4 * steps + 16))  # outlives decode + two mixed series
        while not self._decoding():
            self.eng.step()

    def _decoding(self) -> bool:
        s = self.eng.steps
        return bool(s) and s[-1].features.num_prefills == 0 and s[-1].features.num_decodes == self.decodes

    def run(self, steps: int, mixed: bool) -> list[Any]:
        """``steps`` steps, each given one new ``prompt``-token request when ``mixed``; the
        records of the steps that had the series' shape."""
        n0 = len(self.eng.steps)
        for _ in range(steps):
            if mixed:
                self.eng.add(self._req(self.prompt, 1))
            self.eng.step()
        return [r for r in self.eng.steps[n0:]
                if r.features.num_prefills == int(mixed) and r.features.num_decodes == self.decodes]

    def drain(self) -> None:
        for req in list(self.eng.scheduler.running):
            self.eng.abort(req.rid)
        while self.eng.has_work():
            self.eng.step()


def host_bench(eng: Engine, decodes: int = 32, ctx: int = 512, prompt: int = 128, steps: int = 60,
               cprofile_top: int = 0) -> tuple[list[HostStats], str]:
    """Run the decode and mixed series (``steps`` each) on ``eng``; returns their stats and,
    with ``cprofile_top``, the cProfile table of a further mixed series."""
    s = _Series(eng, decodes, ctx, prompt)
    s.start(steps)
    out = [_stats("decode", s.run(steps, mixed=False)), _stats("mixed", s.run(steps, mixed=True))]
    table = ""
    if cprofile_top:
        prof = cProfile.Profile()
        prof.enable()
        s.run(steps, mixed=True)
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(cprofile_top)
        table = buf.getvalue()
    s.drain()
    return out, table


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="qwen3-0.6b")
    ap.add_argument("--model", default=None, help="checkpoint dir (default: --shape with dummy weights)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--decodes", type=int, nargs="+", default=[32],
                    help="running requests of each step shape (several: one series per shape, paired with --prompt)")
    ap.add_argument("--ctx", type=int, default=512, help="prompt length of the decoding requests")
    ap.add_argument("--prompt", type=int, nargs="+", default=[128],
                    help="prompt length of each mixed step's new request, per step shape")
    ap.add_argument("--steps", type=int, default=60)
    add_token_graph_args(ap)
    ap.add_argument("--repeats", type=int, default=3, help="series per kind (a slow host shows as spread)")
    ap.add_argument("--cprofile", type=int, default=0, help="print the N costliest functions of a mixed series")
    add_fast_plan_arg(ap)
    ap.add_argument("--json", default=None, help="append results as JSON lines to this file")
    args = ap.parse_args(argv)
    if len(args.decodes) != len(args.prompt):
        ap.error(f"--decodes and --prompt pair up: got {len(args.decodes)} and {len(args.prompt)} values")
    t = time.perf_counter()
    eng = build_engine(engine_args(args.shape, args.model, args.device, cache="none"),
                       piecewise_max_tokens=args.piecewise_max_tokens, token_graph_mode=args.token_graphs,
                       hybrid_decode_heavy=not args.no_decode_heavy, fast_plan=not args.no_fast_plan)
    eng.warmup()
    print(f"engine {args.model or args.shape} on {eng.device} ready in {time.perf_counter() - t:.1f} s")
    rows: list[dict[str, Any]] = []
    for k in range(args.repeats):
        for decodes, prompt in zip(args.decodes, args.prompt):
            stats, table = host_bench(eng, decodes, args.ctx, prompt, args.steps,
                                      args.cprofile if k == args.repeats - 1 else 0)
            label = f" {decodes}+{prompt}" if len(args.decodes) > 1 else ""
            for st in stats:
                print(f"repeat {k}{label}: {st.line()}")
                rows.append({"model": args.model or args.shape, "repeat": k, "decodes": decodes,
                             "prompt": prompt, "fast_plan": not args.no_fast_plan,
                             "piecewise_max_tokens": args.piecewise_max_tokens,
                             "token_graph_mode": args.token_graphs, **asdict(st)})
            if table:
                print(table)
    append_jsonl(args.json, rows)
    eng.shutdown()


if __name__ == "__main__":
    main()
