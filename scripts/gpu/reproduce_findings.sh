#!/usr/bin/env bash
# The papers' findings with several seeds (issue 20): the multi-seed version of reproduce_rl.sh.
#
#   V-IRL (SFTvsRL, Figs. 6-7), from one SFT initialisation INIT_VIRL (default builtin:virl-sft):
#     sft-more  continued SFT on fresh expert episodes of a training city (seed 2000 draws; the init saw 1000+)
#     ppo       PPO with a value head (configs/ppo/virl_vl_small.yaml; RATIO=sequence|token, CRITIC_WARMUP)
#   each arm x seed (SEEDS, default "0 1 2") trained side by side at matched compute: every run gets the
#   same time budget, TRAIN_MIN minutes of wall clock (the trainers' time_budget_minutes: model loading
#   not counted, the in-training evals counted; the same eval set and a similar number of evals per arm;
#   `findings collect` then states each run's training seconds with the eval time taken out, and the
#   samples: env steps for PPO, expert samples for SFT — they are not matched, they are reported). A
#   trainer checks its budget after each update, so a run overshoots by up to one update (a PPO update is
#   ~30-60 s on the H200, an SFT step well under 1 s): the table's compute line gives the realised ratio.
#   Runs of one seed batch (SEED_PARALLEL seeds at once, default all) share the GPU at the same time, so
#   the two arms of a seed always see the same contention.
#   Evaluated (greedy) on EVAL_VIRL episodes per split (default 200): in-dist and rule-OOD (relative
#   actions) on a metro city of seed 7, visual-OOD on a hillside city of seed 8 (EVAL_VIRL routes, one
#   episode per route) — seeds never used in training (training city: metro seed 11; the built-in model's
#   cities: 101-108). VISION_REQUIRED=1 (default) sets intersection_in_text=false everywhere (expert data,
#   PPO's task, every eval: docs/virl.md, "Vision-required variant"); 0 keeps the reference prompt.
#   Closed-loop evals during training (eval.every: PPO_EVAL_EVERY updates, SFT_EVAL_EVERY steps; the first
#   IN_EVAL episodes of each eval split) give the curves; they choose nothing (no hyper-parameter is picked
#   on the eval cities). The SFT init is evaluated once (greedy decoding of one model: one "seed").
#   Then `spatialrl findings collect / table / curves` on a spec written into WORK from the run folders.
#
# TODO (not in this script yet): the TVR group — AO-SFT / VA-SFT baselines, VA-SFT + multi-turn GRPO
#   and AO-SFT + single-turn GRPO from builtin:tvr-va-sft / builtin:tvr-ao-sft, 3 seeds, >= 50 episodes per
#   category (reproduce_rl.sh's tvr_multi / tvr_single are the single-seed template), as a second ARMS
#   group with its own experiment in the spec (overall: true, min_episodes: 50).
#
# On one H200, as commands of at most 10 minutes on a warm machine (WORK persists between commands only
# while the machine stays warm; every stage skips what WORK already holds, so a command cut short is
# simply sent again):
#   source scripts/gpu/prelude.sh && STAGE=train OUT=$OUT timeout 570 bash scripts/gpu/reproduce_findings.sh
#   source scripts/gpu/prelude.sh && STAGE=eval  OUT=$OUT timeout 570 bash scripts/gpu/reproduce_findings.sh
#     (again until the timeline says "findings written": the evals resume where they were cut)
#   SMOKE=1 OUT=/tmp/smoke-findings bash scripts/gpu/reproduce_findings.sh   # CPU rehearsal (STAGE=all,
#     tiny cities, 2 seeds, a few seconds of training; `findings` gets --allow-fewer-seeds only here)
# The GPU machine needs .whl and .gl carried (bash scripts/gpu/bundle.sh once, here).
#
# Knobs (environment): STAGE (train | eval | all), SEEDS, SEED_PARALLEL, TRAIN_MIN (default: what the
# command leaves before TRAIN_END_S=540, at most 5), EVAL_VIRL, VISION_REQUIRED, RATIO, CRITIC_WARMUP,
# INIT_VIRL, PPO_LR (1e-5, the recipe's), SFT_LR (1e-4), PPO_UPDATES (a cap, 100: the time budget ends
# the run), IN_EVAL, PPO_EVAL_EVERY (2), SFT_EVAL_EVERY (150), VIRL_EPISODES (expert episodes for
# sft-more, 1000), EVAL_BATCH, END_S (every child is stopped by then, 550), RL_DTYPE (auto), WORK.
#
# $OUT gets: timeline.txt; findings.tar.gz (runs/<arm>-s<seed>/ config, metrics.jsonl, summary and the
# in-training eval folders; eval/<label>/ metrics.json, episodes.jsonl, run.json; findings/ the specs,
# findings.json, table.md, curve PNGs; logs/), packed also when the command is stopped (EXIT trap);
# and, once the evals are complete, findings.json, table.md and the curve PNGs beside it (<= 8 files).
set -uo pipefail

