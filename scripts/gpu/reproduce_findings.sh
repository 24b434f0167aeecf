#!/usr/bin/env bash
# The papers' findings with several seeds (issue 20): the multi-seed version of reproduce_rl.sh.
#
#   V-IRL (SFTvsRL, Figs. 6-7), from one SFT initialisation INIT_VIRL (default builtin:virl-sft):
#     sft-more  continued SFT on fresh expert episodes of a training city (seed 2000 draws; the init saw 1000+)
#     ppo       PPO with a value head (configs/ppo/virl_vl_small.yaml; RATIO=sequence|token, CRITIC_WARMUP)
#     ppo-token with TOKEN_ARM=1: ppo exactly, with the per-token ratio (the issue's "report both": the
#               sequence ratio's clip fraction vs the token one's, and what each learns, side by side)
#   each arm x seed (SEEDS, default "0 1 2") trained side by side at matched compute: every run gets the
#   same time budget, TRAIN_MIN minutes of wall clock (the trainers' time_budget_minutes: model loading
#   not counted, the in-training evals counted; the same eval set and a similar number of evals per arm;
#   `findings collect` then states each run's training seconds with the eval time taken out, and the
#   samples: env steps for PPO, expert samples for SFT — they are not matched, they are reported). A
#   trainer checks its budget after each update, so a run overshoots by up to one update (a PPO update is
#   ~30-60 s on the H200, an SFT step well under 1 s): the table's compute line gives the realised ratio.
#   Runs of one seed batch (SEED_PARALLEL seeds at once, default all) share the GPU at the same time, so
#   the two arms of a seed always see the same contention.
#   Budgets longer than one command (TRAIN_MIN set, e.g. 12): every run gets SIGTERM PAUSE_S (60) seconds
#   before TRAIN_END_S, finishes its update, saves a checkpoint and stops ("paused"); the next STAGE=train
#   resumes it (checkpoint.resume=auto; the budget counts training time across resumes, spatialrl/train/
#   run.py) until it reaches TRAIN_MIN and writes final/. Without TRAIN_MIN the budget fits one command.
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
# TVR (TVRBench), ARMS group `tvr` (ARMS="virl tvr", or one group per command: 18 runs at once are too
#   many for one GPU's 16 cores), from builtin:tvr-va-sft / builtin:tvr-ao-sft (INIT_VA, INIT_AO):
#     grpo-multi   VA-SFT + multi-turn GRPO on live rollouts of the bench's rl split (tvr_multi_small.yaml)
#     grpo-single  AO-SFT + single-turn GRPO on per-step expert prompts of its sft split (tvr_single_small.yaml)
#     cot-sft      TVRBench's CoT-SFT arm. No built-in model was trained with chain of thought, so here it is
#                  VA-SFT + continued SFT on chain-of-thought expert trajectories of the bench's sft split
#                  (`spatialrl data sft --task tvr --cot`: templated thoughts from the pose difference,
#                  envs/tvr/thoughts.py; VA memory, TW x TH frames; COT_EPISODES episodes, built in the data
#                  stage), configs/sft/tvr_va_small.yaml at COT_LR; evaluated with the CoT prompt (cot=true)
#                  and an answer budget of COT_TOKENS (a thought + the action; the others get 32)
#     grpo-anchored  beyond the papers: grpo-multi exactly (same init, recipe, tasks per update, evals) plus
#                  GiGPO-style pose-anchored step credit (--pose_anchored=true: steps taken from the same pose
#                  across a task's G trajectories form step groups, A = A_traj + step_weight * A_step).
#                  grpo-multi vs grpo-anchored is pose-anchored step credit vs plain trajectory GRPO at equal
#                  compute: both get the same time budget and the same tasks per update (MULTI_TASKS x
#                  group_size trajectories), and `findings collect` reports the samples (env steps) each
#                  run used, so the table shows whether they also saw equal samples
#   all with the vision tower trainable (GRPO: --model.freeze_vision=false, the issue's standard; SFT trains
#   every weight), the same time budget per run, SEEDS; the two inits are the AO-SFT / VA-SFT baselines
#   (evaluated once, greedy).
#   Evaluated on EVAL_TVR episodes of the eval split (default 200 = 50 per category, round-robin; the
#   bench of seed 0: its eval scenes are disjoint from its rl / sft scenes, the inits were trained on
#   benches 101-108). Bench: TVR_BENCH (default runs/gpu-inputs/tvr-bench as in reproduce_rl.sh), else
#   built into WORK. The four arms of every seed of a batch train side by side: 12 runs at once for 3 seeds
#   (SEED_PARALLEL=1: one seed's four at a time, each batch with the full budget, in more commands).
#
# On one H200, as commands of at most 10 minutes on a warm machine (WORK persists between commands only
# while the machine stays warm; every stage skips what WORK already holds, so a command cut short is
# simply sent again):
#   source scripts/gpu/prelude.sh && STAGE=train OUT=$OUT timeout 570 bash scripts/gpu/reproduce_findings.sh
#   source scripts/gpu/prelude.sh && STAGE=eval  OUT=$OUT timeout 570 bash scripts/gpu/reproduce_findings.sh
#     (again until the timeline says "findings written": the evals resume where they were cut)
#   TRAIN_MIN=12 ... STAGE=train ... sent two or three times (the runs pause and resume) before STAGE=eval
#   ... ARMS=tvr STAGE=train ... and ARMS=tvr STAGE=eval ... likewise for TVR (WORK keeps both groups;
#   STAGE=eval with ARMS="virl tvr" at the end writes one findings.json with both experiments)
#   Settings are chosen on validation cities first (VALIDATION=1; scripts/gpu/findings_sweep.sh runs one
#   WORK per PPO_LR x PPO_TEMP over shared inputs, PPO only, one seed)
#   SMOKE=1 OUT=/tmp/smoke-findings bash scripts/gpu/reproduce_findings.sh   # CPU rehearsal (STAGE=all,
#     tiny cities, 2 seeds, a few seconds of training; `findings` gets --allow-fewer-seeds only here;
#     TVR: a 4-task bench, rollouts and evals capped at 4 turns, 1 task x 2 samples per multi-turn update,
#     2 in-training eval episodes; tests/scripts/test_reproduce_findings_smoke.py runs it with SEEDS=0)
# The GPU machine needs .whl and .gl carried (bash scripts/gpu/bundle.sh once, here).
#
# Knobs (environment): STAGE (inputs | train | eval | all), ARMS (groups: virl, tvr; default virl), SEEDS,
# SEED_PARALLEL, TRAIN_MIN (default: what the command leaves before TRAIN_END_S=540, at most 5; set: a total
# budget over several STAGE=train commands), PAUSE_S (a paused run's seconds to save, 60),
# END_S (every child is stopped by then, 550), RL_DTYPE (auto), WORK. V-IRL: EVAL_VIRL, VISION_REQUIRED,
# RATIO, TOKEN_ARM, CRITIC_WARMUP, PPO_SHUFFLE (samples | episodes), PPO_MB, INIT_VIRL, PPO_LR (1e-5, the
# recipe's), PPO_TEMP (0.2, the recipe's), PPO_LR_STEPS (the cosine period lr_max_steps in updates, 20: the
# recipe's; empty = 20), VIRL_ARMS ("ppo sft-more"), VALIDATION (1: evaluate on the
# validation cities, to choose settings), DATA_DIR (inputs shared by several WORKs), SFT_LR (1e-4), PPO_UPDATES (a cap, 100:
# the time budget ends the run), IN_EVAL, PPO_EVAL_EVERY (2), SFT_EVAL_EVERY (150), VIRL_EPISODES (expert
# episodes for sft-more, 1000), EVAL_BATCH. TVR: EVAL_TVR (200), IN_EVAL_TVR (8), GRPO_LR (1e-4),
# MULTI_TASKS (8), MULTI_EVERY / SINGLE_EVERY (in-training eval every 4 / 25 GRPO updates), TVR_BENCH,
# INIT_VA, INIT_AO, COT_EPISODES (CoT expert episodes of the sft split, 400), COT_LR (1e-4), COT_TOKENS
# (answer budget with a thought, 128), COT_EVERY (cot-sft's in-training eval every N SFT steps, 100).
#
# $OUT gets: timeline.txt; findings.tar.gz (runs/<arm>-s<seed>/ config, metrics.jsonl, summary and the
# in-training eval folders; eval/<label>/ metrics.json, episodes.jsonl, run.json; findings/ the specs,
# findings.json, table.md, curve PNGs; logs/), packed also when the command is stopped (EXIT trap);
# and, once the evals are complete, findings.json, table.md (with the inits' table) and the curve PNGs
# beside it (V-IRL: visual-OOD, rule-OOD, in-dist; TVR: overall) — at most 8 files.
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
# several trainers and evals share the CPU cores: two threads each on the GPU machine; one in SMOKE (four
# trainers, then six evals, on a CPU of a few cores: two threads each made the TVR rehearsal ~2x slower)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$([ "$SMOKE" = 1 ] && echo 1 || echo 2)}

