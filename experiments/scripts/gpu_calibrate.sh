#!/usr/bin/env bash
# Profile one model on the GPU host for a calibration (repository root; carry .whl, and .fik when
# you have it). Writes OUTDIR/steps.parquet (the profile's step records) and OUTDIR/MODEL.json
# (a first fit); refit here with `python -m twinserve.experiments.calibrate --from-steps ...`.
#   experiments/scripts/gpu_calibrate.sh OUTDIR MODEL BUDGET_S [calibrate args...]
# e.g. experiments/scripts/gpu_calibrate.sh $OUT qwen3-8b 330 --grid long --replay mooncake_conv \
#        --replay-kwargs '{"max_prompt_tokens": 28000}'
# SAVE_KERNELS=1 also writes FlashInfer's compiled kernels as OUTDIR/fi_so.tgz.part-* (carry them
# as .fik/ on a fresh host).
set -u
OUT_DIR=${1:?usage: gpu_calibrate.sh OUTDIR MODEL BUDGET_S [args]}; MODEL=${2:?model}; BUDGET=${3:?budget}
shift 3
mkdir -p "$OUT_DIR"
. experiments/scripts/gpu_setup.sh "$OUT_DIR/calibrate.log"
echo "setup done at $SECONDS s" | tee -a "$OUT_DIR/calibrate.log"
timeout $((BUDGET + 120)) python3 -m twinserve.experiments.calibrate --model "$MODEL" --device cuda \
  --budget-s "$BUDGET" --no-progress --steps-out "$OUT_DIR/steps.parquet" --out "$OUT_DIR/$MODEL.json" "$@" \
  2>&1 | grep -v Warning | tee -a "$OUT_DIR/calibrate.log" | tail -25
echo "calibrate rc=${PIPESTATUS[0]} at $SECONDS s" | tee -a "$OUT_DIR/calibrate.log"
if [ "${SAVE_KERNELS:-0}" = 1 ]; then
  bash engine/scripts/fi_kernels.sh save "$OUT_DIR"
fi
ls -la "$OUT_DIR"
