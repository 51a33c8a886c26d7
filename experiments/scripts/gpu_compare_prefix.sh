#!/usr/bin/env bash
# llama3-8b on the prefix-heavy workloads (shared prefix, sessions), engine vs calibrated sim:
#   experiments/scripts/gpu_compare_prefix.sh OUTDIR      (repository root; carry .whl and .fik)
set -u
OUT_DIR=${1:?usage: gpu_compare_prefix.sh OUTDIR}
mkdir -p "$OUT_DIR/w"; W="$OUT_DIR/w"
. experiments/scripts/gpu_setup.sh "$OUT_DIR/all.log"
CMP="python3 -m twinserve.experiments.compare"
C="model=llama3-8b hardware=h200 cache=radix print_summary=false progress=false"
timeout 70 $CMP --out "$W/llama3-8b_shared_prefix" workload=shared_prefix workload.rate=8 \
  workload.num_requests=96 $C >> "$OUT_DIR/all.log" 2>&1; echo "sp rc=$?" >> "$OUT_DIR/all.log"
timeout 70 $CMP --out "$W/llama3-8b_sessions" workload=sessions workload.rate=2 workload.num_sessions=24 \
  workload.think_time=1 $C >> "$OUT_DIR/all.log" 2>&1; echo "ss rc=$?" >> "$OUT_DIR/all.log"
find "$W" -type d -name model -prune -exec rm -rf {} + 2>/dev/null
tar czf "$OUT_DIR/compare_prefix.tgz" -C "$OUT_DIR" w && rm -rf "$W"
grep -E "rc=|TTFT mean|TPOT mean|output throughput" "$OUT_DIR/all.log"