OUT=${OUT:?set OUT to the output folder}
SMOKE=${SMOKE:-0}
STAGE=${STAGE:-all}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${WORK:-/tmp/spatialrl-findings}
LOGS=$WORK/logs
mkdir -p "$LOGS" "$WORK/data" "$WORK/runs" "$WORK/eval" "$WORK/findings"
# shellcheck source=lib.sh
source "$ROOT/scripts/gpu/lib.sh"
rmdir "$OUT/logs" 2>/dev/null
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}   # several trainers and evals share the CPU cores

if [ "$SMOKE" = 1 ]; then
  SEEDS=${SEEDS:-0 1}; EVAL_VIRL=${EVAL_VIRL:-2}; IN_EVAL=${IN_EVAL:-1}; TRAIN_MIN=${TRAIN_MIN:-0.3}
  TRAIN_ROUTES=6; VIRL_EPISODES=${VIRL_EPISODES:-4}; EVAL_BATCH=${EVAL_BATCH:-6}; W_GRID=112
  END_S=${END_S:-100000}; TRAIN_END_S=${TRAIN_END_S:-100000}
  PPO_EVAL_EVERY=${PPO_EVAL_EVERY:-1}; SFT_EVAL_EVERY=${SFT_EVAL_EVERY:-2}
  PPO_SIZE=(--num_envs=2 --num_steps=4 --micro_batch_size=2 --grad_accum=1 --epochs=1 --sampling.max_new_tokens=96)
  SFT_SIZE=(--per_device_batch_size=2 --data.num_workers=0 --logging.every=1)
  FEWER=(--allow-fewer-seeds)
else
  SEEDS=${SEEDS:-0 1 2}; EVAL_VIRL=${EVAL_VIRL:-200}; IN_EVAL=${IN_EVAL:-16}; TRAIN_MIN=${TRAIN_MIN:-}
  TRAIN_ROUTES=300; VIRL_EPISODES=${VIRL_EPISODES:-1000}; EVAL_BATCH=${EVAL_BATCH:-200}; W_GRID=224
  END_S=${END_S:-550}; TRAIN_END_S=${TRAIN_END_S:-540}
  PPO_EVAL_EVERY=${PPO_EVAL_EVERY:-2}; SFT_EVAL_EVERY=${SFT_EVAL_EVERY:-150}
  # reproduce_rl.sh's sizes: 32 slots x 4 turns = 128 env steps per update; 4 epochs of 4 optimiser steps
  PPO_SIZE=(--num_envs=32 --num_steps=128 --micro_batch_size=8 --grad_accum=4 --sampling.max_new_tokens=128)
  SFT_SIZE=(--logging.every=25)
  FEWER=()
fi
GRID=$W_GRID   # the grid the built-in model was trained at (train_builtin.sh)
SEED_PARALLEL=${SEED_PARALLEL:-$(wc -w <<< "$SEEDS")}
VISION_REQUIRED=${VISION_REQUIRED:-1}; IIT=$([ "$VISION_REQUIRED" = 1 ] && echo false || echo true)
RATIO=${RATIO:-sequence}; CRITIC_WARMUP=${CRITIC_WARMUP:-0}; INIT_VIRL=${INIT_VIRL:-builtin:virl-sft}
PPO_LR=${PPO_LR:-1e-5}; SFT_LR=${SFT_LR:-1e-4}; PPO_UPDATES=${PPO_UPDATES:-100}; RL_DTYPE=${RL_DTYPE:-auto}
CITY=$WORK/data/city-train; EVAL_CITY=$WORK/data/city-eval; OOD_CITY=$WORK/data/city-eval-hillside
DATA=$WORK/data/virl-sft-more

