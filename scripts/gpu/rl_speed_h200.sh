#!/usr/bin/env bash
# RL trainer speed on one H200 in one 10-minute command (issue #7 "Speed", issue #10's 1-GPU rows):
#   0. benchmarks/ppo_precision.py: PPO ratios at lr 0 under bf16 autocast and fp32
#   1. benchmarks/rl_speed.py, built-in small model (PPO samples/min, GRPO update time)
#   2. benchmarks/rl_speed.py, random Llama-3.2-11B-Vision-sized model, AdamW on the GPU
#   3. with OFFLOAD=1 (as a second command): the 11B with the optimizer offloaded to the host (moments
#      in CPU memory, no fp32 master copy)
#   4. with FAST=1 (a command of its own): the 11B PPO with every lever: frozen tower + vision cache,
#      LoRA r 16 with rollouts from a merged copy, threaded envs, micro-batch 4; static then dynamic KV
#      cache (DECODE=1 first runs benchmarks/decode_speed.py; DYNAMIC=1 adds the unmerged dynamic row;
#      FAST=1 PACKED=1 instead: the static merged row at 4 turns per env, packed conversations vs samples)
#   5. with FROZEN=1 (as a command of its own): the 11B PPO with a frozen vision tower, vision cache off
#      and on side by side (the cache then serves the scoring pass and the epochs), and the bf16 PPO
#      ratio check of `shuffle: batches` at micro-batch 4 (1-tile grids, to fit)
#   6. with QWEN=1 (a command of its own): the random Qwen2.5-VL-7B-sized model (qwen25vl7b-random, 8.3B):
#      PPO and multi-turn GRPO with the 11B's settings (full fine-tune, AdamW on the GPU), then the rollout
#      benchmark at batch 1, 8, 32 and 128
#   7. with QWEN_LORA=1 (a command of its own): the 8.3B with a frozen tower, vision cache and LoRA r 16,
#      PPO at micro-batch 1 with 16 envs x 4 turns, packed conversations (shuffle episodes) then samples;
#      the rollout's levers: QWEN_KV=static QWEN_MERGE=on (rollouts from a merged copy, static KV cache:
#      the 11B's), QWEN_SHUFFLE=episodes for that row alone
# Every step has its own time limit, so a slow one cannot starve the rest; each writes its JSON as
# soon as it has a row.
#
#   source scripts/gpu/prelude.sh && OUT=$OUT bash scripts/gpu/rl_speed_h200.sh
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=lib.sh
source "$ROOT/scripts/gpu/lib.sh"
cd "$ROOT"
machine_line >> "$OUT/timeline.txt" 2>&1
B=(benchmarks/rl_speed.py --grid-size 2405 --new-tokens 128 --updates 2)
step() {  # seconds label, then the command
  local limit=$1 label=$2; shift 2
  stamp "start $label (limit ${limit}s)"
  timeout "$limit" "$@" > "$OUT/logs/$label.log" 2>&1; stamp "end $label: rc=$?"
}
# 11B: 16 env slots x 2 turns = 32 PPO samples per update (4 epochs, micro-batch 1: 4 ran out of memory);
# GRPO 4 tasks x G 4
BIG=(--model llama11b-random --gradient-checkpointing --num-envs 16 --num-steps 32 --minibatch-size 1 --grad-accum 32
     --tasks 4 --group-size 4)
