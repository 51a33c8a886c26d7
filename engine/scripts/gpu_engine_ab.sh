#!/usr/bin/env bash
# The engine before and after a change, in one command on the GPU host (repository root; carry
# .whl, .fik and .ab). Here, first, the "before" package (the benchmarks come from this tree so
# that older revisions have them too):
#   mkdir -p .ab/twinserve && git archive REV __init__.py core engine policies | tar -x -C .ab/twinserve
#   mkdir -p .ab/twinserve/bench && cp bench/__init__.py bench/offline.py bench/host_steps.py .ab/twinserve/bench/
# There:  bash engine/scripts/gpu_engine_ab.sh OUTDIR [shape ...]   (default: qwen3-0.6b llama3-8b)
# Per shape and tree: bench.host_steps (fixed mixed and decode steps, 2 repeats) and bench.offline
# (mini-sglang's offline recipe, greedy); prints one line per result, JSON lines in OUTDIR.
set -u
OUT_DIR=${1:?usage: gpu_engine_ab.sh OUTDIR [shape ...]}; shift
SHAPES=${*:-qwen3-0.6b llama3-8b}
. experiments/scripts/gpu_setup.sh "$OUT_DIR/setup.log"
[ -d .ab/twinserve ] || { echo "no .ab/twinserve (see the header)"; exit 2; }
mkdir -p /tmp/pkg_before && ln -sfn "$PWD/.ab/twinserve" /tmp/pkg_before/twinserve
for tree in before after; do
  if [ "$tree" = before ]; then PP=/tmp/site:/tmp/pkg_before; else PP=/tmp/site:/tmp/pkg; fi
  for m in $SHAPES; do
    PYTHONPATH=$PP timeout 150 python3 -m twinserve.bench.host_steps --shape "$m" --repeats 2 \
      --json "$OUT_DIR/host_$tree.jsonl" 2>&1 | grep "repeat" | sed "s/^/$tree $m /"
    PYTHONPATH=$PP timeout 200 python3 -m twinserve.bench.offline --shape "$m" \
      --json "$OUT_DIR/bench_$tree.jsonl" 2>&1 | grep "^offline" | sed "s/^/$tree /"
  done
done
