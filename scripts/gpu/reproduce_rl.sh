#!/usr/bin/env bash
# The papers' comparisons with the built-in model, on one GPU in one command (issue #7, item 5):
#
#   V-IRL (SFTvsRL, Figs. 6-7): builtin:virl-sft  →  continued SFT   (more expert data, same minutes)
#                                                  →  PPO            (configs/ppo/virl_vl_small.yaml)
#         evaluated on in-dist / rule-OOD (absolute directions) / visual-OOD (the hillside city);
#   TVR (TVRBench):  builtin:tvr-va-sft  →  multi-turn GRPO on live rollouts of the rl split
#                    builtin:tvr-ao-sft  →  single-turn GRPO on per-step expert prompts (sft split)
#         evaluated per category on the eval split.
#
# All four trainings run side by side (the 8M models leave the GPU mostly idle) until TRAIN_END_S,
# with in-training evaluations for the curves; then every model is evaluated on the same episodes.
#
#   source scripts/gpu/prelude.sh && OUT=$OUT bash scripts/gpu/reproduce_rl.sh   # H200, one 10-min command
#   SMOKE=1 OUT=/tmp/smoke bash scripts/gpu/reproduce_rl.sh                     # CPU rehearsal (~6 min)
# Carry .gl .whl runs/gpu-carry. Prepared here once: the TVR bench with its rl split
#   spatialrl tvr make-bench --out runs/gpu-inputs/tvr-bench --seed 0
#   mkdir -p runs/gpu-carry && tar -cJf runs/gpu-carry/tvr-bench.tar.xz -C runs/gpu-inputs tvr-bench
# (4 MB of JSON, 0.14 MB packed: the device tool carries 64 MiB beside the 50 MB of shipped weights),
# unpacked there first: mkdir -p runs/gpu-inputs && tar -xJf runs/gpu-carry/tvr-bench.tar.xz -C runs/gpu-inputs
# and a newer transformers for the vision cache (scripts/gpu/pack_transformers.sh 5.24.0).
#
# Knobs (environment): TRAIN_END_S (trainings stop by then, default 370), EVAL_END_S (final evals are
# cut then, 560), VIRL_EVAL / TVR_EVAL (final-eval episodes per V-IRL split / in all, 32 / 120),
# ARMS (any of virl tvr-multi tvr-single; default all three), RL_DTYPE (training precision of the RL
# arms, default auto = bf16 autocast; benchmarks/ppo_precision.py found its PPO ratios exact at lr 0
# on the H200), MULTI_TASKS (multi-turn GRPO tasks per update, 16),
# PPO_LR, GRPO_LR, SFT_LR (learning rates; defaults: the recipes' 1e-5 and 1e-4, and 1e-4 for continued
# SFT, near the end of the shipped models' SFT schedule; run 1 used PPO 1e-4), WORK.
#
# $OUT gets repro.tar.gz: runs/<arm>/ (config, metrics.jsonl, summary, in-training evals),
# eval/<arm>-<task>/ (metrics.json, episodes.jsonl), logs/, timeline.txt.
set -uo pipefail

OUT=${OUT:?set OUT to the output folder}
SMOKE=${SMOKE:-0}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${WORK:-/tmp/spatialrl-repro}
R=$WORK/result   # what is packed into $OUT at the end
mkdir -p "$R/logs" "$R/runs" "$R/eval" "$WORK/data" "$WORK/runs"
OUT_FINAL=$OUT; OUT=$R; mkdir -p "$OUT_FINAL"
# shellcheck source=lib.sh
source "$ROOT/scripts/gpu/lib.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}   # four trainers and the env workers share the CPU cores

