#!/usr/bin/env bash
# On the GPU host, from the repository root, with .whl carried (experiments/scripts/fetch_gpu_wheels.sh):
#   bench/scripts/gpu_step_kernels.sh OUT [step_kernels options...]
# runs the per-step kernel comparison (bench/step_kernels.py) into OUT/step_kernels.{log,jsonl},
# the Triton kernels' GPU tests into OUT/tests.log, and saves the compiled FlashInfer kernels
# as OUT/fik/fi_so.tgz.part-* (carry them as .fik to skip the compile on the next host).
set -u
OUT=${1:?usage: gpu_step_kernels.sh OUT [options]}
shift
mkdir -p "$OUT/fik"
. experiments/scripts/gpu_setup.sh "$OUT/setup.log"
timeout "${KERNELS_LIMIT_S:-300}" python3 -m twinserve.bench.step_kernels --json "$OUT/step_kernels.jsonl" "$@" \
  > "$OUT/step_kernels.log" 2>&1
echo "step_kernels rc=$? at ${SECONDS}s" >> "$OUT/setup.log"
timeout "${TESTS_LIMIT_S:-200}" python3 -m pytest tests/engine/test_engine_triton_gpu.py -q -p no:cacheprovider \
  > "$OUT/tests.log" 2>&1
echo "tests rc=$? at ${SECONDS}s" >> "$OUT/setup.log"
bash engine/scripts/fi_kernels.sh save "$OUT/fik"
