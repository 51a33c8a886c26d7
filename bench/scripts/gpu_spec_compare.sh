#!/usr/bin/env bash
# Simulator against engine with speculation, on the GPU host (repository root; after
# gpu_setup.sh). Calibrates the checkpoint (its profile ends with a code_edit replay with
# speculation, `--spec-replay ngram:K`, other requests than the compared ones), then runs the
# compare command on code_edit and questions at each rate with spec.method=ngram, k = K
# (default 8; the simulator takes the engine's measured acceptance, `compare`):
#   bench/scripts/gpu_spec_compare.sh OUTDIR MODEL_DIR
# RATES (default "4 16" req/s), REQUESTS (128), CAL_BUDGET (90 s of profiling). OUTDIR gets
# cal/<gpu>_<model>_tp1.json (gpu: h200, h100, ... from the device's name), cal.log, one
# cmp_<workload>_<rate>.md per run and spec_cmp.tgz (the engine and simulator run folders, the
# profile steps, the calibration, and stdlib/: this interpreter's sources of the code_edit
# prompts, so that `workload.stdlib_dir=` reruns the same requests elsewhere).
set -u
OUT_DIR=${1:?usage: gpu_spec_compare.sh OUTDIR MODEL_DIR}; MODEL=${2:?model dir}
NAME=$(basename "$MODEL"); WORK=runs/spec_cmp
GPU=$(python3 -c "import torch; from twinserve.experiments.calibrate import gpu_key; print(gpu_key(torch.cuda.get_device_name()))")
mkdir -p "$OUT_DIR/cal" "$WORK"
CAL=$(cd "$OUT_DIR/cal" && pwd)
mkdir -p "$WORK/stdlib"
python3 -c 'import shutil, sys; from twinserve.core.workload.text import module_sources
for p in module_sources(): shutil.copy(p, sys.argv[1])' "$WORK/stdlib"
timeout $((${CAL_BUDGET:-90} + 240)) python3 -m twinserve.experiments.calibrate --model "$MODEL" --device cuda \
  --budget-s "${CAL_BUDGET:-90}" --gpu "$GPU" --steps-out "$WORK/profile_steps.parquet" --spec-replay "ngram:${K:-8}" \
  --out "$OUT_DIR/cal/${GPU}_${NAME}_tp1.json" > "$OUT_DIR/cal.log" 2>&1
tail -4 "$OUT_DIR/cal.log"
for w in code_edit questions; do
  for r in ${RATES:-4 16}; do
    timeout 150 python3 -m twinserve.experiments.compare --out "$WORK/${w}_$r" model.path="$MODEL" hardware="$GPU" \
      workload=$w workload.rate=$r workload.num_requests=${REQUESTS:-128} spec.method=ngram spec.num_tokens=${K:-8} \
      "cost_model.calibration_dirs=[$CAL]" $([ $w = code_edit ] && echo workload.max_output=256) \
      > "$WORK/${w}_$r.log" 2>&1
    cp "$WORK/${w}_$r/compare.md" "$OUT_DIR/cmp_${w}_$r.md" 2>/dev/null || tail -3 "$WORK/${w}_$r.log"
    grep -E "TTFT mean|TPOT mean|output throughput" "$OUT_DIR/cmp_${w}_$r.md" 2>/dev/null | sed "s/^/$w $r /"
  done
done
find "$WORK" -type d -name model -prune -exec rm -rf {} + 2>/dev/null
cp -r "$CAL" "$WORK/cal"  # the device tool returns few files: everything also travels in the archive
tar czf "$OUT_DIR/spec_cmp.tgz" "$WORK"
