#!/usr/bin/env bash
# Train the three built-in models — virl-sft, tvr-va-sft, tvr-ao-sft — on one GPU in one command:
# task data → expert SFT datasets → three SFT runs side by side on the GPU (time-boxed) → evaluation →
# weights + logs + metrics under $OUT.
#
#   source scripts/gpu/prelude.sh && OUT=$OUT bash scripts/gpu/train_builtin.sh   # H200, one 10-min command
#   SMOKE=1 OUT=/tmp/smoke bash scripts/gpu/train_builtin.sh     # CPU rehearsal: tiny model and data
# (carry runs/gpu-inputs: the pre-built TVR bench, 0.8 MB, saves ~2 minutes of generation)
#
# Knobs (environment):
#   BUDGET_MIN     most training minutes per model (the three train at once)     default 5 (smoke 0.3)
#   TRAIN_END_S    every training stops by this many seconds after the start     default 420
#   TVR_BENCH      TVR bench folder to reuse; default runs/gpu-inputs/tvr-bench if present, else built
#   VIRL_CITY      V-IRL training-city folder to reuse (else generated: make-city, or toy data)
#   VIRL_ROUTES    routes of a generated training city                          default 300
#   VIRL_EPISODES  expert episodes for V-IRL SFT (seed 1000; eval uses seed 12) default 600
#   EVAL_LIMIT     episodes per split (V-IRL) / in all (TVR) in the final eval   default 24 (smoke 2)
#   DEADLINE_S     skip the final eval when this many seconds have passed       default 500
#   WORK           scratch folder for data and checkpoints (not copied back)    default /tmp/spatialrl-gpu
#
# $OUT gets: weights/<name>/ (Hugging Face folder, bf16, spatialrl_model.json = recipe + data + sizes),
# runs/<name>/ (config, metrics.jsonl, summary.json, in-training eval), eval/<name>-<task>/ (spatialrl
# eval runs), logs/*.log, timeline.txt and results.json (one table of everything).
set -uo pipefail

OUT=${OUT:?set OUT to the output folder}
SMOKE=${SMOKE:-0}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${WORK:-/tmp/spatialrl-gpu}
mkdir -p "$OUT/logs" "$OUT/weights" "$OUT/runs" "$OUT/eval" "$WORK/data"
# shellcheck source=lib.sh
source "$ROOT/scripts/gpu/lib.sh"

if [ "$SMOKE" = 1 ]; then
  BUDGET_MIN=${BUDGET_MIN:-0.3}; EVAL_LIMIT=${EVAL_LIMIT:-2}; VIRL_ROUTES=${VIRL_ROUTES:-6}
  VIRL_EPISODES=${VIRL_EPISODES:-4}; DEADLINE_S=${DEADLINE_S:-100000}; TRAIN_END_S=${TRAIN_END_S:-100000}
  W=112; H=64; GRID=112
  TRAIN_EXTRA=(--model.path=preset:tiny "--model.preset_overrides={}" --data.num_workers=0
               --per_device_batch_size=2 --logging.every=1 --eval.episodes=2 --eval.batch_size=2)
else
  BUDGET_MIN=${BUDGET_MIN:-5}; EVAL_LIMIT=${EVAL_LIMIT:-24}; VIRL_ROUTES=${VIRL_ROUTES:-300}
  VIRL_EPISODES=${VIRL_EPISODES:-600}; DEADLINE_S=${DEADLINE_S:-500}; TRAIN_END_S=${TRAIN_END_S:-420}
  W=280; H=168; GRID=224   # see configs/sft/*_small.yaml for why these sizes
  TRAIN_EXTRA=()
fi
stamp "start: smoke=$SMOKE budget=${BUDGET_MIN}min work=$WORK"
machine_line >> "$OUT/timeline.txt" 2>&1

# ----------------------------------------------------------------------------------- helpers
build() {  # name, then `spatialrl data sft` arguments
  local name=$1; shift
  if spatialrl data sft "$@" --out "$WORK/data/$name" --overwrite --batch-size 32 > "$OUT/logs/data-$name.log" 2>&1; then
    stamp "data $name: $(grep -o '[0-9]* samples.*episodes' "$OUT/logs/data-$name.log" | tail -n 1)"
  else
    stamp "FAILED: data $name (logs/data-$name.log)"
  fi
}
train() {  # name recipe, then extra overrides; trains until TRAIN_END_S (at most BUDGET_MIN minutes)
  local name=$1 recipe=$2; shift 2
  if [ ! -f "$WORK/data/$name/meta.json" ]; then stamp "skip training $name: no data"; return; fi
  local budget
  budget=$("$PY" -c "print(round(max(0.5, min($BUDGET_MIN, ($TRAIN_END_S - $(elapsed) - 30) / 60)), 2))")
  stamp "train $name for $budget min"
  if spatialrl train sft "$ROOT/configs/sft/$recipe" --output_dir="$WORK/runs/$name" --checkpoint.resume=never \
      --data.train="$WORK/data/$name" --time_budget_minutes="$budget" --eval.task=null "${TRAIN_EXTRA[@]}" "$@" \
      > "$OUT/logs/train-$name.log" 2>&1; then
    stamp "trained $name: $(grep -o 'train/loss=[0-9.]*' "$OUT/logs/train-$name.log" | tail -n 1)"
  else
    stamp "FAILED: training $name (logs/train-$name.log)"
  fi
}

