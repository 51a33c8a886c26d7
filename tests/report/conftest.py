"""Synthetic run folders in the format `twinserve-run` writes (for tests that must not depend on
the simulator): requests.parquet, steps.parquet, summary.json, .hydra/{config,overrides}.yaml."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

POLICY_SLOWDOWN = {"fcfs": 1.0, "sjf": 0.8, "lpm": 0.7, "priority": 0.9}


def write_run(path: Path, *, backend: str = "sim", scheduler: str = "fcfs", cache: str = "radix",
              rate: float = 2.0, n: int = 40, seed: int = 0, replicas: int = 1,
              extra_overrides: tuple[str, ...] = ()) -> Path:
    """One fake run whose latencies grow with rate and depend on policy/cache/backend."""
    rng = np.random.default_rng(seed + int(rate * 100) + zlib.crc32((scheduler + cache + backend).encode()) % 1000)
    load = rate / 8.0
    slow = POLICY_SLOWDOWN.get(scheduler, 1.0) * (0.8 if cache == "radix" else 1.0)
    slow *= 1.1 if backend != "sim" else 1.0
    arrival = np.cumsum(rng.exponential(1.0 / rate, n))
    ttft = slow * (0.05 + rng.exponential(0.2 * load / max(1e-3, 1 - min(load, 0.95)), n))
    out_tokens = rng.integers(1, 60, n)
    tpot = slow * (0.01 + 0.01 * load) * rng.uniform(0.8, 1.2, n)
    first = arrival + ttft
    finish = first + tpot * (out_tokens - 1)
    token_times = [list(f + t * np.arange(k)) for f, t, k in zip(first, tpot, out_tokens)]
    requests = pd.DataFrame({
        "rid": np.arange(n), "replica": np.arange(n) % replicas, "tenant": "default",
        "priority": rng.integers(0, 3, n), "arrival_s": arrival,
        "scheduled_s": arrival + ttft * 0.5, "first_token_s": first, "finish_s": finish,
        "prompt_tokens": rng.integers(10, 200, n), "output_tokens": out_tokens,
        "cached_tokens": rng.integers(0, 10, n) if cache == "radix" else np.zeros(n, int),
        "preemptions": np.zeros(n, int), "finish_reason": "length", "token_times": token_times,
    })
    steps_n = 120
    total_pages = 512
    used = rng.integers(0, 300, steps_n)
    cached = rng.integers(0, 100, steps_n) if cache == "radix" else np.zeros(steps_n, int)
    steps = pd.DataFrame({
        "step": np.arange(steps_n), "replica": np.arange(steps_n) % replicas,
        "start": np.linspace(0, finish.max(), steps_n), "duration": np.full(steps_n, 0.02),
        "num_seqs": rng.integers(1, 16, steps_n), "num_decodes": rng.integers(0, 10, steps_n),
        "num_prefills": rng.integers(0, 3, steps_n), "new_tokens": rng.integers(1, 300, steps_n),
        "prefill_tokens": rng.integers(0, 300, steps_n), "decode_ctx": rng.integers(0, 3000, steps_n),
        "prefill_ctx": rng.integers(0, 300, steps_n), "prefill_attn": rng.integers(0, 9000, steps_n),
        "padded_decodes": rng.integers(0, 16, steps_n), "max_ctx": rng.integers(0, 400, steps_n),
        "num_waiting": rng.integers(0, 5, steps_n), "num_running": rng.integers(1, 16, steps_n),
        "free_pages": total_pages - used - cached, "used_pages": used, "cached_pages": cached,
        "num_preempted": np.zeros(steps_n, int), "cpu_s": np.full(steps_n, 1e-4),
    })
    duration = float(finish.max() - arrival.min())
    tpot_ms = 1e3 * tpot[out_tokens > 1]
    summary = {
        "duration": duration, "completed": n, "total_input_tokens": int(requests.prompt_tokens.sum()),
        "total_output_tokens": int(out_tokens.sum()), "request_throughput": n / duration,
        "request_goodput": None, "failed": 0,
        "output_throughput": float(out_tokens.sum()) / duration,
        "total_token_throughput": float(out_tokens.sum() + requests.prompt_tokens.sum()) / duration,
        "mean_ttft_ms": float(1e3 * ttft.mean()), "median_ttft_ms": float(1e3 * np.median(ttft)),
        "p99_ttft_ms": float(1e3 * np.percentile(ttft, 99)),
        "mean_tpot_ms": float(tpot_ms.mean()), "p99_tpot_ms": float(np.percentile(tpot_ms, 99)),
        "mean_e2el_ms": float(1e3 * (finish - arrival).mean()),
        "p99_e2el_ms": float(1e3 * np.percentile(finish - arrival, 99)),
        "backend": backend, "model": "tiny", "hardware": "h100", "scheduler": scheduler,
        "memory": "on_demand", "cache": cache, "workload": "sessions", "rate": rate,
    }
    overrides = [f"backend={backend}", f"scheduler={scheduler}", f"cache={cache}",
                 f"workload.rate={rate}", *extra_overrides]
    config = {"backend": {"name": backend}, "scheduler": {"name": scheduler, "max_running": 64},
              "cache": {"name": cache}, "memory": {"name": "on_demand"},
              "workload": {"name": "sessions", "rate": rate, "num_requests": n}, "seed": seed}
    (path / ".hydra").mkdir(parents=True, exist_ok=True)
    requests.to_parquet(path / "requests.parquet", index=False)
    steps.to_parquet(path / "steps.parquet", index=False)
    (path / "summary.json").write_text(json.dumps(summary, indent=1))
    (path / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    return path


def write_sweep(root: Path, *, backends=("sim",), schedulers=("fcfs", "sjf"), caches=("none", "radix"),
                rates=(1.0, 2.0, 4.0)) -> Path:
    """A Hydra-style multirun folder: numbered job folders plus multirun.yaml."""
    root.mkdir(parents=True, exist_ok=True)
    i = 0
    for b in backends:
        for s in schedulers:
            for c in caches:
                for r in rates:
                    write_run(root / str(i), backend=b, scheduler=s, cache=c, rate=r)
                    i += 1
    (root / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"mode": "MULTIRUN"}}))
    return root


@pytest.fixture
def sweep_dir(tmp_path: Path) -> Path:
    return write_sweep(tmp_path / "multirun" / "sweep")


@pytest.fixture
def both_backends_dir(tmp_path: Path) -> Path:
    return write_sweep(tmp_path / "both", backends=("sim", "engine"), schedulers=("fcfs",),
                       caches=("radix",), rates=(1.0, 4.0))


@pytest.fixture(scope="session")
def make_run():
    """The `write_run` function (test modules cannot import conftest under importlib mode)."""
    return write_run


@pytest.fixture(scope="session")
def make_sweep():
    return write_sweep


def app_available() -> bool:
    """Whether the Hydra app (`twinserve-run`) exists in this checkout."""
    import importlib.util

    return importlib.util.find_spec("twinserve.experiments.app") is not None


TINY_SWEEP = ("workload=sessions", "workload.num_sessions=4", "workload.turns=2",
              "workload.think_time=0.5", "kv.num_pages=200", "scheduler.name=fcfs,lpm",
              "cache=radix,none", "workload.rate=2,8", "slo.ttft_ms=300", "slo.tpot_ms=8",
              "print_summary=false")


@pytest.fixture(scope="session")
def sim_sweep(tmp_path_factory) -> tuple[Path, bool]:
    """A small simulator sweep made by `twinserve-run -m` (2 policies x 2 caches x 2 rates),
    or, when the app is missing, a synthetic one. Returns (folder, made_by_app)."""
    import os
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("sim_sweep") / "multirun"
    if not app_available():
        return write_sweep(root, schedulers=("fcfs", "lpm"), rates=(2.0, 8.0)), False
    env = {**os.environ, "TWINSERVE_JOBS": "1"}
    cmd = [sys.executable, "-m", "twinserve.experiments.app", "-m", *TINY_SWEEP,
           f"hydra.sweep.dir={root}"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return root, True