if [ "$SMOKE" = 1 ]; then
  SEEDS=${SEEDS:-0 1}; EVAL_VIRL=${EVAL_VIRL:-2}; IN_EVAL=${IN_EVAL:-1}; TRAIN_MIN=${TRAIN_MIN:-0.3}
  TRAIN_ROUTES=6; VIRL_EPISODES=${VIRL_EPISODES:-4}; EVAL_BATCH=${EVAL_BATCH:-6}; W_GRID=112
  END_S=${END_S:-100000}; TRAIN_END_S=${TRAIN_END_S:-100000}
  PPO_EVAL_EVERY=${PPO_EVAL_EVERY:-1}; SFT_EVAL_EVERY=${SFT_EVAL_EVERY:-2}
  PPO_SIZE=(--num_envs=2 --num_steps=4 --micro_batch_size=2 --grad_accum=1 --epochs=1 --sampling.max_new_tokens=96)
  # one DataLoader worker as on the GPU (the recipe has 4): the pause must survive the group SIGTERM
  SFT_SIZE=(--per_device_batch_size=2 --data.num_workers=1 --logging.every=1)
  FEWER=(--allow-fewer-seeds)
  EVAL_TVR=${EVAL_TVR:-4}; IN_EVAL_TVR=${IN_EVAL_TVR:-2}; TW=112; TH=64; MULTI_TASKS=${MULTI_TASKS:-1}
  # episodes of at most 4 turns in rollouts and evals (not in the expert data): a CPU-sized rehearsal
  TVR_CAP=", max_steps_single: 4, max_steps_multi: 4"; TVR_CAP_SET=(--set max_steps_single=4 --set max_steps_multi=4)
  MULTI_EVERY=${MULTI_EVERY:-1}; SINGLE_EVERY=${SINGLE_EVERY:-1}; COT_EPISODES=${COT_EPISODES:-4}
  COT_EVERY=${COT_EVERY:-2}
  GRPO_SIZE=(--group_size=2 --mini_batches=1 --micro_batch_size=4 --single.expert_episodes=4
             --single.prompts_per_update=2 --action_match.episodes=2)
  BENCH_ARGS=(--sizes "eval=4,sft=4,rl=4,diag_rotate=0,diag_move=0" --scenes "sft=1,eval=1,rl=1")