if [ "$SMOKE" = 1 ]; then
  TRAIN_END_S=${TRAIN_END_S:-200}; EVAL_END_S=${EVAL_END_S:-900}; VIRL_EVAL=${VIRL_EVAL:-2}; TVR_EVAL=${TVR_EVAL:-4}
  VIRL_ROUTES=6; VIRL_EPISODES=4; IN_EVAL=2
  PPO_SIZE=(--num_envs=2 --num_steps=4 --micro_batch_size=2 --grad_accum=1 --epochs=1 --eval.every=1)
  MULTI_EVERY=(--eval.every=1 --action_match.every=1); SINGLE_EVERY=(--eval.every=1 --action_match.every=1)
  GRPO_SIZE=(--tasks_per_update=2 --group_size=2 --mini_batches=1 --micro_batch_size=4 --eval.every=1
             --single.expert_episodes=4 --single.prompts_per_update=2 --action_match.episodes=2)
  SFT_SIZE=(--per_device_batch_size=2 --data.num_workers=0 --eval.every=2 --logging.every=1)
else
  TRAIN_END_S=${TRAIN_END_S:-370}; EVAL_END_S=${EVAL_END_S:-560}; VIRL_EVAL=${VIRL_EVAL:-32}; TVR_EVAL=${TVR_EVAL:-120}
  VIRL_ROUTES=300; VIRL_EPISODES=600; IN_EVAL=12
  # 32 slots x 4 turns = 128 env steps per update; 4 epochs of 4 optimiser steps (8 x 4 samples)
  PPO_SIZE=(--num_envs=32 --num_steps=128 --micro_batch_size=8 --grad_accum=4 --sampling.max_new_tokens=128
            --eval.every=3)
  MULTI_EVERY=(--eval.every=4 --action_match.every=4); SINGLE_EVERY=(--eval.every=25 --action_match.every=10)
  GRPO_SIZE=(--single.expert_episodes=200)
  SFT_SIZE=(--eval.every=300)
fi
W=280; H=168; GRID=224          # the sizes the built-in models were trained at (train_builtin.sh)
[ "$SMOKE" = 1 ] && { W=112; H=64; GRID=112; }
ARMS=${ARMS:-virl tvr-multi tvr-single}; RL_DTYPE=${RL_DTYPE:-auto}; MULTI_TASKS=${MULTI_TASKS:-16}
has_arm() { [[ " $ARMS " == *" $1 "* ]]; }
PPO_LR=${PPO_LR:-1e-5}; GRPO_LR=${GRPO_LR:-1e-4}; SFT_LR=${SFT_LR:-1e-4}
BENCH=${TVR_BENCH:-$ROOT/runs/gpu-inputs/tvr-bench}
CITY=$WORK/city-metro; OOD_CITY=$WORK/city-hillside
stamp "start: smoke=$SMOKE train_end=${TRAIN_END_S}s bench=$BENCH lr ppo=$PPO_LR grpo=$GRPO_LR sft=$SFT_LR"
machine_line >> "$R/timeline.txt" 2>&1

