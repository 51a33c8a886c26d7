#!/usr/bin/env bash
# The engine's GPU checks and benchmarks in one go (one CUDA host, flashinfer installed).
#   engine/scripts/gpu_suite.sh OUTDIR [STAGE ...]
# Stages (default: warm tests bench-q bench-l): warm | tests | bench-q | bench-l | variants-q | variants-l |
# sweep-q | sweep-l | decode-q | decode-l | save-kernels. Each stage has a time limit; a failing stage does not stop
# the others. OUTDIR gets summary.log (commands, exit codes, durations, result lines), all.log
# (full output), bench.jsonl (one JSON line per measurement). save-kernels tars FlashInfer's
# compiled kernels (.so only) as OUTDIR/fi_so.tgz.part-*; with KERNELS_FROM=DIR holding such parts,
# they are first installed as FlashInfer AOT modules, so a fresh host of the same image skips the
# JIT compile.
set -u
OUT_DIR=${1:?usage: gpu_suite.sh OUTDIR [STAGE ...]}
shift
STAGES=${*:-warm tests bench-q bench-l}
mkdir -p "$OUT_DIR"
SUM="$OUT_DIR/summary.log"
LOG="$OUT_DIR/all.log"
JSON="$OUT_DIR/bench.jsonl"
BENCH="python3 -m twinserve.bench.offline --json $JSON"

run() {
  local name=$1 limit=$2
  shift 2
  echo "=== [$name] $*" | tee -a "$SUM" >> "$LOG"
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT_DIR/.stage.log" 2>&1
  local rc=$?
  cat "$OUT_DIR/.stage.log" >> "$LOG"
  grep -E "^(offline|decode|warm-up)|passed|failed|error|Error|engine bf16|max gap" "$OUT_DIR/.stage.log" | tail -40 >> "$SUM"
  echo "=== [$name] rc=$rc in $((SECONDS - t0)) s" >> "$SUM"
  rm -f "$OUT_DIR/.stage.log"
}

if [ -n "${KERNELS_FROM:-}" ]; then
  bash "$(dirname "$0")/fi_kernels.sh" install "$KERNELS_FROM" >> "$SUM"
fi

for stage in $STAGES; do
  case $stage in
    warm)  # compile the FlashInfer kernels in parallel processes
      t0=$SECONDS
      for k in prefill decode norm rope act; do
        timeout 400 python3 engine/scripts/warm_kernels.py $k >> "$OUT_DIR/warm-$k.log" 2>&1 &
      done
      wait
      cat "$OUT_DIR"/warm-*.log >> "$LOG"; grep -h "warm\|Error" "$OUT_DIR"/warm-*.log | tail -20 >> "$SUM"
      rm -f "$OUT_DIR"/warm-*.log
      echo "=== [warm] in $((SECONDS - t0)) s" >> "$SUM" ;;
    tests) run tests 300 python3 -m pytest tests/engine/test_engine_gpu.py -q -s -p no:cacheprovider ;;
    bench-q) run bench-q 150 $BENCH --shape qwen3-0.6b --temperature 0.6 --variants --decode ;;
    bench-l) run bench-l 200 $BENCH --shape llama3-8b --temperature 0 --variants --decode ;;
    variants-q)
      run q-no-overlap 120 $BENCH --shape qwen3-0.6b --temperature 0.6 --no-overlap
      run q-no-graphs 150 $BENCH --shape qwen3-0.6b --temperature 0.6 --no-cuda-graphs ;;
    variants-l)
      run l-no-overlap 150 $BENCH --shape llama3-8b --temperature 0 --no-overlap
      run l-no-graphs 180 $BENCH --shape llama3-8b --temperature 0 --no-cuda-graphs ;;
    sweep-l)  # decode attention kernel and page size (default mode + decode micro-benchmark)
      run l-tc-off-p16 120 $BENCH --shape llama3-8b --temperature 0 --decode --decode-tensor-cores off
      run l-tc-on-p64 120 $BENCH --shape llama3-8b --temperature 0 --decode --page-size 64
      run l-tc-off-p64 120 $BENCH --shape llama3-8b --temperature 0 --decode --decode-tensor-cores off --page-size 64 ;;
    sweep-q)
      run q-tc-on-p16 100 $BENCH --shape qwen3-0.6b --temperature 0.6 --decode --decode-tensor-cores on
      run q-p64 100 $BENCH --shape qwen3-0.6b --temperature 0.6 --decode --page-size 64 ;;
    decode-q) run decode-q 120 $BENCH --shape qwen3-0.6b --skip-offline --decode ;;
    decode-l) run decode-l 150 $BENCH --shape llama3-8b --skip-offline --decode ;;
    save-kernels)
      bash "$(dirname "$0")/fi_kernels.sh" save "$OUT_DIR"
      ls -la "$OUT_DIR" >> "$SUM" ;;
    *) echo "unknown stage $stage" >> "$SUM" ;;
  esac
done
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >> "$SUM" 2>&1