else
  SEEDS=${SEEDS:-0 1 2}; EVAL_VIRL=${EVAL_VIRL:-200}; IN_EVAL=${IN_EVAL:-16}; TRAIN_MIN=${TRAIN_MIN:-}
  TRAIN_ROUTES=300; VIRL_EPISODES=${VIRL_EPISODES:-1000}; EVAL_BATCH=${EVAL_BATCH:-200}; W_GRID=224
  END_S=${END_S:-550}; TRAIN_END_S=${TRAIN_END_S:-540}
  PPO_EVAL_EVERY=${PPO_EVAL_EVERY:-2}; SFT_EVAL_EVERY=${SFT_EVAL_EVERY:-150}
  # reproduce_rl.sh's sizes: 32 slots x 4 turns = 128 env steps per update; 4 epochs of 4 optimiser steps
  PPO_SIZE=(--num_envs=32 --num_steps=128 --micro_batch_size=8 --grad_accum=4 --sampling.max_new_tokens=128)
  SFT_SIZE=(--logging.every=25)
  FEWER=()
  EVAL_TVR=${EVAL_TVR:-200}; IN_EVAL_TVR=${IN_EVAL_TVR:-8}; TW=280; TH=168; MULTI_TASKS=${MULTI_TASKS:-8}
  MULTI_EVERY=${MULTI_EVERY:-4}; SINGLE_EVERY=${SINGLE_EVERY:-25}; COT_EPISODES=${COT_EPISODES:-400}
  COT_EVERY=${COT_EVERY:-100}
  GRPO_SIZE=(--single.expert_episodes=200)
  TVR_CAP=""; TVR_CAP_SET=()   # the env's own turn limits (30 single-room, 40 multi-room)
  BENCH_ARGS=()
fi
ARMS=${ARMS:-virl}
has_group() { [[ " $ARMS " == *" $1 "* ]]; }
for g in $ARMS; do [ "$g" = virl ] || [ "$g" = tvr ] || { echo "ARMS: groups are virl and tvr, got $g" >&2; exit 2; }; done
arms_of() { has_group virl && echo "$VIRL_ARMS${TOKEN_ARM:+ ppo-token}"; has_group tvr && echo "grpo-multi grpo-single grpo-anchored cot-sft"; }
INIT_VA=${INIT_VA:-builtin:tvr-va-sft}; INIT_AO=${INIT_AO:-builtin:tvr-ao-sft}; GRPO_LR=${GRPO_LR:-1e-4}
# the frame layout of cot-sft's data and evals: INIT_VA's own (both shipped TVR models read one joined image
# since 2026-12-07). The GRPO arms adopt their init's layout by themselves (rl_common.adopt_model_image_sizes)
has_group tvr && { TVR_FRAMES=${TVR_FRAMES:-$(model_frames "$INIT_VA")} || { echo "INIT_VA: cannot read $INIT_VA's settings" >&2; exit 2; }; }
COT_LR=${COT_LR:-1e-4}; COT_TOKENS=${COT_TOKENS:-128}   # 1e-4: a tenth of the VA-SFT's peak, as GRPO_LR
BENCH=${TVR_BENCH:-$ROOT/runs/gpu-inputs/tvr-bench}
[ -f "$BENCH/bench.json" ] || BENCH=$WORK/data/tvr-bench
GRID=$W_GRID   # the grid the built-in model was trained at (train_builtin.sh)
SEED_PARALLEL=${SEED_PARALLEL:-$(wc -w <<< "$SEEDS")}; PAUSE_S=${PAUSE_S:-60}
VISION_REQUIRED=${VISION_REQUIRED:-1}; IIT=$([ "$VISION_REQUIRED" = 1 ] && echo false || echo true)
RATIO=${RATIO:-sequence}; TOKEN_ARM=$([ "${TOKEN_ARM:-0}" = 1 ] && echo 1); CRITIC_WARMUP=${CRITIC_WARMUP:-0}
INIT_VIRL=${INIT_VIRL:-builtin:virl-sft}
# PPO's epochs: one sample per row (samples, the reference) or a conversation's turns packed in one row
# (episodes: micro-batches of PPO_MB conversations; the default 2 x grad_accum 4 keeps an optimiser step at
# <= 32 samples with 4 turns per env and update, as the recipe's 8 samples x 4). Not for V-IRL's built-in
# agent: each of its steps is a fresh one-turn prompt (the history is text), so a "conversation" is one
# sample (rollout/samples_per_conversation 1.05 on the H100, 2026-12-06) and micro-batches of 2 made the
# update 2x slower (45 s vs 19-27 s). It pays for chat-style multi-turn agents (docs/rl.md, "Speed").
PPO_SHUFFLE=${PPO_SHUFFLE:-samples}
case "$PPO_SHUFFLE" in
  samples) ;;
  episodes) [ "$SMOKE" = 1 ] || PPO_SIZE+=(--micro_batch_size="${PPO_MB:-2}") ;;
  *) echo "PPO_SHUFFLE: samples or episodes, got $PPO_SHUFFLE" >&2; exit 2 ;;
