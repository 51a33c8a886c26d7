#!/usr/bin/env bash
# Two qwen3-0.6b replicas sharing the one GPU behind each router, simulator against engines
# (repository root on the GPU host, after gpu_setup.sh):
#   experiments/scripts/gpu_cluster_cells.sh OUTDIR WORKLOAD RATE ROUTER...
# One compare command per router (REQUESTS, default 300); OUTDIR gets cl_<workload>_<rate>_<router>.md
# and cluster.tgz with the run folders.
set -u
OUT_DIR=${1:?usage: gpu_cluster_cells.sh OUTDIR WORKLOAD RATE ROUTER...}; W=$2; R=$3; shift 3
WORK=runs/cluster; mkdir -p "$WORK"
for router in "$@"; do
  D="$WORK/${W}_${R}_$router"
  timeout 150 python3 -m twinserve.experiments.compare --out "$D" model=qwen3-0.6b hardware=h200 workload=$W \
    workload.num_requests=${REQUESTS:-300} workload.rate=$R replicas=2 router=$router > "$D.log" 2>&1
  cp "$D/compare.md" "$OUT_DIR/cl_${W}_${R}_$router.md" 2>/dev/null || tail -3 "$D.log"
  grep -E "TTFT mean|TPOT mean|prefix cache hit" "$D/compare.md" 2>/dev/null | sed "s/^/$W $R $router /"
done
tar czf "$OUT_DIR/cluster.tgz" "$WORK"