# a trainer checks its time limit after each update (~30-40 s on the GPU), hence the 45 s margin
minutes_left() { "$PY" -c "print(round(max(0.2, ($TRAIN_END_S - $(elapsed) - 45) / 60), 2))"; }
run_trainer() {  # name, then the `spatialrl train ...` arguments; stops at TRAIN_END_S
  local name=$1; shift
  stamp "train $name ($(minutes_left) min)"
  if spatialrl train "$@" --output_dir="$WORK/runs/$name" --checkpoint.resume=never --logging.report_to=none \
      > "$R/logs/train-$name.log" 2>&1; then
    stamp "trained $name"
  else
    stamp "FAILED: training $name (logs/train-$name.log)"
  fi
}
# ----------------------------------------------------------------------------------- 1. TVR (starts at once)
tvr_multi() {
  run_trainer tvr-va-grpo-multi grpo "$ROOT/configs/grpo/tvr_multi_small.yaml" --model.path=builtin:tvr-va-sft \
    --model.dtype="$RL_DTYPE" --tasks_per_update="$MULTI_TASKS" \
    --task.data="$BENCH" --task.split=rl "--task.options={memory: va, width: $W, height: $H}" \
    --time_budget_minutes="$(minutes_left)" --optim.lr="$GRPO_LR" --checkpoint.every=0 --action_match.split=eval \
    --eval.task=tvr --eval.data="$BENCH" --eval.split=eval --eval.episodes=$IN_EVAL --eval.batch_size=$IN_EVAL \
    "--eval.options={memory: va, width: $W, height: $H}" "${MULTI_EVERY[@]}" "${GRPO_SIZE[@]}"
}
tvr_single() {
  run_trainer tvr-ao-grpo-single grpo "$ROOT/configs/grpo/tvr_single_small.yaml" --model.path=builtin:tvr-ao-sft \
    --model.dtype="$RL_DTYPE" \
    --task.data="$BENCH" --task.split=sft "--task.options={memory: ao, width: $W, height: $H}" \
    --time_budget_minutes="$(minutes_left)" --optim.lr="$GRPO_LR" --checkpoint.every=0 --action_match.split=eval \
    --eval.task=tvr --eval.data="$BENCH" --eval.split=eval --eval.episodes=$IN_EVAL --eval.batch_size=$IN_EVAL \
    "--eval.options={memory: ao, width: $W, height: $H}" "${SINGLE_EVERY[@]}" "${GRPO_SIZE[@]}"
}

# ----------------------------------------------------------------------------------- 2. V-IRL
virl_eval=(--eval.task=virl --eval.data="$CITY" --eval.split=in-dist,rule-ood,visual-ood --eval.episodes=$IN_EVAL
           --eval.batch_size=$((IN_EVAL * 3)) --eval.max_new_tokens=96 "--eval.options={grid_size: $GRID, visual_data: $OOD_CITY}")
virl_ppo() {
  run_trainer virl-ppo ppo "$ROOT/configs/ppo/virl_vl_small.yaml" --model.path=builtin:virl-sft --task.data="$CITY" \
    --model.dtype="$RL_DTYPE" \
    "--task.options={split: in-dist, mode: vl, grid_size: $GRID, verify_iter: 2, seed: 42, episodes: 4096}" \
    --time_budget_minutes="$(minutes_left)" --optim.lr="$PPO_LR" --checkpoint.every=0 "${virl_eval[@]}" "${PPO_SIZE[@]}"
}
virl_sft() {  # continued SFT: fresh expert episodes (seed 2000; the shipped model saw seed 1000), same city
  if ! spatialrl data sft --task virl --data "$CITY" --split in-dist --set episodes=$VIRL_EPISODES --set seed=2000 \
      --set grid_size=$GRID --out "$WORK/data/virl-sft-more" --overwrite --batch-size 32 > "$R/logs/data-virl.log" 2>&1; then
    stamp "FAILED: V-IRL expert data (logs/data-virl.log)"; return
  fi
  stamp "data virl: $(grep -o '[0-9]* samples.*episodes' "$R/logs/data-virl.log" | tail -n 1)"
  run_trainer virl-sft-more sft "$ROOT/configs/sft/virl_small.yaml" --model.path=builtin:virl-sft \
    "--model.preset_overrides={}" --data.train="$WORK/data/virl-sft-more" --optim.lr="$SFT_LR" --optim.warmup_ratio=0 \
    --time_budget_minutes="$(minutes_left)" "${virl_eval[@]}" "${SFT_SIZE[@]}"
}
virl_pipeline() {
  make_city metro "$VIRL_ROUTES" 0 "$CITY" > "$R/logs/city-metro.log" 2>&1 \
    && stamp "training city built" || { stamp "FAILED: training city (logs/city-metro.log)"; return; }
  [ -f "$OOD_CITY/route_infos.json" ] || wait_for "$OOD_CITY/route_infos.json" 120
  virl_ppo &
  virl_sft &
  wait
}
wait_for() { local i; for ((i = 0; i < $2; i++)); do [ -f "$1" ] && return 0; sleep 1; done; return 1; }

