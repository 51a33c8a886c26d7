"""HTTP-path overhead: the same workload through the in-process engine and through the server.

    twinserve-bench http-overhead --model DIR [--device cuda] [--out overhead.json]
    # GPU host, e.g. a 0.6B model:
    twinserve-make-model --shape qwen3-0.6b --out /tmp/q06
    twinserve-bench http-overhead --model /tmp/q06 --device cuda --prompt-len 512 \
        --output-len 128 --num-requests 200 --saturate-requests 256 --repeats 2 --out overhead.json
    # CPU, tiny model:
    twinserve-bench http-overhead --model /tmp/tiny --device cpu --threads 1 \
        --prompt-len 64 --output-len 32 --num-requests 40 --saturate-requests 48 --repeats 2

Two scenarios, each run both ways on a fresh engine (each in its own process, after a short
warm-up workload on the same engine):

- ``saturate``: every request arrives at t=0: compares output-token throughput (target: the
  server loses at most 5 %) and mean TTFT (target: the server adds at most 20 ms);
- ``moderate``: Poisson arrivals at ``--rate`` req/s (default: half the in-process saturated
  request throughput): compares TTFT (target: the server adds at most 10 ms to mean and median).

The in-process side is `twinserve.engine.replay.replay_workload` (TTFT from the trace arrival on
the engine's clock); the HTTP side is `bench_client.bench_workload` against `launch.start_server`
(TTFT from the moment the client sends; the client opens its connections before the clock
starts, ``warm_connections``, as a long-running client holds them: connection set-up is not
what the comparison is about). Both use greedy sampling, ``ignore_eos`` and
``max_tokens = output_len``. The HTTP side also reports the CPU time each server process and the
client spend per output token (``http_cpu_us_per_token``; Linux): the engine worker's figure next
to the in-process engine's shows what the server adds inside the engine's own loop, the others
what must run on spare cores. ``--py-spy DIR`` samples each server process during the measured
HTTP runs (`bench.py_spy`). On CPU the server's four processes and the client share the cores
with the engine, so CPU numbers overstate what a GPU host (where the engine waits on the device)
would see.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

TTFT_BUDGET_MS = 10.0  # added mean and median TTFT at moderate load
SATURATED_TTFT_BUDGET_MS = 20.0  # added mean TTFT at saturation
THROUGHPUT_LOSS_BUDGET = 0.05


@dataclass(frozen=True)
class Target:
    """One target of the benchmark: ``check`` of a scenario's ``compare`` row; ``label`` says
    it for the table."""

    scenario: str
    label: str
    check: Callable[[dict[str, float]], bool]


TARGETS: Mapping[str, Target] = MappingProxyType({
    "throughput_ok": Target("saturate", f"throughput loss <= {100 * THROUGHPUT_LOSS_BUDGET:.0f} % (saturate)",
                            lambda c: c["throughput_loss"] <= THROUGHPUT_LOSS_BUDGET),
    "saturated_ttft_ok": Target("saturate", f"added mean TTFT <= {SATURATED_TTFT_BUDGET_MS:.0f} ms (saturate)",
                                lambda c: c["added_mean_ttft_ms"] <= SATURATED_TTFT_BUDGET_MS),
    "ttft_ok": Target("moderate", f"added TTFT <= {TTFT_BUDGET_MS:.0f} ms (moderate)",
                      lambda c: max(c["added_mean_ttft_ms"], c["added_median_ttft_ms"]) <= TTFT_BUDGET_MS),
})


def verdict(scenarios: dict[str, Any]) -> dict[str, bool | None]:
    """Each of `TARGETS` met (True), missed (False) or not measured (None: its scenario did
    not run)."""
    return {name: (t.check(scenarios[t.scenario]["compare"]) if t.scenario in scenarios else None)
            for name, t in TARGETS.items()}


KEYS = ("completed", "duration", "request_throughput", "output_throughput", "total_token_throughput",
        "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2el_ms")


@dataclass(slots=True)
class Scenario:
    name: str
    num_requests: int
    rate: float          # req/s; <= 0: all at t=0
    prompt_len: int
    output_len: int
    seed: int = 0


def _vocab(model: str) -> int:
    with open(os.path.join(model, "config.json")) as f:
        return int(json.load(f)["vocab_size"])


def build_workload(sc: Scenario, vocab: int) -> Any:
    from twinserve.core.workload import RequestSpec, Workload, synthetic

    n = sc.num_requests
    if sc.rate > 0:
        return synthetic(num_requests=n, rate=sc.rate, prompt_len=sc.prompt_len, output_len=sc.output_len,
                         seed=sc.seed, vocab_size=vocab, name=sc.name)
    specs = [RequestSpec(rid=i, arrival=0.0, prompt_len=sc.prompt_len, output_len=sc.output_len)
             for i in range(n)]
    return Workload(specs, name=sc.name, seed=sc.seed, vocab_size=vocab)


def _warmup(sc: Scenario) -> Scenario:
    return Scenario("warmup", min(16, sc.num_requests), 0.0, sc.prompt_len, min(sc.output_len, 16), 99)


def _inproc_child(engine_cfg: Any, sc: Scenario, out_path: str) -> None:
    from twinserve.core.metrics import requests_frame, summarize
    from twinserve.engine.engine import Engine
    from twinserve.engine.replay import replay_workload

    eng = Engine(engine_cfg)
    vocab = _vocab(engine_cfg.model)
    replay_workload(engine_cfg, build_workload(_warmup(sc), vocab), progress=False, engine=eng)
    eng.steps.clear()
    reqs, _ = replay_workload(engine_cfg, build_workload(sc, vocab), progress=False, engine=eng)
    summary = summarize(requests_frame(reqs, 0))
    eng.shutdown()
    with open(out_path, "w") as f:
        json.dump(summary, f)


def run_inprocess(engine_cfg: Any, sc: Scenario) -> dict[str, Any]:
    """The in-process replay in a fresh spawned process (its device memory is freed after;
    it inherits this process's environment, e.g. OMP_NUM_THREADS, like the server's workers)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "summary.json")
        p = multiprocessing.get_context("spawn").Process(target=_inproc_child, args=(engine_cfg, sc, out))
        p.start()
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"in-process replay failed (exit code {p.exitcode})")
        with open(out) as f:
            return json.load(f)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc; NaN elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def run_http(engine_cfg: Any, sc: Scenario, py_spy_dir: str | None = None, tag: str = "") -> dict[str, Any]:
    """The server path; the summary gets ``cpu_us_per_token``: CPU time of each server process
    and of this client per output token during the measured run. With ``py_spy_dir`` each
    server process is sampled by py-spy during that run (`bench.py_spy`; files ``{tag}-{process}.txt``)."""
    import httpx

    from twinserve.bench.py_spy import py_spy_record
    from twinserve.server.bench_client import BenchConfig, bench_workload
    from twinserve.server.launch import start_server

    vocab = _vocab(engine_cfg.model)
    with start_server(engine_cfg, queue_limit=None, request_timeout_s=None, debug=True) as h:
        cfg = BenchConfig(base_url=h.url, warm_connections=sc.num_requests)
        bench_workload(cfg, build_workload(_warmup(sc), vocab))
        info = httpx.get(f"{h.url}/debug/engine", timeout=10).json()
        pids = info["pids"]
        spy = py_spy_record(pids, py_spy_dir, tag or sc.name) if py_spy_dir else contextlib.nullcontext()
        with spy:
            before = {k: _cpu_s(p) for k, p in pids.items()}
            me = time.process_time()
            res = bench_workload(cfg, build_workload(sc, vocab))
            cpu = {k: _cpu_s(p) - before[k] for k, p in pids.items()}
            cpu["client"] = time.process_time() - me
    if res.errors:
        raise RuntimeError(f"{len(res.errors)} HTTP requests failed, first: {res.errors[0]}")
    ntok = max(1, int(res.summary["total_output_tokens"]))
    return {**res.summary, "cpu_us_per_token": {k: 1e6 * v / ntok for k, v in cpu.items()},
            "http_stack": info["http_stack"]}


