"""Profiler: drive a real `Engine` through a grid of step shapes, then a workload slice.

    python -m twinserve.engine.profiler --model qwen3-0.6b --device cuda --budget-s 100 \
        --out /tmp/q06_steps.parquet

Every row written is one of the engine's own `StepRecord`s (the scheduler's batch features and
the device-measured duration and host ``cpu_s``), plus a ``phase`` column (``grid``,
``replay`` or, with ``--spec-replay``, ``spec``: `engine.profile_spec`) and the grid case that
produced it (``case``; -1 for the replays). Step shapes are forced only through what a client controls: prompt lengths, ``max_tokens`` with ``ignore_eos``,
arrival order and, for prefix hits, a first request that leaves its prompt in the radix cache.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.engine.config import EngineConfig
from twinserve.engine.engine import Engine


# The replay slice on CPU: a short-prompt Poisson workload (tiny models, seconds).
CPU_REPLAY = {"prompt_len": {"dist": "uniform", "lo": 16, "hi": 256},
              "output_len": {"dist": "uniform", "lo": 4, "hi": 64}, "rate": 20.0, "num_requests": 200}


@dataclass(frozen=True, slots=True)
class ProfileGrid:
    """The step shapes to visit. Each prefill case runs ``n`` prompts of ``tokens / n`` new
    tokens after ``ctx`` cached tokens (a prefix hit when ``ctx > 0``); each decode case runs
    ``bs`` distinct prompts of ``ctx`` tokens for ``decode_steps`` decode steps, during which
    ``mixed_every``-th steps also get a fresh prefill chunk (mixed steps, its length drawn from
    ``mixed_chunks``). A decode case's prompts are prefilled once beforehand and left in the
    radix cache, so that all ``bs`` of them then decode together: prefilled cold, a batch of
    more prompt tokens than a step's budget would finish its first requests before its last
    ones started decoding, and no step would hold the whole batch. Each shared case runs ``bs`` prompts of a common ``ctx``-token prefix
    (left in the radix cache first) and ``shared_suffix`` own tokens, so that the decodes read
    the prefix's KV pages together; its mixed chunks hit the prefix too. Cases whose tokens do
    not fit the KV pool, ``max_model_len`` or ``max_case_tokens`` are skipped."""

    prefill_tokens: tuple[int, ...] = (32, 128, 512, 1024, 2048, 4096, 8192)
    prefill_ctx: tuple[int, ...] = (0, 1024, 4096)
    prefill_seqs: tuple[int, ...] = (1, 4)
    decode_bs: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 192, 256)
    decode_ctx: tuple[int, ...] = (128, 512, 1024, 2048, 4096)
    decode_steps: int = 12
    mixed_every: int = 3
    mixed_chunks: tuple[int, ...] = (64, 256, 1024, 2048, 4096)
    shared_bs: tuple[int, ...] = (16, 64, 160, 256)
    shared_ctx: tuple[int, ...] = (512, 2048, 4096)
    shared_suffix: int = 32
    max_case_tokens: int = 262144

    @classmethod
    def tiny(cls) -> "ProfileGrid":
        """A grid for tiny CPU models (seconds, not minutes)."""
        return cls(prefill_tokens=(8, 32, 128, 256), prefill_ctx=(0, 128), prefill_seqs=(1, 2),
                   decode_bs=(1, 2, 4, 8, 16), decode_ctx=(32, 128, 512), decode_steps=8,
                   mixed_chunks=(16, 64), shared_bs=(4, 16), shared_ctx=(64,), shared_suffix=8,
                   max_case_tokens=16384)

    @classmethod
    def long(cls) -> "ProfileGrid":
        """The full grid plus long contexts, for long-context models: prefill chunks over up to
        28,672 cached tokens and decodes over up to 28,672-token contexts (cases that do not fit
        the pool or ``max_model_len`` are skipped as usual)."""
        return cls(prefill_ctx=(0, 1024, 4096, 8192, 16384, 28672),
                   decode_ctx=(128, 512, 1024, 2048, 4096, 8192, 16384, 28672),
                   shared_ctx=(512, 2048, 4096, 16384))


# The grids by name (``--grid``): a name -> a grid factory.
GRIDS: dict[str, Callable[[], ProfileGrid]] = {"full": ProfileGrid, "tiny": ProfileGrid.tiny, "long": ProfileGrid.long}


@dataclass(frozen=True, slots=True)
class Case:
    """One grid point: ``kind`` is "prefill", "decode" or "shared"; see `ProfileGrid`."""

    kind: str
    tokens: int
    ctx: int
    seqs: int

    def footprint(self, grid: ProfileGrid) -> int:
        if self.kind == "prefill":
            return self.ctx + self.tokens + self.seqs
        mixed = max(grid.mixed_chunks) * (grid.decode_steps // max(grid.mixed_every, 1) + 1)
        if self.kind == "shared":
            return self.ctx + self.seqs * (grid.shared_suffix + grid.decode_steps + 1) + mixed
        return self.seqs * (self.ctx + grid.decode_steps + 1) + mixed


@dataclass(slots=True)
class ProfileResult:
    """The profile: step rows (``StepRecord.as_row`` + phase, case), the cases run and skipped,
    and facts about the engine (device, dtype, pages, overlap) for the calibration's provenance."""

    steps: pd.DataFrame
    cases_run: int
    cases_skipped: int
    info: dict[str, Any] = field(default_factory=dict)


