#!/usr/bin/env bash
# Two qwen3-0.6b replicas sharing the one GPU behind each router, simulator against engines
# (repository root on the GPU host, after gpu_setup.sh):
#   experiments/scripts/gpu_cluster_cells.sh OUTDIR WORKLOAD RATE ROUTER...
# One compare command per router (REQUESTS, default 300); prints each cell's TTFT, TPOT and hit
# rate lines; OUTDIR gets cluster.tgz.part-* (15 MB parts, under the device tool's file limit:
# `cat cluster.tgz.part-* | tar xzf -`) with every cell's folder so far (compare.md, the engine
# and simulator runs, overrides.txt), for
# `python -m twinserve.experiments.cluster_cells runs/cluster`.
set -u
OUT_DIR=${1:?usage: gpu_cluster_cells.sh OUTDIR WORKLOAD RATE ROUTER...}; W=$2; R=$3; shift 3
WORK=runs/cluster; mkdir -p "$WORK"
for router in "$@"; do
  D="$WORK/${W}_${R}_$router"; mkdir -p "$D"
  printf '%s\n' model=qwen3-0.6b hardware=h200 workload=$W workload.num_requests=${REQUESTS:-300} \
    workload.rate=$R replicas=2 router=$router > "$D/overrides.txt"
  timeout 150 python3 -m twinserve.experiments.compare --out "$D" $(cat "$D/overrides.txt") > "$D.log" 2>&1
  [ -f "$D/compare.md" ] || tail -3 "$D.log"
  grep -E "TTFT mean|TPOT mean|prefix cache hit" "$D/compare.md" 2>/dev/null | sed "s/^/$W $R $router /"
done
rm -f "$OUT_DIR"/cluster.tgz.part-*
tar czf - "$WORK" | split -b 15M - "$OUT_DIR/cluster.tgz.part-"
