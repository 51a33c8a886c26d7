#!/usr/bin/env bash
# FlashInfer's plans with and without `EngineConfig.fast_plan` (engine/attention/host_max.py), in
# one command on the GPU host (repository root; carry .whl and .fik):
#   bash engine/scripts/gpu_fast_plan.sh OUTDIR [rounds]
# 1. the GPU tests of the plan paths (same greedy tokens either way; the token graphs);
# 2. bench.host_steps, the fixed mixed (32 decodes + a 128-token prompt) and decode steps,
#    fast_plan on and off by turns (`rounds` of each, 2 repeats a run): qwen3-0.6b, and llama3-8b
#    with 32 and 128 decodes (tensor-core decode, whose plan scans the batch's KV lengths);
# 3. bench.offline, mini-sglang's offline recipe, on and off (qwen3-0.6b, llama3-8b).
# JSON lines in OUTDIR (host.jsonl, bench.jsonl), medians per setting at the end.
set -u
OUT_DIR=${1:?usage: gpu_fast_plan.sh OUTDIR [rounds]}; ROUNDS=${2:-3}
. experiments/scripts/gpu_setup.sh "$OUT_DIR/setup.log"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/engine/test_engine_gpu.py \
  -k "fast_plan or token_graphs" 2>&1 | tail -3
for r in $(seq "$ROUNDS"); do
  for flag in "" "--no-fast-plan"; do
    timeout 90 python3 -m twinserve.bench.host_steps --shape qwen3-0.6b --repeats 2 $flag \
      --json "$OUT_DIR/host.jsonl" 2>&1 | grep "^repeat" | sed "s/^/qwen3-0.6b ${flag:-fast} /"
  done
done
for d in 32 128; do
  for flag in "" "--no-fast-plan"; do
    timeout 120 python3 -m twinserve.bench.host_steps --shape llama3-8b --decodes "$d" --repeats 2 $flag \
      --json "$OUT_DIR/host.jsonl" 2>&1 | grep "^repeat" | sed "s/^/llama3-8b ${flag:-fast} /"
  done
done
for m in qwen3-0.6b llama3-8b; do
  for flag in "" "--no-fast-plan"; do
    timeout 150 python3 -m twinserve.bench.offline --shape "$m" $flag --json "$OUT_DIR/bench.jsonl" 2>&1 \
      | grep "^offline" | sed "s/^/${flag:-fast} /"
  done
done
python3 - "$OUT_DIR/host.jsonl" <<'PY'
import sys
import pandas as pd
d = pd.read_json(sys.argv[1], lines=True)
g = d.groupby(["model", "decodes", "kind", "fast_plan"])
print((g[["launch_s", "launch_cpu_s", "complete_s", "duration", "period_s"]].median() * 1e3).round(3).to_string())
PY