def grid_cases(grid: ProfileGrid, capacity_tokens: int, max_model_len: int, seed: int = 0) -> tuple[list[Case], int]:
    """Every case of ``grid`` that fits, in a seeded random order (so that a budget cut keeps a
    spread of shapes), and how many were dropped for not fitting."""
    cases = [Case("prefill", t, c, n) for t in grid.prefill_tokens for c in grid.prefill_ctx
             for n in grid.prefill_seqs if t // n >= 1]
    cases += [Case("decode", 1, c, b) for b in grid.decode_bs for c in grid.decode_ctx]
    cases += [Case("shared", 1, c, b) for b in grid.shared_bs for c in grid.shared_ctx]
    ok = [c for c in cases if c.footprint(grid) <= min(capacity_tokens, grid.max_case_tokens)
          and c.ctx + c.tokens // c.seqs + grid.decode_steps + 2 <= max_model_len]
    order = np.random.default_rng(seed).permutation(len(ok))
    return [ok[i] for i in order], len(cases) - len(ok)


class _Driver:
    """Adds requests with fresh ids and random prompts to one engine and steps it to idle."""

    def __init__(self, eng: Engine, seed: int) -> None:
        self.eng = eng
        self.rng = np.random.default_rng(seed)
        self.vocab = eng.model_config.vocab_size
        self.next_rid = 10_000_000

    def prompt(self, n: int) -> np.ndarray:
        return self.rng.integers(1, self.vocab, size=n, dtype=np.int64).astype(np.int32)

    def add(self, prompt: np.ndarray, max_tokens: int) -> None:
        self.next_rid += 1
        self.eng.add(Req(self.next_rid, prompt, SamplingParams(temperature=0.0, max_tokens=max_tokens,
                                                                ignore_eos=True), arrival=self.eng.now()))

    def drain(self, on_step: Callable[[int], None] | None = None) -> None:
        k = 0
        while self.eng.has_work():
            if on_step is not None:
                on_step(k)
            self.eng.step()
            k += 1


def run_case(drv: _Driver, case: Case, grid: ProfileGrid) -> None:
    """Execute one grid case to completion on ``drv.eng`` (which must be idle)."""
    if case.kind == "prefill":
        prefix = drv.prompt(case.ctx) if case.ctx else np.empty(0, np.int32)
        if case.ctx:
            drv.add(prefix, 1)          # leaves the prefix in the radix cache (a hit below)
            drv.drain()
        per = max(case.tokens // case.seqs, 1)
        for _ in range(case.seqs):
            drv.add(np.concatenate([prefix, drv.prompt(per)]), 1)
        drv.drain()
        return
    shared = case.kind == "shared"
    prefix = drv.prompt(case.ctx) if shared else np.empty(0, np.int32)
    if shared:
        drv.add(prefix, 1)  # the common prefix, left in the radix cache
        drv.drain()
    owns = [drv.prompt(grid.shared_suffix) if shared else drv.prompt(case.ctx) for _ in range(case.seqs)]
    if not shared:  # each prompt once, left in the radix cache: the batch then starts together
        for own in owns:
            drv.add(own, 1)
        drv.drain()
    for own in owns:
        drv.add(np.concatenate([prefix, own]), grid.decode_steps + 1)
    # the prefill left after the cache hits: the suffix, or a decode prompt's partial last page
    new = grid.shared_suffix if shared else min(case.ctx, drv.eng.sched_config.page_size)
    prefill_steps = -(-case.seqs * new // max(drv.eng.sched_config.max_num_batched_tokens, 1)) + 1
    chunks = grid.mixed_chunks

    def maybe_mix(k: int) -> None:
        j = k - prefill_steps
        if grid.mixed_every > 0 and j > 0 and j % grid.mixed_every == 0 and j < grid.decode_steps - 1:
            n = int(chunks[int(drv.rng.integers(len(chunks)))])
            n = min(n, drv.eng.sched_config.max_model_len - len(prefix) - 2)
            drv.add(np.concatenate([prefix, drv.prompt(n)]), 1)

    drv.drain(maybe_mix)


def step_rows(records: Sequence[Any], phase: str, case: int) -> list[dict[str, Any]]:
    """The profile's rows of ``records``: each `StepRecord.as_row` with its ``phase`` and ``case``."""
    return [{**r.as_row(), "phase": phase, "case": case} for r in records]


def profile_engine(eng: Engine, grid: ProfileGrid, budget_s: float | None, replay_workload_obj: Any = None,
                   replay_share: float = 0.25, warmup: bool = True, seed: int = 0,
                   progress: bool = True, max_cases: int | None = None,
                   replay_requests: int | None = None) -> ProfileResult:
    """Run ``grid`` cases on ``eng`` until ``(1 - replay_share) * budget_s`` has passed or
    ``max_cases`` cases ran, then replay ``replay_workload_obj`` (a `Workload`) if given: its
    first ``replay_requests`` requests, else the trace seconds that fit the time left.

    ``budget_s=None`` sets no wall-clock limit: the work is then bounded by counts alone
    (``max_cases``, or the whole grid; ``replay_requests``, or the whole workload), so that the
    same rows come out on a fast and on a loaded machine.

    The first few warm-up steps (kernel selection, allocator growth) are run and not recorded.
    The prefix cache is flushed between cases so that hits happen only where a case asks."""
    t0 = time.perf_counter()
    drv = _Driver(eng, seed)
    sc = eng.sched_config
    capacity = sc.num_pages * sc.page_size
    if warmup:
        for n in (16, 256):
            drv.add(drv.prompt(n), 4)
        drv.drain()
        eng.flush_cache()
    cases, skipped = grid_cases(grid, int(capacity * 0.9), sc.max_model_len, seed)
    rows: list[dict[str, Any]] = []
    limit = len(cases) if max_cases is None else max(0, int(max_cases))
    grid_deadline = (float("inf") if budget_s is None else
                     t0 + budget_s * (1.0 - replay_share if replay_workload_obj is not None else 1.0))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(cases), desc="profile", unit="case", file=sys.stderr)
    run = 0
    for i, case in enumerate(cases):
        if run >= limit or time.perf_counter() >= grid_deadline:
            break
        n0 = len(eng.steps)
        run_case(drv, case, grid)
        rows += step_rows(eng.steps[n0:], "grid", i)
        eng.flush_cache()
        run += 1
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    wl = None
    if replay_workload_obj is not None and replay_requests is not None:
        wl = replay_workload_obj.head(int(replay_requests))
    elif replay_workload_obj is not None and budget_s is None:
        wl = replay_workload_obj
    elif replay_workload_obj is not None:
        left = t0 + budget_s - time.perf_counter()
        if left > 1.0:
            wl = replay_workload_obj.first_seconds(left * 0.5)
    if wl is not None and len(wl):
        from twinserve.engine.replay import replay_workload

        n0 = len(eng.steps)
        replay_workload(eng.cfg, wl, progress=progress, engine=eng)
        rows += step_rows(eng.steps[n0:], "replay", -1)
    info = {"device": str(eng.device), "dtype": str(eng.dtype).replace("torch.", ""),
            "num_pages": sc.num_pages, "page_size": sc.page_size, "overlap": bool(eng.overlap),
            "cases_run": run, "cases_total": len(cases), "cases_unfit": skipped,
            "wall_s": time.perf_counter() - t0}
    return ProfileResult(pd.DataFrame(rows), run, len(cases) - run + skipped, info)


def model_dir_for(model: str, work: Path) -> tuple[str, str, str]:
    """``(path, load_format, name)``: a directory with config.json is used as is (its safetensors
    when present, else dummy weights); a shape name gets its config.json written under ``work``
    and random weights."""
    p = Path(model)
    if p.is_dir() and (p / "config.json").exists():
        has_weights = any(p.glob("*.safetensors"))
        return str(p), "safetensors" if has_weights else "dummy", p.name
    from twinserve.core.model_shapes import get_shape

    shape = get_shape(model)
    d = work / f"model-{shape.name}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(shape.to_hf_config(), indent=2))
    return str(d), "dummy", shape.name


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="Profile the engine over a grid of step shapes.")
    ap.add_argument("--model", required=True, help="a shape name (random weights) or a model directory")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="wall-clock budget (default 240 on CUDA, 30 on CPU; none when --max-cases "
                         "or --replay-requests bound the work by counts)")
    ap.add_argument("--max-cases", type=int, default=None,
                    help="run at most this many grid cases (a count bound: the same rows on any machine)")
    ap.add_argument("--replay-requests", type=int, default=None,
                    help="replay the first N requests of the replay workload (a count bound)")
    ap.add_argument("--grid", choices=tuple(GRIDS), default=None,
                    help="default: tiny on CPU, full on CUDA; long adds long contexts (long-context models)")
    ap.add_argument("--replay", default=None,
                    help="workload of the replay slice ('' = none; default azure_conv on CUDA, "
                         "a short-prompt poisson on CPU)")
    ap.add_argument("--replay-rate", type=float, default=None, help="req/s of the replay slice")
    ap.add_argument("--replay-kwargs", default=None,
                    help="JSON kwargs of the replay workload builder (CPU default: short poisson)")
    ap.add_argument("--replay-share", type=float, default=0.25)
    ap.add_argument("--spec-replay", default=None, metavar="METHOD:K",
                    help="then replay a real-text workload on a second engine with speculation "
                         "(e.g. ngram:8; rows of phase 'spec'; needs a model directory with a chat template)")
    ap.add_argument("--spec-workload", default="code_edit", help="workload of the speculative phase")
    ap.add_argument("--spec-kwargs", default=None,
                    help="JSON kwargs of its builder (default: 64 requests at 8 req/s; code_edit outputs up to 256)")
    ap.add_argument("--num-pages", type=int, default=None)
    ap.add_argument("--cpu-kv-tokens", type=int, default=65536)
    ap.add_argument("--work-dir", default="/tmp/twinserve-profile")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--out", default=None, help="steps parquet to write")
    return ap


def profile_from_args(args: argparse.Namespace) -> tuple[ProfileResult, str]:
    """Build the engine from CLI args, profile it, shut it down; returns (result, model name)."""
    import torch

    if args.threads:
        torch.set_num_threads(int(args.threads))
    path, fmt, name = model_dir_for(args.model, Path(args.work_dir))
    cfg = EngineConfig(model=path, load_format=fmt, device=args.device, dtype=args.dtype,
                       num_pages=args.num_pages, cpu_kv_tokens=args.cpu_kv_tokens, seed=args.seed)
    eng = Engine(cfg)
    try:
        cuda = eng.device.type == "cuda"
        counted = args.max_cases is not None or args.replay_requests is not None
        budget = args.budget_s if args.budget_s is not None else (None if counted else 240.0 if cuda else 30.0)
        grid_name = args.grid or ("full" if cuda else "tiny")
        grid = GRIDS[grid_name]()
        wl = None
        replay = args.replay if args.replay is not None else ("azure_conv" if cuda else "poisson")
        if replay:
            from twinserve.core.workload import build as build_workload

            kw: dict[str, Any] = {"seed": args.seed}
            if args.replay_rate:
                kw["rate"] = float(args.replay_rate)
            if args.replay_kwargs:
                kw.update(json.loads(args.replay_kwargs))
            elif args.replay is None and not cuda:
                kw.update(CPU_REPLAY)
            wl = build_workload(replay, **kw).with_vocab(eng.model_config.vocab_size)
        res = profile_engine(eng, grid, budget, wl, args.replay_share, seed=args.seed,
                             progress=not args.no_progress, max_cases=args.max_cases,
                             replay_requests=args.replay_requests)
        res.info.update(budget_s=budget, grid=grid_name, replay=replay or None,
                        replay_rate=args.replay_rate, model_path=path, load_format=fmt,
                        gpu_name=torch.cuda.get_device_name(eng.device) if cuda else "cpu")
    finally:
        eng.shutdown()
    if args.spec_replay:
        from twinserve.engine.profile_spec import spec_replay_rows

        rows = spec_replay_rows(cfg, args.spec_replay, args.spec_workload, args.spec_kwargs, args.seed,
                                progress=not args.no_progress)
        res.steps = pd.concat([res.steps, pd.DataFrame(rows)], ignore_index=True)
        res.info.update(spec_replay=args.spec_replay, spec_workload=args.spec_workload, spec_rows=len(rows))
    return res, name


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    res, name = profile_from_args(args)
    out = Path(args.out or f"{args.work_dir}/{name}_steps.parquet")
    out.parent.mkdir(parents=True, exist_ok=True)
    res.steps.to_parquet(out, index=False)
    print(json.dumps({"out": str(out), "rows": len(res.steps), **res.info}, default=str))


if __name__ == "__main__":
    main()
