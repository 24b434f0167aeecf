#!/usr/bin/env bash
# Choose the findings' PPO settings on VALIDATION cities (issue 20's rule: never on the eval cities).
#
# Runs reproduce_findings.sh once per setting of SETTINGS ("lr:temperature[:lr_steps] ...", default the
# recipe's 1e-5:0.2 beside 1e-5:1.0, 1e-4:0.2, 1e-4:1.0; lr_steps is PPO's cosine period lr_max_steps, the
# recipe's 20 when left out: at 20 the lr reaches its floor by update 20), side by side on one GPU: PPO only (VIRL_ARMS=ppo), one
# seed, the same TRAIN_MIN budget each, over inputs built once (DATA_DIR), every evaluation on the
# validation cities (VALIDATION=1: metro seed 9 for in-dist / rule-OOD, hillside seed 10 for visual-OOD;
# EVAL_VIRL episodes each). The SFT init is evaluated there too, as the baseline — once per setting (each
# setting is a whole reproduce_findings.sh; the evals run side by side, so it costs GPU share, not a
# command), which doubles as a check: greedy evals of one model must agree. Then one table, sweep.md:
# validation success and per-step accuracy per setting and split.
#
# The rule that picks (stated before any number is seen): the setting with the highest visual-OOD success;
# it replaces the recipe's only if its lead over the recipe's setting exceeds the recipe row's 95% CI
# half-width (single seed, so the CI is over episodes), else the recipe stays.
#
#   source scripts/gpu/prelude.sh && STAGE=train OUT=$OUT timeout 570 bash scripts/gpu/findings_sweep.sh
#   source scripts/gpu/prelude.sh && STAGE=train OUT=$OUT timeout 570 bash scripts/gpu/findings_sweep.sh  # resume
#   source scripts/gpu/prelude.sh && STAGE=eval  OUT=$OUT timeout 570 bash scripts/gpu/findings_sweep.sh
#   SMOKE=1 OUT=/tmp/s bash scripts/gpu/findings_sweep.sh   # CPU rehearsal (STAGE=all, tiny cities)
#
# Knobs: SETTINGS, STAGE (train | eval | all), TRAIN_MIN (9; several STAGE=train commands: the runs pause
# and resume), EVAL_VIRL (200), SWEEP (the folder of the WORKs, /tmp/spatialrl-sweep), and any knob of
# reproduce_findings.sh (INIT_VIRL, PPO_SHUFFLE, RATIO, ...). $OUT gets timeline.txt, sweep.md and
# sweep.tar.gz (each setting's timeline, findings.json, table.md, configs and metrics).
set -uo pipefail

OUT=${OUT:?set OUT to the output folder}
SMOKE=${SMOKE:-0}
STAGE=${STAGE:-all}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SWEEP=${SWEEP:-/tmp/spatialrl-sweep}
SETTINGS=${SETTINGS:-1e-5:0.2 1e-5:1.0 1e-4:0.2 1e-4:1.0}
mkdir -p "$SWEEP/out"
# shellcheck source=lib.sh
source "$ROOT/scripts/gpu/lib.sh"
rmdir "$OUT/logs" 2>/dev/null
[ "$SMOKE" = 1 ] && TRAIN_MIN=${TRAIN_MIN:-0.3} || TRAIN_MIN=${TRAIN_MIN:-9}
export VALIDATION=1 VIRL_ARMS=ppo ARMS=virl SEEDS=0 DATA_DIR=$SWEEP/data TRAIN_MIN SMOKE
for s in $SETTINGS; do
  [[ $s =~ ^[0-9.e+-]+:[0-9.]+(:[1-9][0-9]*)?$ ]] \
    || { echo "SETTINGS: lr:temperature[:lr_steps] entries, got '$s'" >&2; exit 2; }
done
field() {  # setting index (1 lr, 2 temperature, 3 lr_steps: empty when left out)
  local IFS=:; local -a f; read -ra f <<< "$1"; echo "${f[$(($2 - 1))]:-}"
}
name_of() {
  local steps; steps=$(field "$1" 3)
  echo "lr$(field "$1" 1)-t$(field "$1" 2)${steps:+-s$steps}"
}