esac
PPO_LR=${PPO_LR:-1e-5}; SFT_LR=${SFT_LR:-1e-4}; PPO_UPDATES=${PPO_UPDATES:-100}; RL_DTYPE=${RL_DTYPE:-auto}
PPO_TEMP=${PPO_TEMP:-0.2}   # PPO's sampling temperature (the recipe's, SFTvsRL's 0.2)
PPO_LR_STEPS=${PPO_LR_STEPS:-20}  # PPO's cosine period (lr_max_steps, SFTvsRL's 20): the lr is at its floor after it
VIRL_ARMS=${VIRL_ARMS:-ppo sft-more}
for a in $VIRL_ARMS; do [ "$a" = ppo ] || [ "$a" = sft-more ] || { echo "VIRL_ARMS: ppo and/or sft-more, got $a" >&2; exit 2; }; done
# VALIDATION=1: every evaluation (in-training and final) on the validation cities, metro seed 9 and hillside
# seed 10, instead of the eval cities 7 and 8 — to choose a setting (e.g. PPO_LR x PPO_TEMP, one WORK each)
# without looking at the eval cities. Not findings: fewer seeds are allowed, and the tables say validation.
VALIDATION=${VALIDATION:-0}
D=${DATA_DIR:-$WORK/data}   # DATA_DIR: inputs shared by several WORKs (a sweep; build them once: STAGE=inputs)
mkdir -p "$D"
CITY=$D/city-train; DATA=$D/virl-sft-more; COT_DATA=$WORK/data/tvr-cot-sft
if [ "$VALIDATION" = 1 ]; then
  EVAL_SEED=9; OOD_SEED=10; EVAL_CITY=$D/city-val; OOD_CITY=$D/city-val-hillside; FEWER=(--allow-fewer-seeds)
else
  EVAL_SEED=7; OOD_SEED=8; EVAL_CITY=$D/city-eval; OOD_CITY=$D/city-eval-hillside
fi

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
stamp "stage=$STAGE arms=$ARMS smoke=$SMOKE work=$WORK seeds='$SEEDS' (parallel $SEED_PARALLEL) init=$INIT_VIRL" \
  "vision_required=$VISION_REQUIRED ratio=$RATIO critic_warmup=$CRITIC_WARMUP lr ppo=$PPO_LR sft=$SFT_LR grpo=$GRPO_LR cot=$COT_LR" \
  "ppo temperature=$PPO_TEMP lr_steps=$PPO_LR_STEPS virl arms='$VIRL_ARMS' validation=$VALIDATION data=$D"
machine_line >> "$OUT/timeline.txt" 2>&1

# ------------------------------------------------------------------------------------------- inputs
city() {  # style routes seed dir: built once per WORK
  [ -f "$4/route_infos.json" ] && return 0
  make_city "$1" "$2" "$3" "$4" > "$LOGS/city-$(basename "$4").log" 2>&1 \
    && stamp "city $(basename "$4") built ($1, seed $3, $2 routes)" || { stamp "FAILED: city $(basename "$4")"; return 1; }
}
eval_cities() {  # in-dist / rule-OOD and visual-OOD: seeds never used in training (or validation: 9, 10)
  city metro "$EVAL_VIRL" "$EVAL_SEED" "$EVAL_CITY" &
  city hillside "$EVAL_VIRL" "$OOD_SEED" "$OOD_CITY" &
  wait
}
has_arm() { [[ " $(arms_of) " == *" $1 "* ]]; }
sft_data_ready() { [ -f "$DATA/meta.json" ] || ! has_arm sft-more; }  # sft-more's expert data, when it runs
inputs() {
  city metro "$TRAIN_ROUTES" 11 "$CITY" &
  eval_cities &
  wait
  sft_data_ready && return 0
  spatialrl data sft --task virl --data "$CITY" --split in-dist --set episodes="$VIRL_EPISODES" --set seed=2000 \
      --set grid_size=$GRID --set intersection_in_text=$IIT --out "$DATA" --overwrite --batch-size 32 \
      > "$LOGS/data-virl.log" 2>&1 \
    && stamp "data sft-more: $(grep -o '[0-9]* samples.*episodes' "$LOGS/data-virl.log" | tail -n 1)" \
    || stamp "FAILED: V-IRL expert data (logs/data-virl.log)"
}

