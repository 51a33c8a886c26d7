#!/usr/bin/env bash
# Does keeping the host thread on a fast vCPU pay on the GPU host? One command there (repository
# root; carry .whl and .fik):  bash engine/scripts/gpu_cpu_chase.sh OUTDIR [shape] [repeats]
# 1. `engine.cpu_speed`: each vCPU's speed over 15 s with the machine idle;
# 2. `engine.host_bench --cpu-chase alternate`: the fixed mixed and decode steps, the chaser on in
#    even repeats and off (unpinned; its probe process still sweeping) in odd ones, so that the
#    host's changing states fall on both; JSON lines in OUTDIR/chase.jsonl; then the medians and
#    slow shares per setting. Next, if it pays: the fidelity suite with backend.cpu_chase=true.
set -u
OUT_DIR=${1:?usage: gpu_cpu_chase.sh OUTDIR [shape] [repeats]}; SHAPE=${2:-qwen3-0.6b}; REPEATS=${3:-120}
. experiments/scripts/gpu_setup.sh "$OUT_DIR/setup.log"
python3 -m twinserve.engine.cpu_speed --seconds 15 | tee "$OUT_DIR/cpu_speed.txt"
timeout 400 python3 -m twinserve.engine.host_bench --shape "$SHAPE" --steps 40 --repeats "$REPEATS" \
  --cpu-chase alternate --json "$OUT_DIR/chase.jsonl" 2>&1 | grep -v Warning | tail -4
python3 - "$OUT_DIR/chase.jsonl" <<'PY'
import sys
import pandas as pd
d = pd.read_json(sys.argv[1], lines=True)
d["launch_ms"] = d["launch_s"] * 1e3
fast = d.groupby("kind")["launch_ms"].transform(lambda s: s.quantile(0.05))
d["slow"] = d["launch_ms"] > 1.25 * fast
print(d.groupby(["kind", "cpu_chase"]).agg(n=("launch_ms", "size"), launch_median_ms=("launch_ms", "median"),
      launch_p90_ms=("launch_ms", lambda s: s.quantile(0.9)), slow_share=("slow", "mean"),
      period_median_ms=("period_s", lambda s: 1e3 * s.median())).round(3).to_string())
PY
