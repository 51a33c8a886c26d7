# Sourced by the GPU-host scripts (repository root; .whl from experiments/scripts/fetch_gpu_wheels.sh
# and .fik carried; a wheel that experiments/scripts/carry_parts.sh split is joined into .whl
# first): installs the wheels the host lacks into /tmp/site, makes `import twinserve` resolve to
# this checkout, and puts the saved FlashInfer kernels where FlashInfer looks for prebuilt ones.
# Usage: `. experiments/scripts/gpu_setup.sh LOG`
if [ -f .carry/p1/manifest ]; then  # a wheel too large for one call, carried in parts (carry_parts.sh)
  bash experiments/scripts/carry_parts.sh join .whl >> "$1" 2>&1 || echo "carried parts incomplete" >> "$1"
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  >> "$1" 2>&1 || { echo "wheel install failed" >> "$1"; exit 1; }
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/twinserve
export PYTHONPATH=/tmp/site:/tmp/pkg PYTHONUNBUFFERED=1
if ls .fik/fi_so.tgz.part-* > /dev/null 2>&1; then
  bash engine/scripts/fi_kernels.sh install .fik >> "$1" 2>&1
else
  echo "no saved kernels in .fik: FlashInfer compiles at first use (1-2 minutes)" >> "$1"
fi