tvr_bench() {  # the TVR bench of seed 0 (its rl / sft splits train, its eval split evaluates)
  [ -f "$BENCH/bench.json" ] && return 0
  spatialrl tvr make-bench --out "$BENCH" --seed 0 --overwrite "${BENCH_ARGS[@]}" > "$LOGS/tvr-bench.log" 2>&1 \
    && stamp "TVR bench built (seed 0) in $BENCH" || { stamp "FAILED: TVR bench (logs/tvr-bench.log)"; return 1; }
}
tvr_cot_data() {  # cot-sft's data: CoT expert trajectories (templated thoughts) of the bench's sft split, VA memory
  [ -f "$COT_DATA/meta.json" ] && return 0
  spatialrl data sft --task tvr --data "$BENCH" --split sft --cot --set memory=va --set width=$TW --set height=$TH --set frames="$TVR_FRAMES" \
      --episodes "$COT_EPISODES" --seed 0 --out "$COT_DATA" --overwrite --batch-size 32 > "$LOGS/data-tvr-cot.log" 2>&1 \
    && stamp "data cot-sft: $(grep -o '[0-9]* samples.*episodes' "$LOGS/data-tvr-cot.log" | tail -n 1)" \
    || { stamp "FAILED: TVR CoT expert data (logs/data-tvr-cot.log)"; return 1; }
}