# ----------------------------------------------------------------------------------- 1-3. two pipelines
# TVR: (bench) → VA + AO expert data → VA + AO training.  V-IRL: city → expert data → training.
# They run side by side; every training ends at TRAIN_END_S so the evaluation starts on time.
tvr_pipeline() {
  local bench=$TVR_BENCH_DIR
  if [ ! -f "$bench/bench.json" ]; then
    local args=(--sizes eval=200,sft=400,rl=0,diag_rotate=0,diag_move=0); [ "$SMOKE" = 1 ] && args=(--tiny)
    spatialrl tvr make-bench --out "$bench" --seed 0 --overwrite "${args[@]}" > "$OUT/logs/tvr-bench.log" 2>&1 \
      && stamp "tvr bench built" || { stamp "FAILED: tvr bench (logs/tvr-bench.log)"; return; }
  fi
  build tvr-va-sft --task tvr --data "$bench" --split sft --set memory=va --set width=$W --set height=$H &
  build tvr-ao-sft --task tvr --data "$bench" --split sft --set memory=ao --set width=$W --set height=$H &
  wait
  train tvr-va-sft tvr_va_small.yaml &
  train tvr-ao-sft tvr_ao_small.yaml &
  wait
}
virl_pipeline() {
  if [ ! -f "$CITY/route_infos.json" ]; then
    make_city metro "$VIRL_ROUTES" 0 "$CITY" > "$OUT/logs/city-metro.log" 2>&1 \
      && stamp "training city built" || { stamp "FAILED: training city (logs/city-metro.log)"; return; }
  fi
  build virl-sft --task virl --data "$CITY" --split in-dist --set episodes=$VIRL_EPISODES --set seed=1000 \
    --set grid_size=$GRID
  train virl-sft virl_small.yaml
}
TVR_BENCH_DIR=${TVR_BENCH:-}
if [ -z "$TVR_BENCH_DIR" ]; then
  TVR_BENCH_DIR=$WORK/tvr-bench
  [ "$SMOKE" != 1 ] && [ -f "$ROOT/runs/gpu-inputs/tvr-bench/bench.json" ] && TVR_BENCH_DIR=$ROOT/runs/gpu-inputs/tvr-bench
fi
CITY=${VIRL_CITY:-$WORK/city-metro}
OOD_CITY=$WORK/city-hillside
stamp "bench=$TVR_BENCH_DIR city=$CITY"
tvr_pipeline &
virl_pipeline &
( make_city hillside 18 1 "$OOD_CITY" > "$OUT/logs/city-hillside.log" 2>&1 \
    && stamp "visual-OOD city built" || stamp "FAILED: visual-OOD city (logs/city-hillside.log)" ) &
wait
BENCH=$TVR_BENCH_DIR

# ----------------------------------------------------------------------------------- 4. collect
for name in virl-sft tvr-va-sft tvr-ao-sft; do
  run=$WORK/runs/$name
  [ -d "$run/final" ] || continue
  rm -rf "$OUT/weights/$name" && cp -r "$run/final" "$OUT/weights/$name"
  mkdir -p "$OUT/runs/$name"
  cp "$run"/config.json "$run"/metrics.jsonl "$run"/summary.json "$OUT/runs/$name/" 2>/dev/null
  [ -d "$run/eval" ] && cp -r "$run/eval" "$OUT/runs/$name/"
  stamp "weights $name: $(du -sh "$OUT/weights/$name" | cut -f1)"
done
"$PY" "$ROOT/scripts/gpu/collect_results.py" "$OUT" > /dev/null 2>&1  # partial results, in case eval is cut

# ----------------------------------------------------------------------------------- 5. evaluate
evaluate() {  # label agent task, then eval arguments
  local label=$1 agent=$2 task=$3; shift 3
  local tokens=16; [ "$task" = virl ] && tokens=96  # "Action: X" vs the V-IRL JSON answer
  if spatialrl eval --task "$task" --agent "$agent" --out "$OUT/eval/$label" --overwrite --no-report \
      --limit "$EVAL_LIMIT" --batch-size 64 --max-new-tokens $tokens --label "$label" "$@" \
      > "$OUT/logs/eval-$label.log" 2>&1; then
    stamp "eval $label done"
  else
    stamp "FAILED: eval $label (logs/eval-$label.log)"
  fi
}
if [ "$(elapsed)" -lt "$DEADLINE_S" ]; then
  tvr_set=(--data "$BENCH" --split eval --set width=$W --set height=$H)
  virl_set=(--data "$CITY" --split all --set visual_data="$OOD_CITY" --set grid_size=$GRID)
  for a in expert random; do
    evaluate "tvr-$a" "$a" tvr "${tvr_set[@]}" --set memory=va &
    evaluate "virl-$a" "$a" virl "${virl_set[@]}" &
  done
  [ -d "$OUT/weights/tvr-va-sft" ] && evaluate tvr-va-sft "hf:$OUT/weights/tvr-va-sft" tvr "${tvr_set[@]}" --set memory=va &
  [ -d "$OUT/weights/tvr-ao-sft" ] && evaluate tvr-ao-sft "hf:$OUT/weights/tvr-ao-sft" tvr "${tvr_set[@]}" --set memory=ao &
  [ -d "$OUT/weights/virl-sft" ] && evaluate virl-sft "hf:$OUT/weights/virl-sft" virl "${virl_set[@]}" &
  wait
else
  stamp "skipping the final eval (past DEADLINE_S=$DEADLINE_S)"
fi
rm -f "$OUT"/eval/*/steps.jsonl  # large; episodes.jsonl + metrics.json hold the results

# ----------------------------------------------------------------------------------- 6. one summary
"$PY" "$ROOT/scripts/gpu/collect_results.py" "$OUT" > "$OUT/logs/collect.log" 2>&1 || stamp "FAILED: collect"
stamp "done"
cat "$OUT/results.md" 2>/dev/null
