#!/usr/bin/env bash
# The server's client checks and its HTTP-overhead benchmark against qwen3-0.6b on the GPU host
# (repository root; carry .whl from experiments/scripts/fetch_gpu_wheels.sh, and .fik if you have
# saved FlashInfer kernels).
#   server/scripts/gpu_server_checks.sh OUTDIR [STAGE ...]     stages: checks overhead (default both)
# checks: `python -m twinserve.server.hostile_check` (bad text, API key, body limit, the 10 MB
# prompt's latency and tokenizer-memory bars, metrics, SIGSTOP stall) -> OUTDIR/checks.json;
# overhead: `python -m twinserve.bench.http_overhead` with the README's settings -> OUTDIR/overhead.json.
# Each stage fits in one 10-minute device call. OUTDIR/all.log has the full output.
set -u
OUT_DIR=${1:?usage: gpu_server_checks.sh OUTDIR [checks] [overhead]}
shift
STAGES=${*:-checks overhead}
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/all.log"
. experiments/scripts/gpu_setup.sh "$LOG"
MODEL=/tmp/q06
[ -f $MODEL/config.json ] || python3 -m twinserve.engine.model_maker --shape qwen3-0.6b --out $MODEL \
  --dtype bfloat16 --no-weights >> "$LOG" 2>&1
for stage in $STAGES; do
  t0=$SECONDS
  case $stage in
    checks)
      timeout 480 python3 -m twinserve.server.hostile_check --model $MODEL --device cuda \
        --max-model-len 4096 --engine-kwargs '{"load_format": "dummy"}' --out "$OUT_DIR/checks.json" 2>&1 \
        | tee -a "$LOG" | grep -E "^(bad_text|auth|body_limit|huge_prompt|metrics|stall):" ;;
    overhead)
      timeout 540 python3 -m twinserve.bench.http_overhead --model $MODEL --device cuda --load-format dummy \
        --prompt-len 512 --output-len 128 --num-requests 200 --saturate-requests 256 --repeats 2 \
        --out "$OUT_DIR/overhead.json" 2>&1 | tee -a "$LOG" | grep -E "delta|targets|saturate|moderate" ;;
    *) echo "unknown stage $stage" ;;
  esac
  echo "=== [$stage] rc=${PIPESTATUS[0]} in $((SECONDS - t0)) s" | tee -a "$LOG"
done
