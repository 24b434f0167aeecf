#!/usr/bin/env bash
# Set up spatialrl on a fresh Debian/Ubuntu machine: Mesa EGL (offscreen rendering) where missing,
# a virtual environment in .venv, the CPU build of torch, then the package with its dev extras.
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in libegl1 libegl-mesa0 libgl1-mesa-dri; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
# Debian's chromium drives the human-play page's browser test (no browser download at run time).
if [ "${SPATIALRL_SKIP_BROWSER:-0}" != "1" ]; then
  command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "[setup] installing system packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# The CPU build first: an unpinned torch (asked for by any dependency) would pull a multi-GB CUDA build.
python -c "import torch" 2>/dev/null || python -m pip install -q torch==2.13.0
python -m pip install -q -c <(echo torch==2.13.0) -e ".[dev]"
echo "[setup] ready: $(python -c 'import spatialrl, torch; print("spatialrl", spatialrl.__version__, "torch", torch.__version__)')"
