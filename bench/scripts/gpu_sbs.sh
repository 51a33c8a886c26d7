#!/usr/bin/env bash
# On the GPU host, from the repository root, with .whl (experiments/scripts/fetch_gpu_wheels.sh),
# .ab/minisgl-python (a copy of ../shared/anchors/mini-sglang/python) and optionally .fik (saved
# FlashInfer kernels) carried:
#   bench/scripts/gpu_sbs.sh OUT MODEL TEMPERATURE [sbs options...]
# runs the side-by-side (bench/sbs.py) and leaves OUT/sbs.md, OUT/runs.csv and the profiles.
set -u
OUT=${1:?usage: gpu_sbs.sh OUT MODEL TEMPERATURE [options]}
MODEL=$2
TEMP=$3
shift 3
mkdir -p "$OUT"
. experiments/scripts/gpu_setup.sh "$OUT/setup.log"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m twinserve.bench.sbs --model "$MODEL" --temperature "$TEMP" --minisgl .ab/minisgl-python \
  --out "$OUT" "$@"
