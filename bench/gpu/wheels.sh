#!/usr/bin/env bash
# Download into .whl/ the wheels that bench/perf/gpu_check.sh installs on a GPU machine with no network: the
# packages its image lacks (it has torch, lightning, transformers, peft, accelerate, numpy, pandas, pyarrow,
# huggingface-hub and the like), at the versions of bench/requirements.lock, built for CPython 3.12 on
# x86-64 Linux (the image's). Run on a machine with pip and the network, from anywhere:
#
#   bash bench/gpu/wheels.sh              # then carry .whl/ (git ignores it) to the GPU machine
#   PY_VERSION=3.11 bash bench/gpu/wheels.sh
#
# The list is what the third GPU pass needed (2026-11, an image without MLflow): MLflow's SQLite store
# needs sqlalchemy, alembic and cryptography besides mlflow-skinny; TRL (not a creditbench dependency, for
# bench.perf.trl) at TRL_VERSION.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY_VERSION="${PY_VERSION:-3.12}"
TRL_VERSION="${TRL_VERSION:-1.16.0}"
PACKAGES=(
  mlflow-skinny mlflow-tracing alembic sqlalchemy mako sqlparse cachetools databricks-sdk google-auth
  pyasn1 pyasn1-modules gitpython gitdb smmap importlib-metadata opentelemetry-api opentelemetry-sdk
  opentelemetry-proto opentelemetry-semantic-conventions pydantic pydantic-core annotated-types
  typing-inspection python-dotenv fastapi starlette uvicorn cryptography cffi pycparser
  jsonargparse docstring-parser typeshed-client math-verify latex2sympy2-extended antlr4-python3-runtime
  datasets dill multiprocess
)
pins=()
for name in "${PACKAGES[@]}"; do  # the lock's version (names compared as pip normalises them)
  pin=$(grep -i -E "^${name//-/[-_.]}==" bench/requirements.lock | head -1 | cut -d" " -f1 || true)
  [ -n "$pin" ] || { echo "wheels.sh: $name is not in bench/requirements.lock" >&2; exit 2; }
  pins+=("$pin")
done
pins+=("trl==$TRL_VERSION")
platforms=()
for tag in manylinux1 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux_2_34; do
  platforms+=(--platform "${tag}_x86_64")
done
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
  "${platforms[@]}" -d .whl "${pins[@]}"
echo "wheels.sh: $(ls .whl/*.whl | wc -l) wheels in .whl/ ($(du -sh .whl | cut -f1))"