# ------------------------------------------------------------------------------------------- train
in_train_eval() {  # the closed-loop evals for the curves: the first IN_EVAL episodes of each eval split
  echo --eval.task=virl --eval.data="$EVAL_CITY" --eval.split=in-dist,rule-ood,visual-ood \
    --eval.episodes="$IN_EVAL" --eval.batch_size=$((IN_EVAL * 3)) --eval.max_new_tokens=96
}
train_arm() {  # arm seed minutes
  local arm=$1 seed=$2 min=$3 name=$1-s$2 stop rc args
  finished "$name" && { stamp "skip $name: trained"; return; }
  local opts="{grid_size: $GRID, visual_data: $OOD_CITY, intersection_in_text: $IIT}"
  # shellcheck disable=SC2207
  args=($(in_train_eval))
  if [ "$arm" = grpo-multi ] || [ "$arm" = grpo-single ] || [ "$arm" = grpo-anchored ]; then
    local mem=va init=$INIT_VA recipe=tvr_multi_small.yaml split=rl every=$MULTI_EVERY
    [ "$arm" = grpo-single ] && { mem=ao; init=$INIT_AO; recipe=tvr_single_small.yaml; split=sft; every=$SINGLE_EVERY; }
    opts="{memory: $mem, width: $TW, height: $TH$TVR_CAP}"
    args=(grpo "$ROOT/configs/grpo/$recipe" --model.path="$init" --model.dtype="$RL_DTYPE" --model.freeze_vision=false
          --seed="$seed" --task.data="$BENCH" --task.split=$split "--task.options=$opts" --optim.lr="$GRPO_LR"
          --checkpoint.every=0 --action_match.split=eval --eval.task=tvr --eval.data="$BENCH"
          --eval.split=eval --eval.episodes="$IN_EVAL_TVR" --eval.batch_size="$IN_EVAL_TVR"
          --eval.every="$every" --action_match.every="$every" "${GRPO_SIZE[@]}")
    [ "$arm" = grpo-single ] || args+=(--tasks_per_update="$MULTI_TASKS")
    [ "$arm" = grpo-anchored ] && args+=(--pose_anchored=true)   # the only difference from grpo-multi
  elif [ "$arm" = cot-sft ]; then
    [ -f "$COT_DATA/meta.json" ] || { stamp "FAILED: no CoT data for $name (logs/data-tvr-cot.log)"; return; }
    opts="{memory: va, width: $TW, height: $TH, frames: $TVR_FRAMES, cot: true$TVR_CAP}"
    args=(sft "$ROOT/configs/sft/tvr_va_small.yaml" --model.path="$INIT_VA" "--model.preset_overrides={}"
          --seed="$seed" --data.train="$COT_DATA" --optim.lr="$COT_LR" --optim.warmup_ratio=0
          --checkpoint.every=0 --eval.task=tvr --eval.data="$BENCH" --eval.split=eval
          --eval.episodes="$IN_EVAL_TVR" --eval.batch_size="$IN_EVAL_TVR" --eval.max_new_tokens="$COT_TOKENS"
          --eval.every="$COT_EVERY" "${SFT_SIZE[@]}")
  elif [ "$arm" = ppo ] || [ "$arm" = ppo-token ]; then
    local ratio=$RATIO; [ "$arm" = ppo-token ] && ratio=token   # ppo-token: the only difference from ppo
    args=(ppo "$ROOT/configs/ppo/virl_vl_small.yaml" --model.path="$INIT_VIRL" --model.dtype="$RL_DTYPE"
          --seed=$((42 + seed)) --task.data="$CITY"
          "--task.options={split: in-dist, mode: vl, grid_size: $GRID, verify_iter: 2, seed: $((42 + seed)), episodes: 4096, intersection_in_text: $IIT}"
          --ratio="$ratio" --critic_warmup="$CRITIC_WARMUP" --updates="$PPO_UPDATES" --optim.lr="$PPO_LR"
          --shuffle="$PPO_SHUFFLE" --sampling.temperature="$PPO_TEMP" --lr_max_steps="$PPO_LR_STEPS"
          --checkpoint.every=0 --eval.every="$PPO_EVAL_EVERY" "${args[@]}" "${PPO_SIZE[@]}")
  else
    args=(sft "$ROOT/configs/sft/virl_small.yaml" --model.path="$INIT_VIRL" "--model.preset_overrides={}"
          --seed="$seed" --data.train="$DATA" --optim.lr="$SFT_LR" --optim.warmup_ratio=0
          --eval.every="$SFT_EVAL_EVERY" "${args[@]}" "${SFT_SIZE[@]}")
  fi
  # a budget set by hand may outlast the command: SIGTERM PAUSE_S early, so the run can save and pause
  local margin=0 grace=20; [ -n "$TRAIN_MIN" ] && { margin=$PAUSE_S; grace=$PAUSE_S; }
  stop=$(( TRAIN_END_S - margin - $(elapsed) )); [ "$stop" -lt 30 ] && stop=30
  stamp "train $name: $min min budget (SIGTERM within ${stop}s: a run not done by then pauses)"
  timeout --signal=TERM --kill-after="$grace" "$stop" "${SRL[@]}" train "${args[@]}" "--eval.options=$opts" \
      --output_dir="$WORK/runs/$name" --checkpoint.resume=auto --logging.report_to=none \
      --time_budget_minutes="$min" >> "$LOGS/train-$name.log" 2>&1
  rc=$?
  # rc is 124 when SIGTERM came during the final save or eval, which the run then completes
  if finished "$name"; then stamp "trained $name: $(summary_of "$name")"
  elif paused "$name"; then stamp "paused $name: $(summary_of "$name") (send STAGE=train again: it resumes)"
  else stamp "FAILED or cut: training $name, exit $rc (logs/train-$name.log): not usable at matched compute"
  fi
}
finished() {  # run name: final/ and summary.json (written last, after the final eval): the whole budget ran
  [ -d "$WORK/runs/$1/final" ] && [ -f "$WORK/runs/$1/summary.json" ]
}
paused() {  # run name: a checkpoint to resume from (SIGTERM paused it after an update), no final model
  compgen -G "$WORK/runs/$1/checkpoints/step-*" > /dev/null
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
        shown = [f"{x:.2f}" for x in v]  # a long run: its first and last updates, not only the first
        out.append(f"{name} {' '.join(shown if len(shown) <= 16 else shown[:6] + ['...'] + shown[-6:])}")
print("; ".join(out))
PY
}
stage_train() {
  has_group tvr && { tvr_bench && tvr_cot_data; } &
  has_group virl && inputs &
  wait
  if has_group virl && ! { sft_data_ready && [ -f "$OOD_CITY/route_infos.json" ] \
      && [ -f "$EVAL_CITY/route_infos.json" ]; }; then stamp "FAILED: V-IRL inputs missing, no training"; return 1; fi
  if has_group tvr && [ ! -f "$BENCH/bench.json" ]; then stamp "FAILED: no TVR bench, no training"; return 1; fi
  local seeds=($SEEDS) i j min arm
  for ((i = 0; i < ${#seeds[@]}; i += SEED_PARALLEL)); do
    # one budget for every run of the batch, fixed before any starts: matched wall-clock seconds
    if [ -n "$TRAIN_MIN" ]; then min=$TRAIN_MIN
    else min=$("$PY" -c "print(round(max(0.2, min(5, ($TRAIN_END_S - $(elapsed) - 120) / 60)), 2))")
    fi
    for ((j = i; j < i + SEED_PARALLEL && j < ${#seeds[@]}; j++)); do
      for arm in $(arms_of); do train_arm "$arm" "${seeds[j]}" "$min" & done
    done
    wait
  done
}

# ------------------------------------------------------------------------------------------- eval
model_of() {  # run name → the model to evaluate: a finished run's final/ only (a cut or paused run did not
  finished "$1" && echo "$WORK/runs/$1/final"  # get the matched budget)
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
arm_seeds() {  # arm: the seed lines of a spec, for the seeds whose final eval is complete
  local seed
  for seed in $SEEDS; do
    [ -f "$WORK/eval/$1-s$seed/metrics.json" ] && echo "          $seed: {train: runs/$1-s$seed, eval: eval/$1-s$seed}"
  done
}
min_eps() { [ "$SMOKE" = 1 ] && echo "$1" || echo "$2"; }  # smoke: what it ran; else the standard
virl_experiment() {  # name metric description: the V-IRL arms' block of the findings spec
  echo "  $1:"
  echo "    description: \"$3\""
  echo "    metric: $2"
  echo "    min_episodes: $(min_eps "$EVAL_VIRL" 200)"
  echo "    arms:"
  has_arm sft-more && arm_block sft-more "+ continued SFT"
  has_arm ppo && arm_block ppo "+ PPO (ratio $RATIO, temperature $PPO_TEMP, lr $PPO_LR)"
  [ -n "$TOKEN_ARM" ] && arm_block ppo-token "+ PPO (ratio token)"
  return 0
}
arm_block() {  # arm label: an arm's block of a findings spec, with its evaluated seeds
  echo "      $1:"
  echo "        label: \"$2\""
  echo "        seeds:"
  arm_seeds "$1"
}
spec() {  # the findings specs, from the run folders that have a final eval (paths relative to WORK)
  { echo "root: .."
    echo "bootstrap: {resamples: 10000, level: 0.95, seed: 0}"
    echo "experiments:"
    if has_group virl; then
      virl_experiment virl-sft-vs-ppo success \
        "V-IRL VL from $INIT_VIRL, intersection_in_text=$IIT, $(budgets ppo sft-more ppo-token) min of training per run (time budget), ratio=$RATIO, critic_warmup=$CRITIC_WARMUP, ppo shuffle=$PPO_SHUFFLE, temperature=$PPO_TEMP, evaluated on $([ "$VALIDATION" = 1 ] && echo "VALIDATION cities (metro 9, hillside 10)" || echo "the eval cities (metro 7, hillside 8)")"
      # the paper's rule-OOD metric (Fig. 6) is per-step accuracy: the same runs, per_step_accuracy per episode
      virl_experiment virl-sft-vs-ppo-per-step per_step_accuracy \
        "the same runs, metric per-step accuracy (mean over episodes of each episode's share of correct steps; the paper pools steps)"
    fi
    if has_group tvr; then
      echo "  tvr-sft-grpo:"
      echo "    description: \"TVR from $INIT_VA / $INIT_AO, vision tower trainable, $(budgets grpo-multi grpo-single grpo-anchored cot-sft) min of training per run (time budget); grpo-anchored = grpo-multi + pose-anchored step credit (same budget and tasks per update); cot-sft = VA-SFT + continued SFT on $COT_EPISODES templated-CoT expert episodes of the sft split, evaluated with cot=true, $COT_TOKENS new tokens\""
      echo "    metric: success"
      echo "    overall: true"
      echo "    min_episodes: $(min_eps 1 50)"
      echo "    arms:"
      echo "      va-sft-grpo-multi:"
      echo "        label: \"VA-SFT + multi-turn GRPO\""
      echo "        seeds:"
      arm_seeds grpo-multi
      echo "      ao-sft-grpo-single:"
      echo "        label: \"AO-SFT + single-turn GRPO\""
      echo "        seeds:"
      arm_seeds grpo-single
      echo "      va-sft-grpo-anchored:"
      echo "        label: \"VA-SFT + multi-turn GRPO, pose-anchored step credit\""
      echo "        seeds:"
      arm_seeds grpo-anchored
      echo "      va-sft-cot-sft:"
      echo "        label: \"VA-SFT + CoT-SFT (templated thoughts)\""
      echo "        seeds:"
      arm_seeds cot-sft
    fi
  } > "$WORK/findings/findings.yaml"
  { echo "root: .."   # the inits: one greedy evaluation of one model each, so one "seed"
    echo "experiments:"
    if has_group virl; then
      echo "  virl-init:"
      echo "    description: the SFT initialisation $INIT_VIRL, greedy, evaluated once"
      echo "    metric: success"
      echo "    min_episodes: $(min_eps "$EVAL_VIRL" 200)"
      echo "    arms:"
      echo "      sft-init: {label: SFT initialisation, seeds: {0: {eval: eval/sft-init}}}"
      echo "  virl-init-per-step:"
      echo "    description: the same evaluation, metric per-step accuracy"
      echo "    metric: per_step_accuracy"
      echo "    min_episodes: $(min_eps "$EVAL_VIRL" 200)"
      echo "    arms:"
      echo "      sft-init: {label: SFT initialisation, seeds: {0: {eval: eval/sft-init}}}"
    fi
    if has_group tvr; then
      echo "  tvr-init:"
      echo "    description: the SFT baselines $INIT_VA / $INIT_AO, greedy, evaluated once"
      echo "    metric: success"
      echo "    overall: true"
      echo "    min_episodes: $(min_eps 1 50)"
      echo "    arms:"
      echo "      va-sft: {label: VA-SFT, seeds: {0: {eval: eval/tvr-va-sft}}}"
      echo "      ao-sft: {label: AO-SFT, seeds: {0: {eval: eval/tvr-ao-sft}}}"
    fi
  } > "$WORK/findings/init.yaml"
}
budgets() {  # arm names: the time budgets their runs were given (config.json), e.g. "5.0" or "4.5/5.0"
  local a; local files=()
  for a in "$@"; do files+=("$WORK"/runs/"$a"-s*/config.json); done
  "$PY" - "${files[@]}" <<'PY'
import json, os, sys
print("/".join(sorted({str(json.load(open(f)).get("time_budget_minutes")) for f in sys.argv[1:] if os.path.isfile(f)})))
PY
}
curve() {  # experiment key name
  "${SRL[@]}" findings curves --spec "$WORK/findings/findings.yaml" --experiment "$1" --key "$2" --x gpu_seconds \
      --title "$1: ${2#eval/} during training (in-training evals)" --out "$WORK/findings/curve-$3.png" "${FEWER[@]}" \
      >> "$LOGS/findings.log" 2>&1 || { stamp "FAILED: curve $3 (logs/findings.log)"; return 1; }
}
findings() {
  local F=$WORK/findings split ok=1
  rm -f "$F"/*   # written afresh from the run folders
  spec
  "${SRL[@]}" findings collect --spec "$F/findings.yaml" --out "$F/findings.json" "${FEWER[@]}" > "$LOGS/findings.log" 2>&1 \
    && "${SRL[@]}" findings table --findings "$F/findings.json" --out "$F/table.md" >> "$LOGS/findings.log" 2>&1 \
    || { stamp "FAILED: findings collect/table (logs/findings.log)"; ok=0; }
  "${SRL[@]}" findings collect --spec "$F/init.yaml" --out "$F/findings-init.json" --allow-fewer-seeds \
      >> "$LOGS/findings.log" 2>&1 \
    && "${SRL[@]}" findings table --findings "$F/findings-init.json" --out "$F/table-init.md" >> "$LOGS/findings.log" 2>&1 \
    || { stamp "FAILED: findings of the inits (logs/findings.log)"; ok=0; }
  if has_group virl; then
    for split in visual-ood rule-ood in-dist; do curve virl-sft-vs-ppo "eval/$split/success_rate" "virl-$split" || ok=0; done
  fi
  has_group tvr && { curve tvr-sft-grpo eval/overall/success_rate tvr-overall || ok=0; }
  if [ "$ok" = 1 ]; then
    cp "$F/findings.json" "$OUT/"   # findings-init.json is in findings.tar.gz (<= 8 files in $OUT)
    cat "$F/table.md" "$F/table-init.md" > "$OUT/table.md"
    cp "$F"/curve-*.png "$OUT/"
    cat "$OUT/table.md" >> "$OUT/timeline.txt"
    stamp "findings written"
  fi
}
evaluate_tvr() {  # label agent memory [cot]: greedy, EVAL_TVR episodes of the eval split (round-robin over
  local label=$1 agent=$2 cot=(--max-new-tokens 32)   # categories); cot: the CoT prompt, COT_TOKENS per answer
  [ "${4:-}" = cot ] && cot=(--set cot=true --max-new-tokens "$COT_TOKENS")
  [ -f "$WORK/eval/$label/metrics.json" ] && return 0
  if timeout "$(left)" "${SRL[@]}" eval --task tvr --agent "$agent" --data "$BENCH" --split eval --limit "$EVAL_TVR" \
      --set memory="$3" --set width=$TW --set height=$TH "${TVR_CAP_SET[@]}" --out "$WORK/eval/$label" --no-report \
      --batch-size "$EVAL_TVR" "${cot[@]}" --label "$label" >> "$LOGS/eval-$label.log" 2>&1; then
    stamp "eval $label done"
  else
    stamp "FAILED or cut: eval $label (logs/eval-$label.log; send STAGE=eval again to resume it)"
  fi
}
stage_eval() {
  local arm seed m label missing=0 labels=()
  has_group virl && eval_cities &
  has_group tvr && tvr_bench &
  wait
  if has_group virl; then evaluate sft-init "$INIT_VIRL" & labels+=(sft-init); fi
  if has_group tvr; then
    evaluate_tvr tvr-va-sft "$INIT_VA" va &
    evaluate_tvr tvr-ao-sft "$INIT_AO" ao &
    labels+=(tvr-va-sft tvr-ao-sft)
  fi
  for seed in $SEEDS; do
    for arm in $(arms_of); do
      labels+=("$arm-s$seed")
      m=$(model_of "$arm-s$seed")
      if [ -z "$m" ]; then stamp "no final model for $arm-s$seed: not evaluated (train it: STAGE=train)"; continue; fi
      case $arm in
        grpo-multi | grpo-anchored) evaluate_tvr "$arm-s$seed" "hf:$m" va & ;;
        cot-sft) evaluate_tvr "$arm-s$seed" "hf:$m" va cot & ;;
        grpo-single) evaluate_tvr "$arm-s$seed" "hf:$m" ao & ;;
        *) evaluate "$arm-s$seed" "hf:$m" & ;;
      esac
    done
  done
  wait
  for label in "${labels[@]}"; do [ -f "$WORK/eval/$label/metrics.json" ] || missing=$((missing + 1)); done
  if [ "$missing" = 0 ]; then findings
  else stamp "$missing evaluation(s) not complete: send STAGE=eval again (they resume), then the findings are written"
  fi
}

case "$STAGE" in
  inputs) { has_group tvr && tvr_bench; } & { has_group virl && inputs; } & wait ;;
  train) stage_train ;;
  eval) stage_eval ;;
  all) stage_train; stage_eval ;;
  *) echo "STAGE must be inputs, train, eval or all" >&2; exit 2 ;;
esac
cat "$OUT/timeline.txt" >> "$WORK/timeline-all.txt"
stamp "done"
