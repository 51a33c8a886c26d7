"""Offline throughput and decode-step benchmarks: ``twinserve-bench offline``.

Throughput (mini-sglang's offline recipe): 256 requests, prompt and output lengths uniform in
[100, 1024] (numpy seed 0), prompt ids uniform in [0, 10000), ignore_eos; one warm-up run, then
timed runs; prints output tokens/s. ``--no-overlap`` / ``--no-cuda-graphs`` switch those off;
``--variants`` adds, on the same engine, a run without overlap and one without graph replay.

Decode micro-benchmark (``--decode``): batches of 1, 64 and 256 requests at context 1024, median
device time of a decode step against the bandwidth bound (weight bytes + KV bytes) / the device's
device-to-device copy bandwidth, measured at the start of the benchmark (`copy_bandwidth`; bytes
read plus bytes written per second: about 4.3 TB/s on the H200 host).

Models: ``--model DIR`` (a checkpoint) or ``--shape NAME`` (config only, random "dummy" weights).
``--tp N`` runs tensor-parallel on N GPUs (the decode bound is then per GPU: a rank's share of
the weights and of the KV bytes).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Any

import numpy as np
import torch

from twinserve.core.graph_plan import DEFAULT_PLAN, TOKEN_GRAPH_MODES
from twinserve.core.model_shapes import ModelShape
from twinserve.core.request import Req
from twinserve.core.sampling import SamplingParams
from twinserve.engine.config import EngineConfig
from twinserve.engine.engine import Engine


def copy_bandwidth(device: torch.device, nbytes: int = 1 << 30, reps: int = 10) -> float:
    """Bytes read plus bytes written per second by a copy of ``nbytes`` within ``device``
    (median of ``reps`` copies after one untimed; CUDA events on a GPU, the wall clock
    elsewhere): the bandwidth a bandwidth bound divides by."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - t)
    return 2 * nbytes / float(np.median(times))


def recipe(n: int = 256, lo: int = 100, hi: int = 1024, seed: int = 0, vocab: int = 10000
           ) -> tuple[list[np.ndarray], list[int]]:
    rng = np.random.default_rng(seed)
    plens = rng.integers(lo, hi + 1, n)
    olens = rng.integers(lo, hi + 1, n)
    prompts = [rng.integers(0, vocab, p).astype(np.int32) for p in plens]
    return prompts, [int(o) for o in olens]


def phase_times(recs) -> dict[str, float]:
    """Device seconds of steps with prefill work vs decode-only steps, and their counts."""
    pre = [r.duration for r in recs if r.features.prefill_tokens]
    dec = [r.duration for r in recs if not r.features.prefill_tokens]
    return {"prefill_steps": len(pre), "prefill_s": float(sum(pre)), "decode_steps": len(dec),
            "decode_s": float(sum(dec)), "host_cpu_s": float(sum(r.cpu_s for r in recs))}


def run_offline(eng: Engine, prompts: list[np.ndarray], olens: list[int], temperature: float,
                rid0: int) -> tuple[float, int, int]:
    """Serve all requests as one batch; returns (seconds, output tokens, steps)."""
    steps0 = len(eng.steps)
    t = time.perf_counter()
    for i, (p, o) in enumerate(zip(prompts, olens)):
        eng.add(Req(rid0 + i, p, SamplingParams(temperature=temperature, max_tokens=o, ignore_eos=True),
                    arrival=eng.now()))
    produced = 0
    while eng.has_work():
        for out in eng.step():
            produced += len(out.new_token_ids)
    return time.perf_counter() - t, produced, len(eng.steps) - steps0


def decode_bench(eng: Engine, batch: int, copy_bw: float, ctx: int = 1024, steps: int = 24,
                 rid0: int = 10_000_000) -> dict[str, float]:
    rng = np.random.default_rng(batch)
    first = len(eng.steps)
    for i in range(batch):
        eng.add(Req(rid0 + i, rng.integers(0, min(10000, eng.model_config.vocab_size), ctx - 1).astype(np.int32),
                    SamplingParams(temperature=0.0, max_tokens=steps + 1, ignore_eos=True)))
    while eng.has_work():
        eng.step()
    recs = [r for r in eng.steps[first:] if r.features.num_decodes == batch and r.features.num_prefills == 0]
    mc, geom = eng.model_config, eng.pool.geom
    elem = torch.empty((), dtype=geom.dtype).element_size()
    params = ModelShape.from_hf_config(mc.raw).param_count()
    weight_bytes = params * elem / eng.tp_size  # one rank's share (norms replicated: negligible)
    mean_ctx = float(np.mean([r.features.decode_ctx / batch for r in recs]))
    kv_bytes = batch * mean_ctx * 2 * mc.num_layers * geom.num_kv_heads * geom.head_dim * elem
    dur = float(np.median([r.duration for r in recs]))
    bound = (weight_bytes + kv_bytes) / copy_bw
    return {"batch": batch, "ctx": mean_ctx, "steps": len(recs), "step_ms": dur * 1e3, "copy_bw": copy_bw,
            "bound_ms": bound * 1e3, "fraction_of_bound": bound / dur,
            "wall_ms": float(np.median(np.diff([r.start for r in recs]))) * 1e3 if len(recs) > 2 else float("nan")}


