#!/usr/bin/env bash
# Simulator (calibrated, committed calibrations) vs engine on the H200, in one go:
#   experiments/scripts/gpu_compare.sh OUTDIR [TOTAL_S]
# Carry .whl and .fik. Loads are fractions of a capacity estimated from the calibrated simulator
# (qwen3-0.6b ~60 req/s, llama3-8b ~20 req/s on Azure conv). Each stage runs under `timeout` and
# the overall deadline; OUTDIR gets summary.log, all.log and compare.tgz (every compare folder:
# engine and sim run folders, compare.md/csv, step_diff.json).
set -u
OUT_DIR=${1:?usage: gpu_compare.sh OUTDIR [TOTAL_S]}
TOTAL=${2:-540}
mkdir -p "$OUT_DIR/w"
W="$OUT_DIR/w"; SUM="$OUT_DIR/summary.log"; LOG="$OUT_DIR/all.log"
. experiments/scripts/gpu_setup.sh "$LOG"
echo "setup $SECONDS s" >> "$SUM"

run() {  # run NAME LIMIT CMD...
  local name=$1 limit=$2; shift 2
  local left=$((TOTAL - SECONDS - 15))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 25 ]; then echo "=== [$name] skipped: no time left" >> "$SUM"; return 1; fi
  echo "=== [$name] (limit $limit s) $*" | tee -a "$SUM" >> "$LOG"
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT_DIR/.stage.log" 2>&1
  local rc=$?
  cat "$OUT_DIR/.stage.log" >> "$LOG"
  grep -E "^\|" "$OUT_DIR/.stage.log" | tail -30 >> "$SUM"
  grep -E "First differing|Error|error" "$OUT_DIR/.stage.log" | tail -5 >> "$SUM"
  echo "=== [$name] rc=$rc in $((SECONDS - t0)) s" >> "$SUM"
  rm -f "$OUT_DIR/.stage.log"
}

CMP="python3 -m twinserve.experiments.compare"
C="hardware=h200 print_summary=false progress=false"
AZ="workload=azure_conv workload.duration_s=12"
run q25 70 $CMP --out "$W/qwen3-0.6b_azure_conv_25" model=qwen3-0.6b $AZ workload.rate=15 $C
run q75 70 $CMP --out "$W/qwen3-0.6b_azure_conv_75" model=qwen3-0.6b $AZ workload.rate=45 $C
run l25 80 $CMP --out "$W/llama3-8b_azure_conv_25" model=llama3-8b $AZ workload.rate=5 $C
run l75 80 $CMP --out "$W/llama3-8b_azure_conv_75" model=llama3-8b $AZ workload.rate=15 $C
run qsp 60 $CMP --out "$W/qwen3-0.6b_shared_prefix" model=qwen3-0.6b workload=shared_prefix \
  workload.rate=20 workload.num_requests=240 cache=radix $C
run qss 60 $CMP --out "$W/qwen3-0.6b_sessions" model=qwen3-0.6b workload=sessions workload.rate=4 \
  workload.num_sessions=48 workload.think_time=1 cache=radix $C
run q50 60 $CMP --out "$W/qwen3-0.6b_azure_conv_50" model=qwen3-0.6b $AZ workload.rate=30 $C
run l50 70 $CMP --out "$W/llama3-8b_azure_conv_50" model=llama3-8b $AZ workload.rate=10 $C
run q90 60 $CMP --out "$W/qwen3-0.6b_azure_conv_90" model=qwen3-0.6b $AZ workload.rate=54 $C
run l90 70 $CMP --out "$W/llama3-8b_azure_conv_90" model=llama3-8b $AZ workload.rate=18 $C

find "$W" -type d -name model -prune -exec rm -rf {} + 2>/dev/null
tar czf "$OUT_DIR/compare.tgz" -C "$OUT_DIR" w && rm -rf "$W"
echo "total $SECONDS s" >> "$SUM"
