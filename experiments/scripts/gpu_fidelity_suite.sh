#!/usr/bin/env bash
# The fidelity suite's engine side for one model on the GPU host (repository root; carry .whl and
# .fik): profile for calibration, measure capacity per workload, serve each at 25/50/75/90 %.
#   experiments/scripts/gpu_fidelity_suite.sh OUTDIR MODEL BUDGET_S [suite args...]
# e.g. experiments/scripts/gpu_fidelity_suite.sh $OUT qwen3-0.6b 480 --calib-rate 30 --cap-requests 300
# SAVE_KERNELS=1 also writes FlashInfer's compiled kernels as OUTDIR/fi_so.tgz.part-* (carry them
# as .fik/ on a fresh host). OUTDIR gets all.log and suite.tgz.part-aa, -ab, ... (join them with
# `cat suite.tgz.part-* | tar xzf -`: runs/MODEL/ holds profile_steps.parquet, capacity.json,
# suite.json and one engine run folder per workload and load); then, here:
#   python -m twinserve.experiments.calibrate --from-steps .../profile_steps.parquet ...
#   python -m twinserve.experiments.fidelity_suite report --out experiments/fidelity/h200 RUNS
set -u
OUT_DIR=${1:?usage: gpu_fidelity_suite.sh OUTDIR MODEL BUDGET_S [args]}; MODEL=${2:?model}; BUDGET=${3:?budget}
shift 3
. experiments/scripts/gpu_setup.sh "$OUT_DIR/all.log"
echo "setup done at $SECONDS s" | tee -a "$OUT_DIR/all.log"
timeout $((BUDGET + 60)) python3 -m twinserve.experiments.fidelity_suite engine --model "$MODEL" \
  --out "$OUT_DIR/runs" --budget-s "$BUDGET" "$@" 2>&1 | grep -v Warning | tee -a "$OUT_DIR/all.log" | grep '^{'
echo "suite rc=${PIPESTATUS[0]} at $SECONDS s" | tee -a "$OUT_DIR/all.log"
find "$OUT_DIR/runs" -type d -name model -prune -exec rm -rf {} + 2>/dev/null
# files come back from the GPU host at most 16 MiB each: the archive travels in 15 MiB parts
tar czf - -C "$OUT_DIR" runs | split -b 15M - "$OUT_DIR/suite.tgz.part-" && rm -rf "$OUT_DIR/runs"
if [ "${SAVE_KERNELS:-0}" = 1 ]; then  # FlashInfer's compiled kernels, to carry as .fik next time
  bash engine/scripts/fi_kernels.sh save "$OUT_DIR"
fi
ls -la "$OUT_DIR"
