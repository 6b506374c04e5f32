#!/usr/bin/env bash
# Screenshots of the MLflow UI on a sweep (runs table, chart view, the sweep's report) into docs/img/.
#   scripts/ui_screenshot.sh [--out DIR] [training overrides: experiment=norm_sweep paths.mlflow_db=...]
# Needs headless Chromium (Debian/Ubuntu: sudo apt-get install -y chromium). See scripts/ui_screenshot.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
if [ ! -x "$PYTHON" ]; then
    echo "ui_screenshot: $PYTHON not found; run 'make install' first, or set PYTHON=/path/to/python" >&2
    exit 1
fi
exec "$PYTHON" scripts/ui_screenshot.py "$@"
