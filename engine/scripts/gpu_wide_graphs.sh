#!/usr/bin/env bash
# Token graphs above 2,048 tokens (`EngineConfig.piecewise_max_tokens` 2048 against a wider cap),
# in one command on the GPU host (repository root; carry .whl and .fik):
#   bash engine/scripts/gpu_wide_graphs.sh OUTDIR [wide cap, default 8192]
# 1. the GPU tests of graphs above 2,048 tokens (logits equal to the eager forward's);
# 2. bench/scripts/graph_cost.py: startup, graph count, KV pages and free memory at both caps;
# 3. bench.host_steps at both caps by turns: the fixed mixed step (32 decodes + 128 tokens) and
#    steps the wide cap turns into graphs: one decode + a 4,096-token prompt (whole in hybrid),
#    64 decodes + 3,072 (the pieces), 8 decodes + 7,000 (whole); qwen3-0.6b twice, llama3-8b once;
# 4. bench.offline, the offline recipe (16k-token chunks: eager at either cap), qwen3-0.6b.
# JSON lines in OUTDIR (cost.jsonl, host.jsonl, bench.jsonl), medians per cap at the end.
set -u
OUT_DIR=${1:?usage: gpu_wide_graphs.sh OUTDIR [cap]}; WIDE=${2:-8192}
. experiments/scripts/gpu_setup.sh "$OUT_DIR/setup.log"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/engine/test_engine_gpu.py -k "above_2048" 2>&1 | tail -3
timeout 120 python3 bench/scripts/graph_cost.py --shape qwen3-0.6b llama3-8b --caps 2048 "$WIDE" --modes hybrid \
  --json "$OUT_DIR/cost.jsonl" 2>&1 | grep "^graph cost"
SHAPES="--decodes 32 1 64 8 --prompt 128 4096 3072 7000"
for r in 1 2; do
  for cap in 2048 "$WIDE"; do
    timeout 90 python3 -m twinserve.bench.host_steps --shape qwen3-0.6b --repeats 1 $SHAPES \
      --piecewise-max-tokens "$cap" --json "$OUT_DIR/host.jsonl" 2>&1 | grep "^repeat" | sed "s/^/qwen3-0.6b cap=$cap /"
  done
done
for cap in 2048 "$WIDE"; do
  timeout 120 python3 -m twinserve.bench.host_steps --shape llama3-8b --repeats 1 $SHAPES \
    --piecewise-max-tokens "$cap" --json "$OUT_DIR/host.jsonl" 2>&1 | grep "^repeat" | sed "s/^/llama3-8b cap=$cap /"
done
for cap in 2048 "$WIDE"; do
  timeout 100 python3 -m twinserve.bench.offline --shape qwen3-0.6b --piecewise-max-tokens "$cap" \
    --json "$OUT_DIR/bench.jsonl" 2>&1 | grep "^offline" | sed "s/^/cap=$cap /"
done
python3 - "$OUT_DIR/host.jsonl" <<'PY'
import sys
import pandas as pd
d = pd.read_json(sys.argv[1], lines=True)
g = d[d.kind == "mixed"].groupby(["model", "decodes", "prompt", "piecewise_max_tokens"])
print((g[["launch_s", "launch_cpu_s", "duration", "period_s"]].median() * 1e3).round(3).to_string())
PY