pack() {  # everything worth keeping, into one file (the device tool returns at most 8)
  local p=$WORK/pack
  rm -rf "$p"; mkdir -p "$p/runs" "$p/eval"
  for run in "$WORK"/runs/*; do
    [ -d "$run" ] || continue
    local name; name=$(basename "$run"); mkdir -p "$p/runs/$name"
    cp "$run"/config.json "$run"/metrics.jsonl "$run"/summary.json "$p/runs/$name/" 2>/dev/null
    [ -d "$run/eval" ] && cp -r "$run/eval" "$p/runs/$name/"
  done
  for e in "$WORK"/eval/*; do
    [ -d "$e" ] && mkdir -p "$p/eval/$(basename "$e")" \
      && cp "$e"/metrics.json "$e"/episodes.jsonl "$e"/run.json "$p/eval/$(basename "$e")/" 2>/dev/null
  done
  find "$p" -name steps.jsonl -delete
  cp -r "$WORK/findings" "$LOGS" "$p/" 2>/dev/null
  cp "$OUT/timeline.txt" "$p/" 2>/dev/null
  tar -czf "$OUT/findings.tar.gz" -C "$p" . && rm -rf "$p"
}
trap pack EXIT
trap 'stamp "SIGTERM: stopping"; exit 143' TERM

left() { echo $(( END_S - $(elapsed) > 10 ? END_S - $(elapsed) : 10 )); }
stamp "stage=$STAGE smoke=$SMOKE work=$WORK seeds='$SEEDS' (parallel $SEED_PARALLEL) init=$INIT_VIRL" \
  "vision_required=$VISION_REQUIRED ratio=$RATIO critic_warmup=$CRITIC_WARMUP lr ppo=$PPO_LR sft=$SFT_LR"
machine_line >> "$OUT/timeline.txt" 2>&1

# ------------------------------------------------------------------------------------------- inputs
city() {  # style routes seed dir: built once per WORK
  [ -f "$4/route_infos.json" ] && return 0
  make_city "$1" "$2" "$3" "$4" > "$LOGS/city-$(basename "$4").log" 2>&1 \
    && stamp "city $(basename "$4") built ($1, seed $3, $2 routes)" || { stamp "FAILED: city $(basename "$4")"; return 1; }
}
eval_cities() {  # in-dist / rule-OOD and visual-OOD: seeds never used in training
  city metro "$EVAL_VIRL" 7 "$EVAL_CITY" &
  city hillside "$EVAL_VIRL" 8 "$OOD_CITY" &
  wait
}
inputs() {
  city metro "$TRAIN_ROUTES" 11 "$CITY" &
  eval_cities &
  wait
  [ -f "$DATA/meta.json" ] && return 0
  spatialrl data sft --task virl --data "$CITY" --split in-dist --set episodes="$VIRL_EPISODES" --set seed=2000 \
      --set grid_size=$GRID --set intersection_in_text=$IIT --out "$DATA" --overwrite --batch-size 32 \
      > "$LOGS/data-virl.log" 2>&1 \
    && stamp "data sft-more: $(grep -o '[0-9]* samples.*episodes' "$LOGS/data-virl.log" | tail -n 1)" \
    || stamp "FAILED: V-IRL expert data (logs/data-virl.log)"
}

# ------------------------------------------------------------------------------------------- train
in_train_eval() {  # the closed-loop evals for the curves: the first IN_EVAL episodes of each eval split
  echo --eval.task=virl --eval.data="$EVAL_CITY" --eval.split=in-dist,rule-ood,visual-ood \
    --eval.episodes="$IN_EVAL" --eval.batch_size=$((IN_EVAL * 3)) --eval.max_new_tokens=96
}
train_arm() {  # arm seed minutes
  local arm=$1 seed=$2 min=$3 name=$1-s$2 stop rc args
  [ -d "$WORK/runs/$name/final" ] && { stamp "skip $name: trained"; return; }
  local opts="{grid_size: $GRID, visual_data: $OOD_CITY, intersection_in_text: $IIT}"
  # shellcheck disable=SC2207
  args=($(in_train_eval))
  if [ "$arm" = ppo ]; then
    args=(ppo "$ROOT/configs/ppo/virl_vl_small.yaml" --model.path="$INIT_VIRL" --model.dtype="$RL_DTYPE"
          --seed=$((42 + seed)) --task.data="$CITY"
          "--task.options={split: in-dist, mode: vl, grid_size: $GRID, verify_iter: 2, seed: $((42 + seed)), episodes: 4096, intersection_in_text: $IIT}"
          --ratio="$RATIO" --critic_warmup="$CRITIC_WARMUP" --updates="$PPO_UPDATES" --optim.lr="$PPO_LR"
          --checkpoint.every=0 --eval.every="$PPO_EVAL_EVERY" "${args[@]}" "${PPO_SIZE[@]}")
  else
    args=(sft "$ROOT/configs/sft/virl_small.yaml" --model.path="$INIT_VIRL" "--model.preset_overrides={}"
          --seed="$seed" --data.train="$DATA" --optim.lr="$SFT_LR" --optim.warmup_ratio=0
          --eval.every="$SFT_EVAL_EVERY" "${args[@]}" "${SFT_SIZE[@]}")
  fi
  stop=$(( TRAIN_END_S - $(elapsed) )); [ "$stop" -lt 30 ] && stop=30
  stamp "train $name: $min min budget (stopped by SIGTERM within ${stop}s)"
  timeout --signal=TERM --kill-after=20 "$stop" "${SRL[@]}" train "${args[@]}" "--eval.options=$opts" \
      --output_dir="$WORK/runs/$name" --checkpoint.resume=never --logging.report_to=none \
      --time_budget_minutes="$min" > "$LOGS/train-$name.log" 2>&1
  rc=$?
  if [ "$rc" = 0 ] && [ -d "$WORK/runs/$name/final" ]; then stamp "trained $name: $(summary_of "$name")"
  else stamp "FAILED or cut: training $name, exit $rc (logs/train-$name.log): not usable at matched compute"
  fi
}
summary_of() {  # run name → one line: updates/steps, seconds, and for PPO the clip fractions, the critic's
               # explained variance and the share of sampled answers in the relative (rule-OOD) vocabulary
  "$PY" - "$WORK/runs/$1/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def series(k):
    return [r[k] for r in rows if isinstance(r.get(k), (int, float))]
steps = [r.get("step") for r in rows if "step" in r]
out = [f"last step {max(steps) if steps else '?'}"]
for k, name in [("ppo/clip_fraction_sequence", "clip seq"), ("ppo/clip_fraction_token", "clip tok"),
                ("value/explained_variance", "expl var"), ("rollout/answer_relative_share", "relative share")]:
    v = series(k)
    if v:
        out.append(f"{name} {' '.join(f'{x:.2f}' for x in v[:12])}")
print("; ".join(out))
PY
}
stage_train() {
  inputs
  [ -f "$DATA/meta.json" ] && [ -f "$OOD_CITY/route_infos.json" ] && [ -f "$EVAL_CITY/route_infos.json" ] \
    || { stamp "FAILED: inputs missing, no training"; return 1; }
  local seeds=($SEEDS) i j min
  for ((i = 0; i < ${#seeds[@]}; i += SEED_PARALLEL)); do
    # one budget for every run of the batch, fixed before any starts: matched wall-clock seconds
    if [ -n "$TRAIN_MIN" ]; then min=$TRAIN_MIN
    else min=$("$PY" -c "print(round(max(0.2, min(5, ($TRAIN_END_S - $(elapsed) - 120) / 60)), 2))")
    fi
    for ((j = i; j < i + SEED_PARALLEL && j < ${#seeds[@]}; j++)); do
      train_arm ppo "${seeds[j]}" "$min" &
      train_arm sft-more "${seeds[j]}" "$min" &
    done
    wait
  done
}

# ------------------------------------------------------------------------------------------- eval
model_of() {  # run name → the model to evaluate: final/ only (a cut run did not get the matched budget)
  [ -d "$WORK/runs/$1/final" ] && echo "$WORK/runs/$1/final"
}
evaluate() {  # label agent: greedy, EVAL_VIRL episodes per split; resumes a cut evaluation
  local label=$1 agent=$2
  [ -f "$WORK/eval/$label/metrics.json" ] && return 0
  if timeout "$(left)" "${SRL[@]}" eval --task virl --agent "$agent" --data "$EVAL_CITY" --split all \
      --set visual_data="$OOD_CITY" --set grid_size=$GRID --set episodes="$EVAL_VIRL" --set intersection_in_text=$IIT \
      --out "$WORK/eval/$label" --no-report --batch-size "$EVAL_BATCH" --max-new-tokens 96 --label "$label" \
      >> "$LOGS/eval-$label.log" 2>&1; then
    stamp "eval $label done"
  else
    stamp "FAILED or cut: eval $label (logs/eval-$label.log; send STAGE=eval again to resume it)"
  fi
}
budgets() {  # the time budgets the runs were given (config.json), e.g. "5.0" or "4.5/5.0" when batches differ
  "$PY" - "$WORK"/runs/*/config.json <<'PY'
import json, sys
print("/".join(sorted({str(json.load(open(f)).get("time_budget_minutes")) for f in sys.argv[1:]})))
PY
}
spec() {  # the findings specs, from the run folders that have a final eval (paths relative to WORK)
  local arm seed f=$WORK/findings/virl.yaml
  { echo "root: .."
    echo "bootstrap: {resamples: 10000, level: 0.95, seed: 0}"
    echo "experiments:"
    echo "  virl-sft-vs-ppo:"
    echo "    description: \"V-IRL VL from $INIT_VIRL, intersection_in_text=$IIT, $(budgets) min of training per run (time budget), ratio=$RATIO, critic_warmup=$CRITIC_WARMUP\""
    echo "    metric: success"
    echo "    min_episodes: $([ "$SMOKE" = 1 ] && echo "$EVAL_VIRL" || echo 200)"
    echo "    arms:"
    for arm in sft-more ppo; do
      echo "      $arm:"
      echo "        label: \"$([ $arm = ppo ] && echo "+ PPO (ratio $RATIO)" || echo "+ continued SFT")\""
      echo "        seeds:"
      for seed in $SEEDS; do
        [ -f "$WORK/eval/$arm-s$seed/metrics.json" ] \
          && echo "          $seed: {train: runs/$arm-s$seed, eval: eval/$arm-s$seed}"
      done
    done
  } > "$f"
  { echo "root: .."
    echo "experiments:"
    echo "  virl-init:"
    echo "    description: the SFT initialisation $INIT_VIRL, greedy, evaluated once"
    echo "    metric: success"
    echo "    min_episodes: $([ "$SMOKE" = 1 ] && echo "$EVAL_VIRL" || echo 200)"
    echo "    arms:"
    echo "      sft-init: {label: SFT initialisation, seeds: {0: {eval: eval/sft-init}}}"
  } > "$WORK/findings/virl-init.yaml"
}
findings() {
  local F=$WORK/findings key split ok=1
  spec
  "${SRL[@]}" findings collect --spec "$F/virl.yaml" --out "$F/findings.json" "${FEWER[@]}" > "$LOGS/findings.log" 2>&1 \
    && "${SRL[@]}" findings table --findings "$F/findings.json" --out "$F/table.md" >> "$LOGS/findings.log" 2>&1 \
    || { stamp "FAILED: findings collect/table (logs/findings.log)"; ok=0; }
  # the init: one greedy evaluation of one model, so one "seed" (--allow-fewer-seeds for this spec only)
  "${SRL[@]}" findings collect --spec "$F/virl-init.yaml" --out "$F/findings-init.json" --allow-fewer-seeds \
      >> "$LOGS/findings.log" 2>&1 \
    && "${SRL[@]}" findings table --findings "$F/findings-init.json" --out "$F/table-init.md" >> "$LOGS/findings.log" 2>&1 \
    || stamp "FAILED: findings of the init (logs/findings.log)"
  for split in visual-ood rule-ood in-dist; do
    key=eval/$split/success_rate
    "${SRL[@]}" findings curves --spec "$F/virl.yaml" --experiment virl-sft-vs-ppo --key "$key" --x gpu_seconds \
        --title "V-IRL $split success during training (in-training eval, $IN_EVAL episodes)" \
        --out "$F/curve-$split.png" "${FEWER[@]}" >> "$LOGS/findings.log" 2>&1 \
      || { stamp "FAILED: curve $split (logs/findings.log)"; ok=0; }
  done
  if [ "$ok" = 1 ]; then
    cp "$F/findings.json" "$OUT/findings.json"
    cat "$F/table.md" "$F/table-init.md" > "$OUT/table.md" 2>/dev/null
    cp "$F"/curve-*.png "$OUT/" 2>/dev/null
    cat "$OUT/table.md" >> "$OUT/timeline.txt"
    stamp "findings written"
  fi
}
stage_eval() {
  local arm seed m missing=0
  eval_cities
  evaluate sft-init "$INIT_VIRL" &
  for seed in $SEEDS; do
    for arm in sft-more ppo; do
      m=$(model_of "$arm-s$seed")
      if [ -n "$m" ]; then evaluate "$arm-s$seed" "hf:$m" &
      else stamp "no final model for $arm-s$seed: not evaluated (train it: STAGE=train)"
      fi
    done
  done
  wait
  for label in sft-init $(for seed in $SEEDS; do echo "sft-more-s$seed ppo-s$seed"; done); do
    [ -f "$WORK/eval/$label/metrics.json" ] || missing=$((missing + 1))
  done
  if [ "$missing" = 0 ]; then findings
  else stamp "$missing evaluation(s) not complete: send STAGE=eval again (they resume), then the findings are written"
  fi
}

case "$STAGE" in
  train) stage_train ;;
  eval) stage_eval ;;
  all) stage_train; stage_eval ;;
  *) echo "STAGE must be train, eval or all" >&2; exit 2 ;;
esac
cat "$OUT/timeline.txt" >> "$WORK/timeline-all.txt"
stamp "done"
