#!/usr/bin/env bash
# Run the test suite in the project's virtual environment (created and filled on first use).
#   bash tests/run.sh            the default (fast) suite
#   bash tests/run.sh -m slow    the longer end-to-end tests
# Without arguments, the default suite runs in two worker processes (pytest-xdist; a test file's tests stay
# on one worker, so a module's fixtures are built once), then the sandbox's own tests alone: they check that
# no sandbox process, temporary directory or cgroup outlives a test, machine-wide. CREDITBENCH_TEST_WORKERS=0
# runs the first part in one process. The slowest tests are listed at the end of the first part.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/bootstrap.sh
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
if [ "$#" -gt 0 ]; then exec python -m pytest "$@"; fi
alone=(tests/tasks/test_sandbox*.py)
rc=0
python -m pytest -n "${CREDITBENCH_TEST_WORKERS:-2}" --dist loadfile --durations=15 "${alone[@]/#/--ignore=}" || rc=$?
python -m pytest "${alone[@]}" || rc=$((rc ? rc : $?))
exit "$rc"