if [ "${QWEN_LORA:-0}" = 1 ]; then
  # the 8.3B's cheaper recipe (frozen tower + vision cache, LoRA r 16) at micro-batch 1, 64 samples per optimiser
  # step (16 envs x 4 turns): whole conversations packed in one row (shuffle episodes: 47.4 samples/min on an
  # H100, 2026-12-06), then one sample per forward (26.7). With 2 turns per env the random model's 3-answer
  # episodes leave nothing to pack after update 1. Micro-batch 4 runs out of memory on an 80 GB card (activations)
  step "${LIMIT_QWEN_LORA:-540}" qwen-lora "$PY" "${B[@]}" --model qwen25vl7b-random --algos ppo --freeze-vision \
    --vision-cache-mb 2048 --lora 16 --num-envs 16 --num-steps 64 --minibatch-size 1 --grad-accum 64 \
    --shuffle ${QWEN_SHUFFLE:-episodes samples} --kv-cache "${QWEN_KV:-dynamic}" --merge-lora "${QWEN_MERGE:-off}" \
    --offload none --out "$OUT/rl_speed-qwen25vl7b-random-lora${QWEN_KV:+-$QWEN_KV}${QWEN_MERGE:+-merge-$QWEN_MERGE}.json"
  tail -n 14 "$OUT"/logs/*.log; exit 0
fi
if [ "${QWEN:-0}" = 1 ]; then
  # 8.3B: weights + gradients + AdamW moments in bf16 = 66 GB; images at most 1280 decoder tokens each
  # (QWEN_MAX_PIXELS in benchmarks/rollout_throughput.py); the row settings are the 11B's (BIG)
  step "${LIMIT_QWEN_RL:-330}" qwen-rl "$PY" "${B[@]}" "${BIG[@]/llama11b-random/qwen25vl7b-random}" --offload none \
    --out "$OUT/rl_speed-qwen25vl7b-random.json"
  # 4 rows x 25 s, each ending at its next turn boundary, after a 12 s env-only row, the 8.3B build and a
  # warm-up turn at batch 128; every row is written as soon as it ends (a cut step keeps them)
  step "${LIMIT_QWEN_ROLLOUT:-220}" qwen-rollout "$PY" benchmarks/rollout_throughput.py --model qwen25vl7b-random \
    --batch-sizes 1 8 32 128 --row-seconds 25 --out "$OUT/rollout_throughput-qwen25vl7b-random.json"
  tail -n 14 "$OUT"/logs/*.log; exit 0
fi
if [ "${FAST:-0}" = 1 ]; then
  # decode (DECODE=1): eager vs static KV cache (compiled decoder) on the 11B's rollout generate, with the
  # sampled vs teacher-forced log-prob check; then the 11B PPO with every lever on: frozen tower + vision
  # cache, LoRA r 16, threaded envs, no gradient checkpointing (LoRA leaves the memory for it)
  [ "${DECODE:-0}" = 1 ] && step 150 decode "$PY" benchmarks/decode_speed.py --model llama11b-random --batch-size 16 \
    --new-tokens 128 --repeats 1 --out "$OUT/decode_speed-llama11b-random.json"
  FASTROW=(--algos ppo --freeze-vision --vision-cache-mb 2048 --lora 16 --num-envs 16 --num-steps 32
           --updates "${UPDATES:-2}" --grid-size 2405 --new-tokens 128)
  # micro-batch 4 at 32 samples per optimiser step (8 peaked at 122 GiB; the merged copy adds ~20 GB),
  # rollouts from the merged-LoRA copy (sampling.merge_lora): static KV cache (its first update compiles
  # the decoder, one compile per prompt-length bucket, ~90 s each on a fresh H200), then dynamic (no
  # compile). Without the copy: static 41.4 samples/min, generate 12.8 s (960e294); dynamic 25.6, 35.6 s
  if [ "${PACKED:-0}" = 1 ]; then
    # PACKED=1 (a command of its own): the static merged row with 4 turns per env and update, a conversation's
    # turns in one row (shuffle episodes, one conversation per forward), then one sample per forward; 32
    # samples per optimiser step both ways (rl_speed.py scales the accumulation to conversations); the later
    # --num-steps wins in argparse. The 8.3B gained 1.78x from this (docs/rl.md "Speed")
    for order in episodes samples; do
      step "${LIMIT_PACKED:-280}" "big-fast-static-merged-4turns-$order" "$PY" benchmarks/rl_speed.py \
        --model llama11b-random "${FASTROW[@]}" --num-steps 64 --kv-cache static --minibatch-size 1 \
        --grad-accum 32 --shuffle "$order" --merge-lora on \
        --out "$OUT/rl_speed-llama11b-random-fast-static-merged-4turns-$order.json"
    done
    tail -n 14 "$OUT"/logs/*.log; exit 0
  fi
  step "${LIMIT_STATIC:-330}" big-fast-static-merged "$PY" benchmarks/rl_speed.py --model llama11b-random \
    "${FASTROW[@]}" --kv-cache static --minibatch-size 4 --grad-accum 8 --merge-lora on \
    --out "$OUT/rl_speed-llama11b-random-fast-static-merged.json"
  step "${LIMIT_DYNAMIC:-230}" big-fast-dynamic-merged "$PY" benchmarks/rl_speed.py --model llama11b-random \
    "${FASTROW[@]}" --kv-cache dynamic --minibatch-size 4 --grad-accum 8 --merge-lora on \
    --out "$OUT/rl_speed-llama11b-random-fast-dynamic-merged.json"
  [ "${DYNAMIC:-0}" = 1 ] && step "${LIMIT_DYNAMIC:-250}" big-fast-dynamic "$PY" benchmarks/rl_speed.py \
    --model llama11b-random "${FASTROW[@]}" --kv-cache dynamic --minibatch-size 4 --grad-accum 8 \
    --out "$OUT/rl_speed-llama11b-random-fast-dynamic.json"
  tail -n 14 "$OUT"/logs/*.log; exit 0
fi
if [ "${FROZEN:-0}" = 1 ]; then
  step 420 big-frozen "$PY" "${B[@]}" "${BIG[@]}" --algos ppo --freeze-vision --vision-cache-mb 0 2048 \
    --out "$OUT/rl_speed-llama11b-random-frozen.json"
  step 150 shuffle "$PY" benchmarks/ppo_precision.py --model llama11b-random --dtypes bfloat16 --shuffle samples batches \
    --grid-size 560 --minibatch-size 4 --grad-accum 4 --num-envs 8 --num-steps 16 --new-tokens 128 \
    --gradient-checkpointing --out "$OUT/ppo_precision-llama11b-shuffle.json"
  tail -n 12 "$OUT"/logs/*.log; exit 0
fi
if [ "${OFFLOAD:-0}" != 1 ]; then
  step 70 precision "$PY" benchmarks/ppo_precision.py --out "$OUT/ppo_precision.json"
  step 120 small "$PY" "${B[@]}" --model builtin-small --offload none --out "$OUT/rl_speed-builtin-small.json"
  step 330 big "$PY" "${B[@]}" "${BIG[@]}" --offload none --out "$OUT/rl_speed-llama11b-random.json"
fi
# the offload row needs a command of its own (its first update took over 130 s): OFFLOAD=1 runs only it
[ "${OFFLOAD:-0}" = 1 ] && step 500 big-offload "$PY" "${B[@]}" "${BIG[@]}" --algos ppo --offload cpu --no-master \
  --out "$OUT/rl_speed-llama11b-random-offload.json"
tail -n 12 "$OUT"/logs/*.log
