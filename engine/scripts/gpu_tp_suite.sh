#!/usr/bin/env bash
# Tensor parallelism on a two-GPU host, in one go (run from the repository root):
#   engine/scripts/gpu_tp_suite.sh OUTDIR
# Carry .whl (wheels the host lacks, see ../shared/gpu/wheelhouse.sh) and .fik (FlashInfer kernels
# saved by gpu_suite.sh save-kernels). Stages, each with a time limit, a failing one not stopping
# the rest: TP=2 vs TP=1 bf16 correctness on gpu-llama (head_dim 128, 3 layers) and on llama3-8b
# (random weights), then the offline throughput recipe for llama3-8b at TP=2 (+ decode steps)
# and TP=1. TP runs try CUDA graphs (tp_cuda_graphs, experimental); if the first check fails
# with them, it is rerun eager and so is the rest. A stage over its limit gets SIGABRT, and
# PYTHONFAULTHANDLER prints where rank 0 was stuck.
# OUTDIR gets summary.log (commands, exit codes, durations, result lines), all.log, results.jsonl.
set -u
OUT_DIR=${1:?usage: gpu_tp_suite.sh OUTDIR}
mkdir -p "$OUT_DIR"
SUM="$OUT_DIR/summary.log"; LOG="$OUT_DIR/all.log"; JSON="$OUT_DIR/results.jsonl"
t_all=$SECONDS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  >> "$LOG" 2>&1 || { echo "wheel install failed" >> "$SUM"; exit 1; }
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/twinserve
export PYTHONPATH=/tmp/site:/tmp/pkg PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
aot=$(python3 -c 'import flashinfer.jit.env as e; print(e.FLASHINFER_AOT_DIR)')
tmp=$(mktemp -d)
cat .fik/fi_so.tgz.part-* | tar xzf - -C "$tmp"
for so in $(find "$tmp" -name '*.so'); do n=$(basename "$so" .so); mkdir -p "$aot/$n" && cp "$so" "$aot/$n/"; done
{ nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())';
  echo "installed $(find "$tmp" -name '*.so' | wc -l) prebuilt kernels; setup $((SECONDS - t_all)) s"; } >> "$SUM" 2>&1

run() {
  local name=$1 limit=$2; shift 2
  echo "=== [$name] $*" | tee -a "$SUM" >> "$LOG"
  local t0=$SECONDS
  timeout -s ABRT -k 10 "$limit" "$@" > "$OUT_DIR/.stage.log" 2>&1
  local rc=$?
  cat "$OUT_DIR/.stage.log" >> "$LOG"
  grep -E "^(offline|decode|warm-up|tp check)|Error|error|twinserve\]|File " "$OUT_DIR/.stage.log" | tail -24 >> "$SUM"
  echo "=== [$name] rc=$rc in $((SECONDS - t0)) s" >> "$SUM"
  rm -f "$OUT_DIR/.stage.log"
  return $rc
}

CHECK="python3 engine/scripts/tp_check.py --json $JSON"
BENCH="python3 -m twinserve.bench.offline --json $JSON --shape llama3-8b --temperature 0"
EAGER=""; GRAPHS="--tp-cuda-graphs"
run tiny 60 $CHECK --shape gpu-llama || { EAGER="--no-cuda-graphs"; GRAPHS=""; run tiny-eager 45 $CHECK --shape gpu-llama $EAGER; }
run llama3-8b 80 $CHECK --shape llama3-8b $EAGER
run bench-tp2 100 $BENCH --tp 2 --decode $GRAPHS
run bench-tp1 85 $BENCH
echo "total $((SECONDS - t_all)) s" >> "$SUM"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv >> "$SUM" 2>&1