pack() {
  local p=$SWEEP/pack name
  rm -rf "$p"; mkdir -p "$p"
  for s in $SETTINGS; do
    name=$(name_of "$s"); mkdir -p "$p/$name"
    cp "$SWEEP/out/$name"/{timeline.txt,findings.json,table.md} "$p/$name/" 2>/dev/null
    # members are named ./runs/..., and GNU tar matches a named member only with that prefix
    [ -f "$SWEEP/out/$name/findings.tar.gz" ] && tar -xzf "$SWEEP/out/$name/findings.tar.gz" -C "$p/$name" ./runs ./eval ./findings
  done
  cp "$OUT/timeline.txt" "$p/" 2>/dev/null
  tar -czf "$OUT/sweep.tar.gz" -C "$p" . && rm -rf "$p"
}
trap pack EXIT
trap 'stamp "SIGTERM: stopping"; exit 143' TERM

one() {  # setting stage: one reproduce_findings.sh command of that setting (its own WORK, OUT and clock)
  local name; name=$(name_of "$1")
  mkdir -p "$SWEEP/out/$name"
  PPO_LR=$(field "$1" 1) PPO_TEMP=$(field "$1" 2) PPO_LR_STEPS=$(field "$1" 3) STAGE=$2 WORK=$SWEEP/$name OUT=$SWEEP/out/$name T0=$T0 \
    bash "$ROOT/scripts/gpu/reproduce_findings.sh" > "$SWEEP/out/$name/stdout.log" 2>&1
  stamp "$name $2: $(grep -E 'paused|trained|FAILED|findings written|not complete' "$SWEEP/out/$name/timeline.txt" | tail -n 1)"
}
stage() {
  local s
  for s in $SETTINGS; do one "$s" "$1" & done
  wait
}
table() {  # sweep.md: one row per setting and the init, from each setting's findings
  "$PY" - "$SWEEP" $SETTINGS > "$OUT/sweep.md" <<'PY'
import json, sys
from pathlib import Path
sweep, settings = Path(sys.argv[1]), sys.argv[2:]

def cells(findings):  # (metric, split) -> summary row of a findings.json
    return {("step" if r["experiment"].endswith("per-step") else "success", r["split"]): r
            for r in json.loads(findings.read_text())["summary"]}

def fmt(cell, split, ci=True):  # success % [CI] (per-step accuracy %)
    a, b = cell.get(("success", split)), cell.get(("step", split))
    if a is None:
        return "-"
    return (f"{100 * a['mean']:.1f}" + (f" [{100 * a['ci_low']:.1f}, {100 * a['ci_high']:.1f}]" if ci else "")
            + (f" ({100 * b['mean']:.1f})" if b else ""))

print("PPO settings on the validation cities (metro 9 in-dist / rule-OOD, hillside 10 visual-OOD), one seed;"
      " success % [95% CI over episodes] (per-step accuracy %)\n")
print("| setting | visual-OOD | in-dist | rule-OOD | GPU-s | env steps |\n|---|---|---|---|---:|---:|")
init = None
for s in settings:
    lr, temp, *steps = s.split(":")
    name = f"lr{lr}-t{temp}" + (f"-s{steps[0]}" if steps else "")
    label = f"lr {lr}, T {temp}" + (f", cosine over {steps[0]} updates" if steps else "")
    f = sweep / "out" / name / "findings.json"
    if not f.is_file():
        print(f"| {label} | not evaluated | | | | |")
        continue
    cell = cells(f)
    any_row = next(iter(cell.values()))
    print(f"| {label} | {fmt(cell, 'visual-ood')} | {fmt(cell, 'in-dist')} | {fmt(cell, 'rule-ood')} "
          f"| {any_row.get('gpu_seconds_mean') or 0:.0f} | {any_row.get('samples_mean') or 0:.0f} |")
    init = init or sweep / name / "findings" / "findings-init.json"
if init and init.is_file():
    cell = cells(init)
    print(f"| SFT init (no PPO) | {fmt(cell, 'visual-ood', False)} | {fmt(cell, 'in-dist', False)} "
          f"| {fmt(cell, 'rule-ood', False)} | | |")
PY
  stamp "sweep table written"; cat "$OUT/sweep.md" >> "$OUT/timeline.txt"
}

stamp "sweep stage=$STAGE settings='$SETTINGS' train_min=$TRAIN_MIN smoke=$SMOKE folder=$SWEEP"
case "$STAGE" in
  train | all)
    # the shared inputs once (cities; no SFT data: PPO only), then every setting side by side
    STAGE=inputs WORK=$SWEEP/inputs OUT=$SWEEP/out/inputs T0=$T0 bash "$ROOT/scripts/gpu/reproduce_findings.sh" \
      > "$SWEEP/inputs.log" 2>&1 || stamp "FAILED: inputs ($SWEEP/inputs.log)"
    stage train
    [ "$STAGE" = all ] && { stage eval; table; } ;;
  eval) stage eval; table ;;
  *) echo "STAGE must be train, eval or all" >&2; exit 2 ;;
esac
