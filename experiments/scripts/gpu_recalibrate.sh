#!/usr/bin/env bash
# Serving-heavy calibration profiles on one H200 (repository root; carry .whl and .fik):
#   experiments/scripts/gpu_recalibrate.sh OUTDIR
# Each model: a short step grid, then most of the budget replaying the Azure conv trace sped up,
# so that prefill and mixed steps are measured as they occur in serving. OUTDIR gets the step
# records (the calibration files are refitted from them with `calibrate --from-steps`).
set -u
OUT_DIR=${1:?usage: gpu_recalibrate.sh OUTDIR}
. experiments/scripts/gpu_setup.sh "$OUT_DIR/all.log"
CAL="python3 -m twinserve.experiments.calibrate --device cuda --no-progress --budget-s 190 --replay-share 0.75 --replay azure_conv"
timeout 230 $CAL --model qwen3-0.6b --replay-kwargs '{"time_scale": 0.1}' \
  --steps-out "$OUT_DIR/q_steps.parquet" --out "$OUT_DIR/q.json" >> "$OUT_DIR/all.log" 2>&1
echo "qwen rc=$? at $SECONDS s" >> "$OUT_DIR/all.log"
timeout 250 $CAL --model llama3-8b --replay-kwargs '{"time_scale": 0.25}' \
  --steps-out "$OUT_DIR/l_steps.parquet" --out "$OUT_DIR/l.json" >> "$OUT_DIR/all.log" 2>&1
echo "llama rc=$? at $SECONDS s" >> "$OUT_DIR/all.log"
grep -E "MAPE|rc=|wrote|Error" "$OUT_DIR/all.log"
