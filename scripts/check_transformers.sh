#!/usr/bin/env bash
# Run the model-facing tests against another transformers release than the one installed — e.g. the GPU
# machine's (5.17 on 2026-12-05; `pip` there reaches no registry, so a break shows up only mid-run).
# Downloads the wheel (and a huggingface_hub it accepts) into a cache folder and puts it first on
# PYTHONPATH; the installed packages stay as they are.
#
#   bash scripts/check_transformers.sh 5.17.0                      # the default test selection
#   bash scripts/check_transformers.sh 5.17.0 tests/models -x      # any pytest arguments
#
# 2026-12-05 with 5.17.0: the Qwen vision speed-ups, the tensor engine's rope positions and the prefix
# cache pass (after `models/sampling.py` learnt 5.17's cache keyword and Mllama mask rows); the Qwen
# vision-feature cache reports itself unsupported there (no `mm_encoder_outputs`: it stays off).
set -euo pipefail
VERSION=${1:?usage: check_transformers.sh VERSION [pytest args...]}
shift
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${CACHE:-$ROOT/.cache/transformers-$VERSION}
PY=${PY:-python}
if [ ! -f "$CACHE/transformers/__init__.py" ]; then
  mkdir -p "$CACHE/wheels"
  "$PY" -m pip download "transformers==$VERSION" --no-deps -q -d "$CACHE/wheels"
  hub=$(unzip -p "$CACHE/wheels"/transformers-*.whl 'transformers/dependency_versions_table.py' \
        | sed -n 's/.*"huggingface-hub": "huggingface-hub\(.*\)",/\1/p')
  "$PY" -m pip download "huggingface_hub$hub" --no-deps -q -d "$CACHE/wheels"
  for w in "$CACHE"/wheels/*.whl; do (cd "$CACHE" && unzip -q -o "$w"); done
fi
[ $# -gt 0 ] || set -- tests/models/test_qwen_vision.py tests/models/test_prefix_cache.py tests/train/test_tensor_data.py
cd "$ROOT"
PYTHONPATH="$CACHE${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c "import transformers; print('transformers', transformers.__version__, 'from', transformers.__file__)"
PYTHONPATH="$CACHE${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest -q -p no:cacheprovider "$@"
