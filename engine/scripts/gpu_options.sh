#!/usr/bin/env bash
# The sampling options on one CUDA host (flashinfer installed; wheels in .whl/):
#   engine/scripts/gpu_options.sh OUTDIR [MODEL_DIR]
# 1. installs llguidance and jsonschema from .whl/ (no index);
# 2. tests/engine/test_engine_options_gpu.py (bf16, FlashInfer, CUDA graphs, overlap) and the CPU
#    option tests of the engine and the server on this host -> OUTDIR/tests.log;
# 3. with MODEL_DIR (qwen3-0.6b; default /tmp/q06 when it exists): the HTTP-overhead benchmark of
#    the README -> OUTDIR/bench_overhead.json and .log.
# OUTDIR/summary.log gets each stage's exit code and result lines.
set -u
OUT_DIR=${1:?usage: gpu_options.sh OUTDIR [MODEL_DIR]}
MODEL=${2:-/tmp/q06}
mkdir -p "$OUT_DIR"
SUM="$OUT_DIR/summary.log"
python3 -m pip install -q --no-index --find-links .whl llguidance jsonschema > "$OUT_DIR/pip.log" 2>&1
echo "pip rc=$?" >> "$SUM"
timeout 1500 python3 -m pytest -q -s -rs tests/engine/test_engine_options_gpu.py tests/engine/test_engine_options.py \
  tests/server/test_server_fields.py > "$OUT_DIR/tests.log" 2>&1
echo "tests rc=$?" >> "$SUM"
grep -E "passed|failed|error|logprobs: max" "$OUT_DIR/tests.log" | tail -20 >> "$SUM"
if [ -d "$MODEL" ]; then
  timeout 1500 python3 -m twinserve.bench.http_overhead --model "$MODEL" --device cuda --prompt-len 512 \
    --output-len 128 --num-requests 200 --saturate-requests 256 --repeats 2 \
    --out "$OUT_DIR/bench_overhead.json" > "$OUT_DIR/bench_overhead.log" 2>&1
  echo "bench_overhead rc=$?" >> "$SUM"
  tail -20 "$OUT_DIR/bench_overhead.log" >> "$SUM"
fi
cat "$SUM"
