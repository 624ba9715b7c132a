#!/usr/bin/env bash
# Builds the wheel, installs it into a fresh virtual environment (no editable install, no
# checkout on sys.path) and runs the installed command, so a missing asset or entry point fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
BUILD_PY=${BUILD_PY:-.venv/bin/python}
TORCH_PIN=${TORCH_PIN:-torch==2.13.0}
WORK=build/wheel-check
rm -rf "$WORK"
mkdir -p "$WORK"
"$BUILD_PY" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation -w "$WORK" .
"$PYTHON" -m venv "$WORK/venv"
PIP=("$WORK/venv/bin/python" -m pip install --quiet --disable-pip-version-check)
# shellcheck disable=SC2086
"${PIP[@]}" $TORCH_PIN
# shellcheck disable=SC2086
"${PIP[@]}" "$WORK"/minigpt_tui-*.whl $TORCH_PIN
cd "$WORK"
venv/bin/minigpt-tui --version
venv/bin/python -m minigpt_tui --version >/dev/null
venv/bin/python - <<'PY'
import pathlib, minigpt_tui
location = pathlib.Path(minigpt_tui.__file__).resolve()
assert "site-packages" in location.parts, f"imported from {location}, not from the installed wheel"
PY
venv/bin/minigpt-tui --runs-dir runs train --preset tiny --json > train.json
venv/bin/python - <<'PY'
import json
summary = json.load(open("train.json"))
assert summary["checkpoints"], "the installed command saved no checkpoint"
print(f"wheel check: installed minigpt-tui trained tiny to update {summary.get('step', '?')}; checkpoints {len(summary['checkpoints'])}")
PY