def append_jsonl(path: str | None, rows: list[dict[str, Any]]) -> None:
    """Append ``rows`` as JSON lines to ``path`` (nothing when ``path`` is None)."""
    if path:
        with open(path, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


def engine_args(shape: str, model: str | None = None, device: str | None = None, cache: str = "radix"
                ) -> argparse.Namespace:
    """`build_engine`'s arguments with this CLI's defaults (`build_parser`), for other benchmarks."""
    argv = ["--shape", shape, "--cache", cache]
    argv += ["--model", model] if model else []
    argv += ["--device", device] if device else []
    return build_parser().parse_args(argv)


def build_engine(args: argparse.Namespace, **over: Any) -> Engine:
    model, load_format = args.model, "safetensors"
    if model is None:
        from twinserve.engine.model_maker import make_model

        model = str(make_model(args.shape, tempfile.mkdtemp(prefix="twinserve-bench-"), weights=False))
        load_format = "dummy"
    kw: dict[str, Any] = dict(model=model, load_format=load_format, page_size=args.page_size,
                              cuda_graphs=not args.no_cuda_graphs, overlap=False if args.no_overlap else None,
                              max_graph_bs=args.max_graph_bs, cache=args.cache,
                              piecewise_max_tokens=args.piecewise_max_tokens,
                              token_graph_mode=args.token_graphs, hybrid_decode_heavy=not args.no_decode_heavy,
                              scheduler={"max_num_batched_tokens": args.max_tokens,
                                         "chunk_size": args.max_tokens, "max_running": args.max_running})
    if args.device:
        kw["device"] = args.device
    if args.tp > 1:
        kw.update(tp_size=args.tp, tp_cuda_graphs=args.tp_cuda_graphs)
    if args.decode_tensor_cores != "auto":
        kw["decode_tensor_cores"] = args.decode_tensor_cores == "on"
    if args.no_fast_plan:
        kw["fast_plan"] = False
    kw.update(over)
    return Engine(EngineConfig(**kw))


def add_token_graph_args(ap: argparse.ArgumentParser) -> None:
    """``--piecewise-max-tokens``, ``--token-graphs`` and ``--no-decode-heavy``
    (`EngineConfig.piecewise_max_tokens`, ``token_graph_mode``, ``hybrid_decode_heavy``), for this
    CLI and the others that build an engine."""
    ap.add_argument("--piecewise-max-tokens", type=int, default=DEFAULT_PLAN.piecewise_max_tokens,
                    help="largest prefill/mixed step that replays a token graph (0: none)")
    ap.add_argument("--token-graphs", default=DEFAULT_PLAN.token_graph_mode, choices=TOKEN_GRAPH_MODES,
                    help="token graphs: the whole forward (full), the dense layers only (piecewise), "
                         "or full for steps of <= 32 sequences, else piecewise (hybrid)")
    ap.add_argument("--no-decode-heavy", action="store_true",
                    help="hybrid: decode-heavy steps of > 32 sequences take the pieces (EngineConfig.hybrid_decode_heavy)")


def add_fast_plan_arg(ap: argparse.ArgumentParser) -> None:
    """``--no-fast-plan`` (`EngineConfig.fast_plan` off), for this CLI and the others that build
    an engine."""
    ap.add_argument("--no-fast-plan", action="store_true",
                    help="FlashInfer's plans scan host tensors with the builtin max (EngineConfig.fast_plan)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="qwen3-0.6b")
    ap.add_argument("--model", default=None, help="checkpoint dir (default: --shape with dummy weights)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (GPUs)")
    ap.add_argument("--tp-cuda-graphs", action="store_true",
                    help="CUDA graphs with --tp > 1 (experimental; off by default, see docs/engine.md)")
    ap.add_argument("--num-requests", type=int, default=256)
    ap.add_argument("--min-len", type=int, default=100)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--runs", type=int, default=1, help="timed runs after the warm-up")
    ap.add_argument("--no-overlap", action="store_true")
    ap.add_argument("--no-cuda-graphs", action="store_true")
    ap.add_argument("--max-graph-bs", type=int, default=DEFAULT_PLAN.max_graph_bs)
    add_token_graph_args(ap)
    ap.add_argument("--max-running", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=16384, help="token budget per step (= chunk size)")
    ap.add_argument("--page-size", type=int, default=EngineConfig.page_size)
    ap.add_argument("--cache", default="radix")
    ap.add_argument("--decode-tensor-cores", choices=["auto", "on", "off"], default="auto")
    add_fast_plan_arg(ap)
    ap.add_argument("--variants", action="store_true",
                    help="after the timed runs, one run without overlap and one without CUDA graphs")
    ap.add_argument("--decode", action="store_true", help="also run the decode micro-benchmark")
    ap.add_argument("--skip-offline", action="store_true", help="skip the offline throughput runs")
    ap.add_argument("--json", default=None, help="append results as JSON lines to this file")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)

    t = time.perf_counter()
    eng = build_engine(args)
    setup = time.perf_counter() - t
    label = args.model or args.shape
    results: list[dict[str, Any]] = []
    if not args.skip_offline:
        vocab = min(10000, eng.model_config.vocab_size)
        prompts, olens = recipe(args.num_requests, args.min_len, args.max_len, vocab=vocab)
        wp, wo = recipe(32, args.min_len, args.max_len, seed=1, vocab=vocab)
        w_s, w_tok, _ = run_offline(eng, wp, [min(o, 64) for o in wo], args.temperature, 1_000_000)
        print(f"warm-up: {w_tok} tokens in {w_s:.2f} s (setup {setup:.1f} s)")
        modes = [(eng.overlap, eng.runner.use_graphs)] * args.runs
        if args.variants:
            modes += [(False, eng.runner.use_graphs), (eng.overlap, False)]
        for k, (ov, gr) in enumerate(modes):
            eng.set_mode(overlap=ov, cuda_graphs=gr)
            eng.flush_cache()  # each timed run starts cold (no prefix hits from earlier runs)
            s, tok, nsteps = run_offline(eng, prompts, olens, args.temperature, 2_000_000 * (k + 1))
            r = {"model": label, "kind": "offline", "run": k, "seconds": s, "output_tokens": tok,
                 "output_tok_s": tok / s, "steps": nsteps, "overlap": ov,
                 "cuda_graphs": gr, "temperature": args.temperature,
                 "num_pages": eng.sched_config.num_pages, "page_size": args.page_size,
                 "decode_tensor_cores": getattr(eng.attn, "tensor_cores", None),
                 "max_tokens": args.max_tokens, "tp": args.tp,
                 "fast_plan": getattr(eng.attn, "fast_plan", None)}
            r.update(phase_times(eng.steps[-nsteps:]))
            results.append(r)
            print(f"offline {label} tp={args.tp} run {k}: {tok} output tokens in {s:.2f} s = {tok / s:,.0f} tok/s "
                  f"({nsteps} steps, overlap={r['overlap']}, graphs={r['cuda_graphs']}, page={args.page_size}, "
                  f"tc={r['decode_tensor_cores']}, fast_plan={r['fast_plan']}; device s: prefill {r['prefill_s']:.2f} in "
                  f"{r['prefill_steps']} steps, decode {r['decode_s']:.2f}; host cpu {r['host_cpu_s']:.2f})")
    if args.decode:
        eng.set_mode(overlap=eng.cfg.overlap is not False and eng.device.type == "cuda",
                     cuda_graphs=eng.runner.graphs is not None)
        copy_bw = copy_bandwidth(eng.device)
        print(f"device-to-device copy: {copy_bw / 1e12:.2f} TB/s (read + write)")
        for b in (1, 64, 256):
            r = decode_bench(eng, b, copy_bw)
            r.update(model=label, kind="decode", page_size=args.page_size, tp=args.tp,
                     decode_tensor_cores=getattr(eng.attn, "tensor_cores", None))
            results.append(r)
            print(f"decode {label} tp={args.tp} page={args.page_size} tc={r['decode_tensor_cores']} batch={b:4d} "
                  f"ctx~{r['ctx']:.0f}: step {r['step_ms']:.3f} ms, "
                  f"bound {r['bound_ms']:.3f} ms ({100 * r['fraction_of_bound']:.0f}% of bound), "
                  f"wall/step {r['wall_ms']:.3f} ms")
    append_jsonl(args.json, results)
    eng.shutdown()


if __name__ == "__main__":
    main()
