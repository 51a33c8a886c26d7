#!/usr/bin/env bash
# Calibration + simulator-vs-engine fidelity on one GPU host, in one go (repository root):
#   experiments/scripts/gpu_fidelity.sh OUTDIR [TOTAL_S]
# Carry .whl (wheels the host lacks) and .fik (FlashInfer kernels saved by gpu_suite.sh). Stages,
# each under `timeout` and the overall deadline TOTAL_S (default 520), a failing one not stopping
# the rest: calibrate qwen3-0.6b and llama3-8b (profile + fit), compare engine vs calibrated sim on
# Azure conv slices at two loads per model, the HTTP overhead benchmark, then (time permitting)
# shared-prefix with the radix cache. OUTDIR gets summary.log, all.log and fidelity.tgz (the
# calibration JSONs, profiled steps, compare folders).
set -u
OUT_DIR=${1:?usage: gpu_fidelity.sh OUTDIR [TOTAL_S]}
TOTAL=${2:-520}
mkdir -p "$OUT_DIR/w"
W="$OUT_DIR/w"; SUM="$OUT_DIR/summary.log"; LOG="$OUT_DIR/all.log"
. experiments/scripts/gpu_setup.sh "$LOG"
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; python3 -c 'import torch; print("torch", torch.__version__)';
  echo "setup $SECONDS s"; } >> "$SUM" 2>&1

run() {  # run NAME LIMIT CMD...: LIMIT capped by what is left of TOTAL
  local name=$1 limit=$2; shift 2
  local left=$((TOTAL - SECONDS - 5))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 20 ]; then echo "=== [$name] skipped: no time left" >> "$SUM"; return 1; fi
  echo "=== [$name] (limit $limit s) $*" | tee -a "$SUM" >> "$LOG"
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT_DIR/.stage.log" 2>&1
  local rc=$?
  cat "$OUT_DIR/.stage.log" >> "$LOG"
  grep -vE "it/s\]|req/s\]|case/s\]|s/it\]|^\s*$" "$OUT_DIR/.stage.log" | grep -E "MAPE|calibration|\| |First differing|steps;|Error|error|wrote|saturate|moderate|overhead" | tail -45 >> "$SUM"
  echo "=== [$name] rc=$rc in $((SECONDS - t0)) s" >> "$SUM"
  rm -f "$OUT_DIR/.stage.log"
}

CAL="python3 -m twinserve.experiments.calibrate --device cuda --no-progress --budget-s 70"
run cal-q 110 $CAL --model qwen3-0.6b --steps-out "$W/h200_qwen3-0.6b_steps.parquet" --out "$W/h200_qwen3-0.6b_tp1.json"
run cal-l 130 $CAL --model llama3-8b --steps-out "$W/h200_llama3-8b_steps.parquet" --out "$W/h200_llama3-8b_tp1.json"

CMP="python3 -m twinserve.experiments.compare"
COMMON="hardware=h200 workload=azure_conv workload.duration_s=15 cost_model.calibration_dirs=[$W] print_summary=false progress=false"
# loads: capacity estimated as ~60 req/s (qwen3-0.6b) and ~20 req/s (llama3-8b) on Azure conv
run cmp-q-25 75 $CMP --out "$W/cmp_qwen3-0.6b_azure_conv_r15" model=qwen3-0.6b workload.rate=15 $COMMON
run cmp-q-75 75 $CMP --out "$W/cmp_qwen3-0.6b_azure_conv_r45" model=qwen3-0.6b workload.rate=45 $COMMON
run cmp-l-25 80 $CMP --out "$W/cmp_llama3-8b_azure_conv_r5" model=llama3-8b workload.rate=5 $COMMON
run cmp-l-75 80 $CMP --out "$W/cmp_llama3-8b_azure_conv_r15" model=llama3-8b workload.rate=15 $COMMON

run make-q 40 python3 -m twinserve.engine.model_maker --shape qwen3-0.6b --out /tmp/q06
run overhead 90 python3 -m twinserve.server.bench_overhead --model /tmp/q06 --device cuda --prompt-len 512 \
  --output-len 128 --num-requests 200 --saturate-requests 256 --repeats 2 --out "$OUT_DIR/overhead.json"

run cmp-q-sp 60 $CMP --out "$W/cmp_qwen3-0.6b_shared_prefix_r20" model=qwen3-0.6b hardware=h200 workload=shared_prefix \
  workload.rate=20 workload.duration_s=15 workload.num_requests=null cache=radix "cost_model.calibration_dirs=[$W]" print_summary=false progress=false

find "$W" -type d -name model -prune -exec rm -rf {} + 2>/dev/null
tar czf "$OUT_DIR/fidelity.tgz" -C "$OUT_DIR" w && rm -rf "$W"
ls -la "$OUT_DIR" >> "$SUM"
echo "total $SECONDS s" >> "$SUM"