if has_arm virl; then
  ( make_city hillside 18 1 "$OOD_CITY" > "$R/logs/city-hillside.log" 2>&1 \
      && stamp "visual-OOD city built" || stamp "FAILED: visual-OOD city (logs/city-hillside.log)" ) &
  virl_pipeline &
fi
has_arm tvr-multi && tvr_multi &
has_arm tvr-single && tvr_single &
wait

# ----------------------------------------------------------------------------------- 3. final evaluation
model_of() {  # run folder → the model to evaluate: final/ or, after a time-limit stop, the last checkpoint's hf/
  local run=$WORK/runs/$1
  [ -d "$run/final" ] && { echo "$run/final"; return; }
  ls -d "$run"/checkpoints/*/hf 2>/dev/null | sort | tail -n 1
}
evaluate() {  # label agent task, then eval arguments
  local label=$1 agent=$2 task=$3; shift 3
  local tokens=32 batch=$TVR_EVAL; [ "$task" = virl ] && { tokens=96; batch=$((VIRL_EVAL * 3)); }
  if timeout $((EVAL_END_S - $(elapsed))) "$PY" -m spatialrl.cli eval --task "$task" --agent "$agent" \
      --out "$R/eval/$label" --overwrite --no-report --batch-size $batch --max-new-tokens $tokens --label "$label" "$@" \
      > "$R/logs/eval-$label.log" 2>&1; then
    stamp "eval $label done"
  else
    stamp "FAILED or cut: eval $label (logs/eval-$label.log)"
  fi
}
tvr_set=(--data "$BENCH" --split eval --limit "$TVR_EVAL" --set width=$W --set height=$H)
virl_set=(--data "$CITY" --split all --limit "$VIRL_EVAL" --set visual_data="$OOD_CITY" --set grid_size=$GRID)
if has_arm tvr-multi; then
  evaluate tvr-va-sft builtin:tvr-va-sft tvr "${tvr_set[@]}" --set memory=va &
  m=$(model_of tvr-va-grpo-multi); [ -n "$m" ] && evaluate tvr-va-grpo-multi "hf:$m" tvr "${tvr_set[@]}" --set memory=va &
fi
if has_arm tvr-single; then
  evaluate tvr-ao-sft builtin:tvr-ao-sft tvr "${tvr_set[@]}" --set memory=ao &
  m=$(model_of tvr-ao-grpo-single); [ -n "$m" ] && evaluate tvr-ao-grpo-single "hf:$m" tvr "${tvr_set[@]}" --set memory=ao &
fi
if has_arm virl; then
  evaluate virl-sft builtin:virl-sft virl "${virl_set[@]}" &
  m=$(model_of virl-ppo); [ -n "$m" ] && evaluate virl-ppo "hf:$m" virl "${virl_set[@]}" &
  m=$(model_of virl-sft-more); [ -n "$m" ] && evaluate virl-sft-more "hf:$m" virl "${virl_set[@]}" &
fi
wait
rm -f "$R"/eval/*/steps.jsonl

# ----------------------------------------------------------------------------------- 4. pack
for run in "$WORK"/runs/*; do
  name=$(basename "$run"); mkdir -p "$R/runs/$name"
  cp "$run"/config.json "$run"/metrics.jsonl "$run"/summary.json "$R/runs/$name/" 2>/dev/null
  [ -d "$run/eval" ] && cp -r "$run/eval" "$R/runs/$name/" && find "$R/runs/$name/eval" -name steps.jsonl -delete
done
stamp "done"
tar -czf "$OUT_FINAL/repro.tar.gz" -C "$R" .
cp "$R/timeline.txt" "$OUT_FINAL/timeline.txt"
cat "$R/timeline.txt"
