#!/usr/bin/env bash
# Restore H200 run dumps into runs/ (ignored by git), from the commit that last held them in the
# tree: the llama3-8b suite and profile behind the committed tables and calibration, and the
# qwen3-0.6b suite and profile of 2026-12-03 (the committed qwen3-0.6b rows and calibration are
# of a later suite, docs/fidelity.md).
#   experiments/scripts/fetch_runs.sh [DEST]        # DEST defaults to runs/ at the repository root
# DEST gets:
#   fidelity/h200/engine/<model>/<workload>_<load>/   the engine's runs (requests.parquet, steps.parquet,
#                                                     summary.json, overrides.json), capacity.json, suite.json
#   calibrations/steps/h200_<model>_tp1_steps.parquet the profiles the committed calibrations were fitted on
# Then, e.g.:
#   python -m twinserve.experiments.fidelity_suite report --out /tmp/fid runs/fidelity/h200/engine
set -euo pipefail
COMMIT=f12ad4e
ROOT=$(git rev-parse --show-toplevel)
DEST=${1:-$ROOT/runs}
PATHS=(experiments/fidelity/h200/engine experiments/calibrations/steps)
git -C "$ROOT" cat-file -e "$COMMIT^{commit}" 2>/dev/null || {
  echo "commit $COMMIT is not in this clone: fetch main's full history (git fetch --unshallow)" >&2; exit 1; }
mkdir -p "$DEST"
git -C "$ROOT" archive "$COMMIT" "${PATHS[@]}" | tar -x -C "$DEST" --strip-components=1
echo "restored into $DEST: $(find "$DEST" -name '*.parquet' | wc -l) parquet files, $(du -sh "$DEST" | cut -f1)"
