# Helpers shared by the one-command GPU jobs (train_builtin.sh, reproduce_rl.sh). Source it after
# setting OUT and SMOKE. Gives: stamp/elapsed (timeline in $OUT/timeline.txt), $PY, a `spatialrl`
# function where the console script is absent (the GPU box runs from src/ on PYTHONPATH), make_city,
# and machine_line.
T0=${T0:-$(date +%s)}
mkdir -p "$OUT/logs"
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/timeline.txt"; }
elapsed() { echo $(( $(date +%s) - T0 )); }
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
# PY: the first python on PATH that imports spatialrl (a pyenv shim ahead of an activated venv would not)
if [ -z "${PY:-}" ]; then
  for c in python3 python; do
    p=$(command -v "$c") && "$p" -c "import spatialrl" 2>/dev/null && { PY=$p; break; }
  done
  PY=${PY:-$(command -v python3)}
fi
# SRL: the spatialrl command as an argument list (usable under `timeout`, unlike a shell function)
if [ -x "$(command -v spatialrl 2>/dev/null)" ]; then SRL=("$(command -v spatialrl)"); else SRL=("$PY" -m spatialrl.cli); fi
command -v spatialrl >/dev/null 2>&1 || spatialrl() { "$PY" -m spatialrl.cli "$@"; }

model_frames() {  # model (builtin:NAME or a folder) → the TVR frame layout it was trained on (its folder's
                 # spatialrl_model.json → eval.options.frames): joined (one side-by-side image) or separate
  "$PY" -c 'import sys
from spatialrl.models.builtin import model_eval_settings
from spatialrl.train.rl_common import model_agent
agent = model_agent(sys.argv[1])
print(((agent and model_eval_settings(agent)) or {}).get("options", {}).get("frames", "separate"))' "$1"
}

machine_line() {  # one line: host, GPU, library versions
  "$PY" - <<'PY'
import platform, torch, transformers, accelerate
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
print(f"machine: {platform.node()} {gpu}; torch {torch.__version__}, transformers {transformers.__version__}, "
      f"accelerate {accelerate.__version__}")
PY
}

make_city() {  # style routes seed out — a generated V-IRL city with 512 px panoramas (--tiny in smoke mode)
  local size=(--pano-width 512); [ "${SMOKE:-0}" = 1 ] && size=(--tiny)
  spatialrl virl make-city --style "$1" --routes "$2" --seed "$3" --out "$4" --overwrite --no-contact-sheet \
    "${size[@]}" ${CITY_ARGS:-}
}
