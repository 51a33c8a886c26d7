#!/usr/bin/env bash
# The test suite on a loaded machine: one busy-loop process per core runs for the whole check
# while the full suite (the README's `python -m pytest -q`) runs RUNS times in a row; then the
# hogs are stopped and each run's pytest summary line and wall time are printed.
#     PYTHON=.venv/bin/python bash experiments/scripts/loaded_tests.sh    # from the repo root
# Exit status: 0 when every run passed. Logs: $LOG_DIR/run<i>.log (default a temp folder).
set -uo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python}
runs=${RUNS:-3}
hogs=${HOGS:-$(nproc)}
log_dir=${LOG_DIR:-$(mktemp -d)}
mkdir -p "$log_dir"
pids=()
stop_hogs() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait "${pids[@]}" 2>/dev/null; }
trap stop_hogs EXIT
for _ in $(seq "$hogs"); do
  "$py" -c 'while True: pass' &
  pids+=("$!")
done
echo "hogs: ${#pids[@]} busy loops (pids ${pids[*]}); logs in $log_dir"
status=0
summary=()
for i in $(seq "$runs"); do
  t0=$(date +%s)
  "$py" -m pytest -q > "$log_dir/run$i.log" 2>&1
  rc=$?
  wall=$(( $(date +%s) - t0 ))
  [ "$rc" -eq 0 ] || status=1
  line=$(grep -E '^=*.* (passed|failed|error)' "$log_dir/run$i.log" | tail -1)
  summary+=("run $i: rc=$rc wall=${wall}s  $line")
  echo "${summary[-1]}"
done
stop_hogs
pids=()
trap - EXIT
echo "--- under $hogs busy loops:"
printf '%s\n' "${summary[@]}"
exit "$status"
