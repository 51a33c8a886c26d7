#!/usr/bin/env bash
# Here (not on the GPU host), from the repository root: download into .whl/ (ignored by git) every
# wheel the GPU host lacks: ../shared/gpu/wheelhouse.sh's list plus Hydra's joblib launcher, which
# conf/config.yaml selects, pytest (the GPU test stage of engine/scripts/gpu_suite.sh), and uvloop and
# httptools (what `uvicorn[standard]` gives the API server on an installed machine). Then carry ".whl" (and ".fik", FlashInfer kernels saved by
# engine/scripts/gpu_suite.sh save-kernels, if you have them) in the device tool's `carry`.
set -euo pipefail
../shared/gpu/wheelhouse.sh
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform any -d .whl "hydra-joblib-launcher==1.2.0" "joblib==1.6.0" \
  "pytest==9.0.3" "pluggy==1.6.0" "iniconfig==2.3.0" "packaging==26.2" \
  "uvloop==0.23.0" "httptools==0.9.0"
du -sh .whl
