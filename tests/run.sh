#!/usr/bin/env bash
# Run the test suite in the project's virtual environment (created and filled on first use).
#   bash tests/run.sh            the default (fast) suite
#   bash tests/run.sh -m slow    the longer end-to-end tests
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/bootstrap.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
exec python -m pytest "$@"