def median_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    import numpy as np

    return {k: float(np.median([r[k] for r in runs])) for k in KEYS}


def compare(inproc: dict[str, Any], http: dict[str, Any]) -> dict[str, Any]:
    loss = 1.0 - http["output_throughput"] / inproc["output_throughput"]
    return {"throughput_loss": loss,
            "added_mean_ttft_ms": http["mean_ttft_ms"] - inproc["mean_ttft_ms"],
            "added_median_ttft_ms": http["median_ttft_ms"] - inproc["median_ttft_ms"],
            "added_mean_itl_ms": http["mean_itl_ms"] - inproc["mean_itl_ms"]}


def _table(results: dict[str, Any]) -> str:
    lines = [f"{'scenario':<10}{'path':<10}" + "".join(f"{k[:18]:>20}" for k in KEYS)]
    for name, r in results["scenarios"].items():
        for path in ("inprocess", "http"):
            s = r[path]
            lines.append(f"{name:<10}{path:<10}" + "".join(f"{float(s[k]):>20.2f}" for k in KEYS))
        c = r["compare"]
        cpu = ", ".join(f"{k} {v:.0f}" for k, v in r["http_cpu_us_per_token"].items())
        stack = r["http_stack"]
        lines.append(f"{'':<10}{'cpu':<10}us per output token on the HTTP path: {cpu} "
                     f"(API server on {stack['loop']} + {stack['http']})")
        lines.append(f"{'':<10}{'delta':<10}throughput loss {100 * c['throughput_loss']:.2f} %, "
                     f"added TTFT mean {c['added_mean_ttft_ms']:.2f} ms / median "
                     f"{c['added_median_ttft_ms']:.2f} ms, added ITL {c['added_mean_itl_ms']:.2f} ms")
    word = {True: "PASS", False: "FAIL", None: "not run"}
    lines.append("targets: " + "; ".join(f"{TARGETS[k].label}: {word[v]}" for k, v in results["verdict"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="twinserve-bench http-overhead", description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="model dir (twinserve-make-model writes one)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--load-format", default="safetensors")
    ap.add_argument("--max-model-len", type=int, default=None)
    ap.add_argument("--rate", type=float, default=0.0,
                    help="moderate scenario arrival rate (req/s); 0 = --load x the in-process "
                         "saturated request throughput (needs the saturate scenario, run first)")
    ap.add_argument("--load", type=float, default=0.5, help="moderate load as a fraction of saturation")
    ap.add_argument("--num-requests", type=int, default=100, help="moderate scenario requests")
    ap.add_argument("--saturate-requests", type=int, default=200)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--scenarios", default="saturate,moderate")
    ap.add_argument("--engine-kwargs", default="{}", help="extra EngineConfig fields as JSON")
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of each path per scenario, alternating which goes first; medians reported")
    ap.add_argument("--threads", type=int, default=None,
                    help="OMP_NUM_THREADS for every process (CPU: 1 avoids thread oversubscription)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--py-spy", default=None, metavar="DIR",
                    help="sample every server process with py-spy during each measured HTTP run "
                         "(pip install py-spy); collapsed stacks to DIR/{scenario}{run}-{process}.txt")
    a = ap.parse_args(argv)

    if a.py_spy:
        from twinserve.bench.py_spy import py_spy_binary
        from twinserve.core.errors import UserError

        try:
            py_spy_binary()
        except UserError as e:
            raise SystemExit(f"twinserve-bench http-overhead: {e}") from None
    if a.threads:
        os.environ["OMP_NUM_THREADS"] = str(a.threads)
    from twinserve.engine.config import EngineConfig

    ecfg = EngineConfig(model=a.model, device=a.device, dtype=a.dtype, load_format=a.load_format,
                        max_model_len=a.max_model_len, **json.loads(a.engine_kwargs))
    scenarios = {"moderate": Scenario("moderate", a.num_requests, a.rate, a.prompt_len, a.output_len),
                 "saturate": Scenario("saturate", a.saturate_requests, 0.0, a.prompt_len, a.output_len)}
    results: dict[str, Any] = {"engine_config": {k: v for k, v in asdict(ecfg).items()
                                                 if isinstance(v, (str, int, float, bool, type(None)))},
                               "scenarios": {}}
    for name in a.scenarios.split(","):
        sc = scenarios[name]
        if name == "moderate" and sc.rate <= 0:
            if "saturate" not in results["scenarios"]:
                raise SystemExit("--rate 0 (auto) needs the saturate scenario to run first")
            sat = results["scenarios"]["saturate"]["inprocess"]["request_throughput"]
            sc.rate = a.load * sat
            print(f"moderate load: {a.load:.2f} x {sat:.2f} req/s = {sc.rate:.2f} req/s", flush=True)
        t = time.perf_counter()
        runs: dict[str, list[dict[str, Any]]] = {"inprocess": [], "http": []}
        for i in range(a.repeats):
            order = ("inprocess", "http") if i % 2 == 0 else ("http", "inprocess")
            for path in order:
                runs[path].append(run_inprocess(ecfg, sc) if path == "inprocess"
                                  else run_http(ecfg, sc, a.py_spy, f"{name}{i}"))
        inproc, http = median_summary(runs["inprocess"]), median_summary(runs["http"])
        cpu = {k: float(sum(r["cpu_us_per_token"][k] for r in runs["http"]) / len(runs["http"]))
               for k in runs["http"][0]["cpu_us_per_token"]}
        results["scenarios"][name] = {"scenario": asdict(sc), "inprocess": inproc, "http": http,
                                      "compare": compare(inproc, http), "repeats": a.repeats,
                                      "http_cpu_us_per_token": cpu, "http_stack": runs["http"][0]["http_stack"],
                                      "runs": {p: [{k: r[k] for k in KEYS} for r in rs] for p, rs in runs.items()},
                                      "wall_s": time.perf_counter() - t}
    results["verdict"] = verdict(results["scenarios"])
    print(_table(results))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
