#!/usr/bin/env bash
# Train the three built-in models — virl-sft, tvr-va-sft, tvr-ao-sft — from scratch on one GPU, in
# commands on a warm machine (WORK persists between them), then evaluate them on held-out episodes.
# One session's plan (each command sent within 30 s of the previous one's return: the machine, and
# WORK, stay only that long; TOTAL_MIN is the training budget of each model across the commands; the
# exact times and arms of the next session are in docs/training.md, "State"):
#
#   source scripts/gpu/prelude.sh && STAGE=train  TOTAL_MIN=16 TRAIN_END_S=575 OUT=$OUT timeout 590 bash scripts/gpu/train_builtin.sh
#   source scripts/gpu/prelude.sh && STAGE=resume TOTAL_MIN=16 TRAIN_END_S=520 FINAL=0 OUT=$OUT timeout 555 bash scripts/gpu/train_builtin.sh
#   source scripts/gpu/prelude.sh && STAGE=resume TOTAL_MIN=16 TRAIN_END_S=<budget left - 70> OUT=$OUT timeout <+30> bash scripts/gpu/train_builtin.sh
#
# Across sessions: keep what a command returned (bash scripts/gpu/keep_weights.sh /work/.device/<n> → .init/),
# carry .init beside .whl and .gl, and run with INIT=.init DATA_ROUND=<previous + 1> (fresh houses and routes).
#
# then, on any machine (the CPU is enough; the weights come back as OUT/<arm>.tar.gz, unpacked into
# WORK/weights/): STAGE=eval LEARN_BENCH=0 VECTOR_BENCH=0 WORK=... OUT=... bash scripts/gpu/train_builtin.sh
#
# The first command builds the data; each arm merges its shards, compiles them for the tensor engine
# (compile_data.py) and starts training as soon as its own shards are in (the others still building), then
# trains until TRAIN_END_S, where SIGTERM pauses each run with a checkpoint (train/run.py); each resume continues
# them (FINAL=0: and leaves them paused) and packs the weights, the last (FINAL=1, the default) ends them
# at their checkpoint as finished models.
# Without TOTAL_MIN, STAGE=train trains to the end within the one command (STAGE=all: and evaluates).
# ARMS picks the models trained side by side (default: the three shipped ones; the joined-frame arms are
# tvr-ao-joined, tvr-ao-joined-dagger and tvr-va-joined, the last from the joined AO model); with candidate recipes
# for the TVR action-only model (ARMS="virl-sft tvr-ao-sft tvr-va-sft tvr-ao-allopt tvr-ao-pre": every
# optimal action as a label; visual pretraining pairs mixed in), STAGE=eval scores each on a validation
# bench (seed 1) and writes eval/selection.json: the arm to ship as tvr-ao-sft, chosen without the test
# bench (seed 0), whose results are reported for every arm.
#   SMOKE=1 OUT=/tmp/smoke bash scripts/gpu/train_builtin.sh        # CPU rehearsal of both stages (tiny)
# (the GPU machine needs .whl and .gl carried: bash scripts/gpu/bundle.sh once, here)
#
# STAGE=train: data at scale, built in parallel processes (16 cores):
#   V-IRL  NCITY metro cities (seeds 101..), VIRL_EPISODES expert episodes each → merged dataset;
#          VIRL_NOISE > 0 (default 0) adds retry turns: a noisy expert's wrong answer, the verifier's
#          retry message, the right answer as label (the wrong one context only). Off by default: a noisy
#          expert's data *instead of* the plain expert's lowered validation success (third 2026-12-05 session);
#          the arm virl-retry trains on both — the plain shards and the same episodes' retry shards (virlr-*,
#          VIRL_RETRY_NOISE, default 0.3), so every state keeps its first-attempt sample and ~30% also get a
#          retry sample: the recipe of the eighth 2026-12-05 session's CPU continuation (docs/training.md);
#          the arm virl-dagger adds roll-in shards (virld-*: the shipped model's own mistakes as retries);
#          VIRL_NOTEXT=n (default 0): the last n cities' episodes with the vision-required prompt
#          (intersection_in_text=false), so the model also works where the text does not name intersections;
#          VIRL_GRID (224): the grid size of every V-IRL sample and eval (the model records it; when set, the
#          V-IRL arms' processor bound follows it, model.max_pixels = VIRL_GRID², see init_args). The misses
#          left are destination calls from 112-px views where shop names are not legible (fourteenth
#          session): a larger grid (448) needs panoramas with the pixels, CITY_ARGS='--pano-width 2048'
#          (a 90-degree view of a 512-px panorama is 128 px wide)
#   TVR    NBENCH benches (seeds 101..; sft split only; TVR_SCENES houses each: 100 since the second
#          2026-12-05 session, 40 before — unseen houses are what a frame-reading policy lacked, issue 19)
#          → action-only data from a noisy expert
#          (EXPERT_NOISE: off-path states, labels stay the look-first oracle's) and visual-action
#          trajectories of the plain expert → merged datasets
#   then the three SFT runs side by side on the GPU with the tensor data engine (data.engine=tensor),
#   each ending by TRAIN_END_S. Weights → $OUT/<name>.tar.gz (one file per model: the device tool
#   returns at most 8 files).
# STAGE=eval: held-out data never used in training — the TVR bench of seed 0 (its eval split: 50 tasks
#   per category, scenes of their own), a metro city of seed 7 (in-dist, rule-OOD) and a hillside city of
#   seed 8 (visual-OOD) — then `spatialrl eval` of expert, random and the three models at their shipped
#   settings, benchmarks/sft_speed.py and benchmarks/vision_learnability.py (the shipped TVR size learning
#   second-image colour and 4x4-pattern identity: does it learn to compare frames?); results → $OUT/results.tar.gz.
set -uo pipefail

OUT=${OUT:?set OUT to the output folder}
SMOKE=${SMOKE:-0}
STAGE=${STAGE:-all}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${WORK:-/tmp/spatialrl-gpu}
# Logs stay in WORK and come back as one $OUT/logs.tar.gz (the device tool returns at most 8 files), also
# when the command is stopped: run it under `timeout` shorter than the call's limit so this trap runs.
LOGS=$WORK/logs
mkdir -p "$LOGS" "$WORK/data" "$WORK/runs" "$WORK/eval" "$WORK/weights"
# shellcheck source=lib.sh
source "$ROOT/scripts/gpu/lib.sh"
rmdir "$OUT/logs" 2>/dev/null
pack_logs() {
  for n in $ARMS; do
    [ -f "$WORK/runs/$n/metrics.jsonl" ] && cp "$WORK/runs/$n/metrics.jsonl" "$LOGS/metrics-$n.jsonl"
  done
  tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs 2>/dev/null
}
trap pack_logs EXIT

if [ "$SMOKE" = 1 ]; then
  NCITY=${NCITY:-2}; CITY_ROUTES=${CITY_ROUTES:-4}; VIRL_EPISODES=${VIRL_EPISODES:-4}; NBENCH=${NBENCH:-2}
  TVR_SFT=${TVR_SFT:-4}; TVR_SCENES=${TVR_SCENES:-1}; TRAIN_END_S=${TRAIN_END_S:-100000}; BUDGET_MIN=${BUDGET_MIN:-0.2}
  VAL_ROUTES=${VAL_ROUTES:-4}; VAL_EVERY=${VAL_EVERY:-2}; VAL_SAMPLES=${VAL_SAMPLES:-8}; VAL_SAMPLES_VA=${VAL_SAMPLES_VA:-4}
  EVAL_TVR=${EVAL_TVR:-4}; VAL_TVR=${VAL_TVR:-4}; EVAL_VIRL=${EVAL_VIRL:-2}; EVAL_ROUTES=${EVAL_ROUTES:-4}; W=112; H=64; GRID=${VIRL_GRID:-112}
  TRAIN_EXTRA=(--model.path=preset:tiny "--model.preset_overrides={}" --data.num_workers=0 --logging.every=1)
  BS_VIRL=2; BS_AO=4; BS_VA=2; PROBE_STATES=${PROBE_STATES:-8}; MIN_TRAIN_S=${MIN_TRAIN_S:-10}; MIN_COMPILE_S=${MIN_COMPILE_S:-10}
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # the arms' trainers share a few CPU cores: one thread each
  VECTOR_BENCH_ARGS=${VECTOR_BENCH_ARGS:---sizes 112x64 --num-envs 4 --steps 16 --repeats 1 --scenes 1}
else
  NCITY=${NCITY:-8}; CITY_ROUTES=${CITY_ROUTES:-200}; VIRL_EPISODES=${VIRL_EPISODES:-600}; NBENCH=${NBENCH:-8}
  TVR_SFT=${TVR_SFT:-600}; TVR_SCENES=${TVR_SCENES:-100}; TRAIN_END_S=${TRAIN_END_S:-560}; BUDGET_MIN=${BUDGET_MIN:-7}
  VAL_ROUTES=${VAL_ROUTES:-60}; VAL_EVERY=${VAL_EVERY:-500}; VAL_SAMPLES=${VAL_SAMPLES:-256}; VAL_SAMPLES_VA=${VAL_SAMPLES_VA:-32}
  EVAL_TVR=${EVAL_TVR:-200}; VAL_TVR=${VAL_TVR:-100}; EVAL_VIRL=${EVAL_VIRL:-120}; EVAL_ROUTES=${EVAL_ROUTES:-400}; W=280; H=168; GRID=${VIRL_GRID:-224}
  # per-update batch of each kind of arm. The 8.0M action-only model at 128 ran ~1,000 samples/s while the
  # other arms were still compiling and ~450 with four arms side by side (H100, 2026-12-05, sixth session):
  # whether BS_AO=512 runs more samples per second is the next run's measurement
  BS_VIRL=${BS_VIRL:-64}; BS_AO=${BS_AO:-128}; BS_VA=${BS_VA:-8}; PROBE_STATES=${PROBE_STATES:-200}
  VECTOR_BENCH_ARGS=${VECTOR_BENCH_ARGS:---sizes 640x360 280x168 --num-envs 256 1024 --steps 4096 --repeats 1}
fi
EXPERT_NOISE=${EXPERT_NOISE:-0.3}
VIRL_NOISE=${VIRL_NOISE:-0}
VIRL_RETRY_NOISE=${VIRL_RETRY_NOISE:-0.3}  # the virl-retry arm's share of turns with a wrong answer first
# DATA_ROUND r: the training cities and benches get seeds 100r+101.. (r=0: 101..108), so a session that
# continues training (INIT=<folder>) sees houses and routes no earlier round saw; never the held-out
# seeds 0 (eval bench), 1 (validation bench), 7 and 8 (eval cities).
SEED0=$((100 + 100 * ${DATA_ROUND:-0}))
PRE_PAIRS=${PRE_PAIRS:-$([ "$SMOKE" = 1 ] && echo 16 || echo 4000)}  # visual pretraining pairs per bench
# DAgger (arm tvr-ao-dagger): DAGGER_AGENT drives DAGGER_EPISODES episodes per bench (greedy, as eval; the
# expert steps a DAGGER_BETA share of turns instead) and the look-first oracle labels every state it
# reached — the states its own mistakes lead to, which the noisy expert's data never shows (the shipped AO
# model recognises the target but gets lost on the way, docs/training.md). The default agent is the
# shipped action-only model; DAGGER_AGENT=hf:PATH for another (e.g. one unpacked into .init/).
DAGGER_AGENT=${DAGGER_AGENT:-builtin:tvr-ao-sft}
DAGGER_EPISODES=${DAGGER_EPISODES:-$([ "$SMOKE" = 1 ] && echo 2 || echo 300)}
DAGGER_BETA=${DAGGER_BETA:-0.2}
# V-IRL DAgger (arm virl-dagger): VIRL_DAGGER_AGENT drives VIRL_DAGGER_EPISODES episodes per city (greedy;
# the expert answers a DAGGER_BETA share of turns). V-IRL never leaves the route, so the agent's own wrong
# answers become retry samples labelled by the expert: at a destination its error is forward() every time,
# which the noisy expert's uniform draw shows in 7 of 100 such samples (eighth 2026-12-05 session)
VIRL_DAGGER_AGENT=${VIRL_DAGGER_AGENT:-builtin:virl-sft}
VIRL_DAGGER_EPISODES=${VIRL_DAGGER_EPISODES:-$([ "$SMOKE" = 1 ] && echo 2 || echo 200)}
VPRE_PAIRS=${VPRE_PAIRS:-$([ "$SMOKE" = 1 ] && echo 8 || echo 2000)}  # V-IRL destination pairs per city (~1/5)
# Arms: the models trained side by side. The three shipped ones by default; candidate recipes for the TVR
# action-only model can join (ARMS="... tvr-ao-allopt tvr-ao-pre"), and STAGE=eval then picks the one
# shipped as tvr-ao-sft by success on a *validation* bench (seed 1), never on the test bench (seed 0).
ARMS=${ARMS:-virl-sft tvr-ao-sft tvr-va-sft}
arm() {  # name → "recipe batch-size task memory held-out kind...": held-out names the validation data of
         # its image-use curve (val-<held-out>, built by val_data); kinds are the shard prefixes merged into its data
  case $1 in
    virl-sft) echo "virl_small.yaml $BS_VIRL virl - virl virl" ;;
    virl-pre) echo "virl_small.yaml $BS_VIRL virl - virl virl vpre" ;;   # + destination pairs (virl pretrain-data)
    virl-retry) echo "virl_small.yaml $BS_VIRL virl - virl virl virlr vpre" ;;  # virl-pre + the same episodes'
                                                                        # retry turns (VIRL_RETRY_NOISE)
    virl-dagger) echo "virl_small.yaml $BS_VIRL virl - virl virl virlr virld vpre" ;;  # virl-retry + the
                                                                        # agent's own mistakes (VIRL_DAGGER_*)
    tvr-ao-sft) echo "tvr_ao_small.yaml $BS_AO tvr ao ao ao" ;;        # noisy expert, look-first labels
    tvr-va-sft) echo "tvr_va_small.yaml $BS_VA tvr va va va" ;;
    tvr-ao-allopt) echo "tvr_ao_small.yaml $BS_AO tvr ao ao aoall" ;;  # every optimal action as a label
    tvr-ao-pre) echo "tvr_ao_small.yaml $BS_AO tvr ao ao ao pre" ;;    # + visual pretraining pairs mixed in
    tvr-ao-dagger) echo "tvr_ao_small.yaml $BS_AO tvr ao ao ao dag" ;; # + DAgger: DAGGER_AGENT's own states
    tvr-ao-h0) echo "tvr_ao_small.yaml $BS_AO tvr ao aoh0 aoh0" ;;       # no action history, every optimal label
    tvr-ao-joined) echo "tvr_ao_small.yaml $BS_AO tvr ao aoj aoj" ;;    # tvr-ao-sft's data with the current and
                     # target frame as one side-by-side image (frames=joined; docs/training.md "One image or two?")
    tvr-ao-joined-dagger) echo "tvr_ao_small.yaml $BS_AO tvr ao aoj aoj dagj" ;;  # + DAgger in the joined
                     # layout: DAGGER_AGENT (the shipped AO model reads joined frames since 2026-12-07) rolled in
    tvr-va-joined) echo "tvr_va_small.yaml $BS_VA tvr va vaj vaj" ;;  # tvr-va-sft's data, one joined image per
                     # turn; with INIT=shipped it starts from the joined AO model (init_source)
    *) echo "unknown arm $1 (virl-sft virl-pre virl-retry virl-dagger tvr-ao-sft tvr-va-sft tvr-ao-allopt tvr-ao-pre tvr-ao-dagger tvr-ao-h0 tvr-ao-joined tvr-ao-joined-dagger tvr-va-joined)" >&2; return 1 ;;
  esac
}
for a in $ARMS; do arm "$a" > /dev/null || exit 2; done
needs() {  # kind: does any arm train on shards of that kind?
  local a k
  for a in $ARMS; do for k in $(arm "$a" | cut -d' ' -f6-); do [ "$k" = "$1" ] && return 0; done; done
  return 1
}
VIRL_KINDS="virl virlr virld vpre"  # the shard kinds a city gives (virl_shard); the others come from a bench
TVR_KINDS="ao va aoall pre dag aoh0 aoj dagj vaj"  # (tvr_shard)
needs_any() {  # kind...: does any arm train on shards of one of them?
  local k
  for k in "$@"; do needs "$k" && return 0; done
  return 1
}
N_ARMS=$(wc -w <<< "$ARMS")
[ "$SMOKE" = 1 ] || TRAIN_EXTRA=(--data.num_workers=$(( 15 / N_ARMS > 0 ? 15 / N_ARMS : 1 )) --logging.every=50)
# Each arm's frames sit on the GPU by default (the tensor engine's fastest path): 10-18 GiB of uint8 per
# TVR action-only arm, on top of ~8 GiB of activations; five arms ran out of an H100's 80 GiB on
# 2026-12-05. So when the GPU has less than IMAGES_GIB_PER_ARM (30) GiB per arm, the frames stay on the
# host, memory-mapped (one page cache for all arms) and copied per batch (data.images_on_device=false).
# ACCUM: forward passes per update (the batch sizes above are per update; default 1).
ACCUM=${ACCUM:-1}
if [ "$SMOKE" != 1 ] && mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1) \
    && [ $(( ${mib:-0} / 1024 / N_ARMS )) -lt "${IMAGES_GIB_PER_ARM:-30}" ]; then
  TRAIN_EXTRA+=(--data.images_on_device=false)
fi
# COMPILE_MODEL=1: every arm's repeated blocks compiled (model.compile: regional torch.compile, fused
# elementwise work around the matmuls; a tiny model at batch 512 moves more activation bytes than it does
# FLOPs). Off until measured: the first command measures it on the idle GPU (SFT_COMPILE_BENCH, below).
[ "${COMPILE_MODEL:-0}" = 1 ] && TRAIN_EXTRA+=(--model.compile=true)
# TRAIN_ARGS: more recipe overrides for every arm, e.g. "--optim.lr=2e-4 --optim.warmup_ratio=0.02" for a
# continuation (INIT=shipped): the recipes' 5e-4 is a from-scratch rate, and the V-IRL DAgger rounds that
# worked on the CPU continued at 2e-4 (docs/training.md)
read -ra _train_args <<< "${TRAIN_ARGS:-}"; TRAIN_EXTRA+=("${_train_args[@]}")
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}  # less fragmentation
stamp "stage=$STAGE smoke=$SMOKE work=$WORK"
machine_line >> "$OUT/timeline.txt" 2>&1
# The prelude must have run in this shell. `source scripts/gpu/prelude.sh && (x) & train_builtin.sh` is a
# trap: `&` backgrounds the whole `prelude && (x)` list, so this script starts with no PYTHONPATH and fails
# on "No module named 'spatialrl'" (what stopped the twentieth and twenty-first sessions' first commands).
# Write `source scripts/gpu/prelude.sh; (x) & ...` instead.
if ! "$PY" -c "import spatialrl, moderngl" 2>/dev/null; then
  stamp "FAILED: $PY cannot import spatialrl and moderngl (PYTHONPATH=${PYTHONPATH:-<empty>}): source scripts/gpu/prelude.sh in this shell first, and not inside a list that ends in '&'"
  exit 1
fi
if [ "$STAGE" != resume ] && [ "$STAGE" != fit ]; then  # EGL renders, batch frames == single ones (seconds)
  timeout 120 "$PY" "$ROOT/scripts/gpu/render_check.py" >> "$OUT/timeline.txt" 2>&1 \
    || { stamp "FAILED: render check (EGL, scripts/gpu/render_check.py): stopping before the data stage"; exit 1; }
fi

# ------------------------------------------------------------------------------------------- train
settle() {  # kind k: that shard's data command has ended (written or failed): what a pipelined arm waits for
  touch "$WORK/data/.settled-$1-$2"
  data_time "settled $1-$2"
}
data_time() {  # when each piece of the data stage was done (logs/data-times.txt): where its minutes go
  echo "[$(elapsed)s] $*" >> "$LOGS/data-times.txt"
}
shards_settled() {  # arm: have all shards of all its kinds settled?
  local kind n
  for kind in $(arm "$1" | cut -d' ' -f6-); do
    case " $VIRL_KINDS " in *" $kind "*) n=$NCITY ;; *) n=$NBENCH ;; esac
    [ "$(find "$WORK/data" -maxdepth 1 -name ".settled-$kind-*" | wc -l)" -ge "$n" ] || return 1
  done
}
built() {  # kind k: that shard was written by an earlier command of this session (meta.json is written last)
  [ -f "$WORK/data/$1-$2/meta.json" ]
}
virl_shard() {  # k: a metro city of seed 100+k and its expert episodes (a command cut mid-way is sent again:
                # the city and the shards it finished are kept)
  local k=$1 city=$WORK/data/city-$((SEED0 + k)) iit=true
  # the last VIRL_NOTEXT cities' episodes use the vision-required prompt (intersection_in_text=false: the
  # text no longer says where the intersections are, docs/virl.md). The shipped model fell from 19/48 to
  # 2/48 on the validation city under that prompt (2026-12-05), so it could not start the findings'
  # vision-required comparison; the first shard keeps the reference prompt, whose options the merged data
  # (and so the model's recorded eval settings) take
  [ "$k" -gt $(( NCITY - ${VIRL_NOTEXT:-0} )) ] && [ "$k" -gt 1 ] && iit=false
  [ -f "$city/route_infos.json" ] || make_city metro "$CITY_ROUTES" $((SEED0 + k)) "$city" > "$LOGS/city-$k.log" 2>&1 \
    || { stamp "FAILED: city $k"; for x in $VIRL_KINDS; do settle $x "$k"; done; return; }
  data_time "city-$k ready"
  local episodes=(--task virl --data "$city" --split in-dist --set episodes="$VIRL_EPISODES" --set seed=$((10 * SEED0 + k))
                  --set grid_size=$GRID --set intersection_in_text=$iit --seed $((10 * SEED0 + k)) --overwrite --batch-size 32)
  if needs virl; then built virl "$k" || spatialrl data sft "${episodes[@]}" --expert-noise "$VIRL_NOISE" --out "$WORK/data/virl-$k" \
      > "$LOGS/data-virl-$k.log" 2>&1 || stamp "FAILED: virl data $k"; settle virl "$k"; fi &
  # the same episodes with retry turns (a noisy expert's wrong answer, the verifier's message, the right
  # answer as label): every first mistake of the shipped model ends its episode (retry accuracy 0/28 on the
  # validation city, 2026-12-05, seventh session)
  if needs virlr; then built virlr "$k" || spatialrl data sft "${episodes[@]}" --expert-noise "$VIRL_RETRY_NOISE" --out "$WORK/data/virlr-$k" \
      > "$LOGS/data-virlr-$k.log" 2>&1 || stamp "FAILED: virlr data $k"; settle virlr "$k"; fi &
  # the agent's own mistakes as retry samples (DAgger roll-in; fewer episodes: each costs its generation)
  if needs virld; then spatialrl data sft "${episodes[@]}" --roll-in "$VIRL_DAGGER_AGENT" --roll-in-beta "$DAGGER_BETA" \
      --episodes "$VIRL_DAGGER_EPISODES" --out "$WORK/data/virld-$k" > "$LOGS/data-virld-$k.log" 2>&1 \
      || stamp "FAILED: virld data $k"; settle virld "$k"; fi &
  # simulator-labelled destination questions on the same city (have I reached X? which view shows X?):
  # the stop at the destination is the decision the street view alone can make (docs/virl.md). Beside the
  # episodes, not after them: it needs only the city (sequential, it ended the 448-px data stage past 550 s)
  if needs vpre; then built vpre "$k" || spatialrl virl pretrain-data --data "$city" --pairs "$VPRE_PAIRS" --seed $((10 * SEED0 + k)) \
      --set grid_size=$GRID --out "$WORK/data/vpre-$k" --overwrite > "$LOGS/data-vpre-$k.log" 2>&1 \
      || stamp "FAILED: vpre data $k"; settle vpre "$k"; fi &
  wait
}
tvr_shard() {  # k: a bench of seed 100+k (sft split only), its AO (noisy expert) and VA data
  local k=$1 bench=$WORK/data/bench-$((SEED0 + k))
  [ -f "$bench/bench.json" ] || spatialrl tvr make-bench --out "$bench" --seed $((SEED0 + k)) --overwrite \
      --sizes "eval=0,sft=$TVR_SFT,rl=0,diag_rotate=0,diag_move=0" --scenes "sft=$TVR_SCENES,eval=0,rl=0" \
      > "$LOGS/bench-$k.log" 2>&1 || { stamp "FAILED: bench $k"; for x in $TVR_KINDS; do settle $x "$k"; done; return; }
  data_time "bench-$k ready"
  local common=(--task tvr --data "$bench" --split sft --set width=$W --set height=$H --batch-size 32 --overwrite)
  local noisy=("${common[@]}" --set memory=ao --expert-noise "$EXPERT_NOISE" --samples step)
  if needs aoall; then spatialrl data sft "${noisy[@]}" --labels all_optimal --out "$WORK/data/aoall-$k" \
      > "$LOGS/data-aoall-$k.log" 2>&1 || stamp "FAILED: aoall data $k"; settle aoall "$k"; fi &
  if needs pre; then spatialrl tvr pretrain-data --data "$bench" --split sft --pairs "$PRE_PAIRS" --seed $((SEED0 + k)) \
      --set width=$W --set height=$H --out "$WORK/data/pre-$k" --overwrite > "$LOGS/data-pre-$k.log" 2>&1 \
      || stamp "FAILED: pre data $k"; settle pre "$k"; fi &
  if needs dag; then spatialrl data sft "${common[@]}" --set memory=ao --samples step --roll-in "$DAGGER_AGENT" \
      --roll-in-beta "$DAGGER_BETA" --episodes "$DAGGER_EPISODES" --seed $((SEED0 + k)) --keep-failed \
      --out "$WORK/data/dag-$k" > "$LOGS/data-dag-$k.log" 2>&1 || stamp "FAILED: dag data $k"; settle dag "$k"; fi &
  if needs dagj; then spatialrl data sft "${common[@]}" --set memory=ao --set frames=joined --samples step \
      --roll-in "$DAGGER_AGENT" --roll-in-beta "$DAGGER_BETA" --episodes "$DAGGER_EPISODES" --seed $((SEED0 + k)) \
      --keep-failed --out "$WORK/data/dagj-$k" > "$LOGS/data-dagj-$k.log" 2>&1 || stamp "FAILED: dagj data $k"
    settle dagj "$k"; fi &
  # memoryless prompts (history_len=0, recorded in the model's eval settings): with the last actions in the
  # prompt the AO models repeated their previous action 61-63% of the time where the oracle would 14-16%
  # (the copycat shortcut); without them only the frames tell the states apart
  if needs aoh0; then spatialrl data sft "${noisy[@]}" --set history_len=0 --labels all_optimal --out "$WORK/data/aoh0-$k" \
      > "$LOGS/data-aoh0-$k.log" 2>&1 || stamp "FAILED: aoh0 data $k"; settle aoh0 "$k"; fi &
  if needs aoj; then spatialrl data sft "${noisy[@]}" --set frames=joined --out "$WORK/data/aoj-$k" \
      > "$LOGS/data-aoj-$k.log" 2>&1 || stamp "FAILED: aoj data $k"; settle aoj "$k"; fi &
  if needs ao; then spatialrl data sft "${noisy[@]}" --out "$WORK/data/ao-$k" > "$LOGS/data-ao-$k.log" 2>&1 \
      || stamp "FAILED: ao data $k"; settle ao "$k"; fi
  if needs va; then spatialrl data sft "${common[@]}" --set memory=va --out "$WORK/data/va-$k" \
      > "$LOGS/data-va-$k.log" 2>&1 || stamp "FAILED: va data $k"; settle va "$k"; fi &
  if needs vaj; then spatialrl data sft "${common[@]}" --set memory=va --set frames=joined --out "$WORK/data/vaj-$k" \
      > "$LOGS/data-vaj-$k.log" 2>&1 || stamp "FAILED: vaj data $k"; settle vaj "$k"; fi &
  wait
}
val_data() {  # held-out SFT data for the trainers' image-use curve (heldout/loss, heldout/image_swap_gap
               # every VAL_EVERY updates): the validation bench (seed 1, its own houses) and a validation
               # city (seed 9); never the test data (bench seed 0, cities 7 and 8)
  local bench=$WORK/data/bench-val city=$WORK/data/city-val
  if needs_any $TVR_KINDS; then
    [ -f "$bench/bench.json" ] || spatialrl tvr make-bench --out "$bench" --seed 1 --overwrite \
        --sizes "eval=$VAL_TVR,sft=0,rl=0,diag_rotate=0,diag_move=0" > "$LOGS/bench-val.log" 2>&1 \
        || { stamp "FAILED: validation bench"; return; }
    local common=(--task tvr --data "$bench" --split eval --set width=$W --set height=$H --batch-size 32 --overwrite)
    if needs ao || needs aoall || needs pre; then spatialrl data sft "${common[@]}" --set memory=ao \
        --expert-noise "$EXPERT_NOISE" --samples step --out "$WORK/data/val-ao" > "$LOGS/data-val-ao.log" 2>&1 \
        || stamp "FAILED: val-ao data"; fi &
    if needs aoh0; then spatialrl data sft "${common[@]}" --set memory=ao --set history_len=0 \
        --expert-noise "$EXPERT_NOISE" --samples step --out "$WORK/data/val-aoh0" > "$LOGS/data-val-aoh0.log" 2>&1 \
        || stamp "FAILED: val-aoh0 data"; fi &
    if needs aoj; then spatialrl data sft "${common[@]}" --set memory=ao --set frames=joined \
        --expert-noise "$EXPERT_NOISE" --samples step --out "$WORK/data/val-aoj" > "$LOGS/data-val-aoj.log" 2>&1 \
        || stamp "FAILED: val-aoj data"; fi &
    if needs va; then spatialrl data sft "${common[@]}" --set memory=va --out "$WORK/data/val-va" \
        > "$LOGS/data-val-va.log" 2>&1 || stamp "FAILED: val-va data"; fi &
    if needs vaj; then spatialrl data sft "${common[@]}" --set memory=va --set frames=joined --out "$WORK/data/val-vaj" \
        > "$LOGS/data-val-vaj.log" 2>&1 || stamp "FAILED: val-vaj data"; fi &
  fi
  if needs virl || needs virlr || needs virld; then
    { [ -f "$city/route_infos.json" ] || make_city metro "$VAL_ROUTES" 9 "$city" > "$LOGS/city-val.log" 2>&1; } \
      && spatialrl data sft --task virl --data "$city" --split in-dist --set episodes="$VAL_ROUTES" --set seed=9 \
        --set grid_size=$GRID --out "$WORK/data/val-virl" --overwrite --batch-size 32 > "$LOGS/data-val-virl.log" 2>&1 \
      || stamp "FAILED: val-virl data"
  fi
  wait
}
merge() {  # arm: the first SHARDS shards of each of its kinds, merged into its dataset
  local name=$1 prefix shards=()
  for prefix in $(arm "$name" | cut -d' ' -f6-); do
    for k in $(seq 1 "${SHARDS:-100}"); do [ -f "$WORK/data/$prefix-$k/meta.json" ] && shards+=("$WORK/data/$prefix-$k"); done
  done
  # (COLUMNS: rich would wrap a long output path onto a line of its own, and the stamp reads the last line)
  COLUMNS=400 spatialrl data merge "${shards[@]}" --out "$WORK/data/$name" --overwrite > "$LOGS/merge-$name.log" 2>&1 \
    && stamp "data $name: $(tail -n 1 "$LOGS/merge-$name.log")" || stamp "FAILED: merge $name"
}
init_args() {  # name → MODEL_ARGS: where the arm starts (init_source) and, for V-IRL arms with VIRL_GRID set,
               # the processor's pixel bound raised to the grid (model.max_pixels, shipped with the model): the
               # small preset's bound is 224*224, so a 448-px grid would otherwise reach the model resized to 224;
               # a joined TVR arm's bound is its two frames side by side (2*W*H: 94080 at 280x168, 120 tokens)
  init_source "$1"
  case $1 in virl-*) [ -n "${VIRL_GRID:-}" ] && MODEL_ARGS+=(--model.max_pixels=$(( VIRL_GRID * VIRL_GRID ))) ;; esac
  [ "$(frames_of "$1")" = joined ] && MODEL_ARGS+=(--model.max_pixels=$(( 2 * W * H )))
  return 0
}
frames_of() {  # arm → its TVR frame layout: joined when its held-out data is a joined kind (aoj, vaj), else separate
  case $(arm "$1" | cut -d' ' -f5) in aoj|vaj) echo joined ;; *) echo separate ;; esac
}
init_source() {  # name → MODEL_ARGS. INIT=scratch (default): the recipe's preset. INIT=shipped: the shipped
               # model of its kind (src/spatialrl/models/weights/<name>; candidate AO arms start from
               # tvr-ao-sft, V-IRL ones from virl-sft). INIT=<folder>: <folder>/<name>/ where present (else from scratch) — to continue
               # training across sessions, unpack the weights a session returned there (scripts/gpu/
               # keep_weights.sh: into .init/, git-ignored) and carry it: carry [".whl", ".gl", ".init"].
               # INIT_MAP="arm=other ...": arm starts from other's weights instead (same architecture), e.g.
               # tvr-va-sft=tvr-ao-sft: the VA model from the AO model that has begun to use its images;
               # arm=builtin:NAME: a shipped model (e.g. V-IRL arms beside INIT=.init TVR arms).
  MODEL_ARGS=()
  local from=$1 pair
  for pair in ${INIT_MAP:-}; do [ "${pair%%=*}" = "$1" ] && from=${pair#*=}; done
  case $from in builtin:*)  # INIT_MAP="virl-pre=builtin:virl-sft": that shipped model, whatever INIT says
    MODEL_ARGS=(--model.path="$from" "--model.preset_overrides={}"); return 0 ;; esac
  case "${INIT:-scratch}" in
    scratch) return 0 ;;
    shipped) case $from in  # both shipped TVR models read joined frames (2026-12-07): the two-image
               # arms (tvr-ao-pre, tvr-va-sft, ...) cannot continue them (layout_matches stops them)
               tvr-ao-*) from=tvr-ao-sft ;; tvr-va-*) from=tvr-va-sft ;; virl-*) from=virl-sft ;; esac
             MODEL_ARGS=(--model.path=builtin:"$from" "--model.preset_overrides={}") ;;
    *) local dir; dir=$(cd "$ROOT" && realpath -m "$INIT")/$from
       [ -f "$dir/config.json" ] && MODEL_ARGS=(--model.path="$dir" "--model.preset_overrides={}") ;;
  esac
  return 0
}
compile_arm() {  # name: its dataset compiled for the tensor engine now, as the trainer would on its start
                 # (a compile cut by the command's end is lost and redone; 124-186 s per arm on 2026-12-05)
  local name=$1 recipe MODEL_ARGS; recipe=$(arm "$name" | cut -d' ' -f1); init_args "$name"
  if "$PY" "$ROOT/scripts/gpu/compile_data.py" "$ROOT/configs/sft/$recipe" "$WORK/data/$name" \
      --workers $(( 15 / N_ARMS > 0 ? 15 / N_ARMS : 1 )) "${TRAIN_EXTRA[@]}" "${MODEL_ARGS[@]}" \
      > "$LOGS/compile-$name.log" 2>&1; then
    stamp "$(tail -n 1 "$LOGS/compile-$name.log"); disk used / free: $(df -h --output=used,avail "$WORK" | tail -n 1)"
  else stamp "FAILED: compile $name (logs/compile-$name.log); the trainer will compile on its start"
  fi
}
layout_matches() {  # arm init: a TVR arm continues a model trained on its own frame layout (two images or
                    # one joined image, the model folder's eval.options.frames), else its frames would be new to it
  case $1 in tvr-*) ;; *) return 0 ;; esac
  [ "$2" = scratch ] && return 0
  local want got; want=$(frames_of "$1")
  got=$(model_frames "$2") || { echo "arm $1: could not read the settings of $2" >&2; return 1; }
  [ "$got" = "$want" ] || { echo "arm $1 trains on frames=$want, its init $2 was trained on frames=$got" >&2; return 1; }
}
train() {  # name recipe batch-size: trains until TRAIN_END_S of this command, then SIGTERM pauses the run
           # with a checkpoint (train/run.py) that RESUME=1 continues. The trainer's own time budget is
           # TOTAL_MIN minutes across commands when set, else what this command leaves (at most BUDGET_MIN;
           # COMPILE_S is kept for the tensor compile, which runs before the training clock).
  local name=$1 recipe=$2 bs=$3 budget stop resume=never rc MODEL_ARGS
  init_args "$name"; local from=scratch a
  for a in "${MODEL_ARGS[@]}"; do [[ $a == --model.path=* ]] && from=$a; done
  local why
  if ! why=$(layout_matches "$name" "${from#--model.path=}" 2>&1); then
    stamp "FAILED: train $name: ${why##*$'\n'} (the shipped TVR models read joined frames since 2026-12-07: continue them with a joined arm, or set INIT_MAP)"
    return
  fi
  if [ -n "${TOTAL_MIN:-}" ]; then budget=$TOTAL_MIN
  else budget=$("$PY" -c "print(round(max(0.2, min($BUDGET_MIN, ($TRAIN_END_S - $(elapsed) - ${COMPILE_S:-90}) / 60)), 2))")
  fi
  [ "${RESUME:-0}" = 1 ] && resume=auto
  stop=$(( TRAIN_END_S - $(elapsed) ))
  if [ "$stop" -lt "${MIN_TRAIN_S:-180}" ]; then  # too little left: a start would outlive the command's
    # timeout, which kills this script but not its trainers (they would still run into the next command),
    # or be stopped in its setup, before it can pause with a checkpoint: with 12 benches the AO and VA
    # trainers were still loading their data 60 and 84 s after their start (2026-12-06, H100, beside the
    # data stage) and ended with nothing; on a quiet machine setup took ~60 s
    stamp "train $name: not started, ${stop}s left before TRAIN_END_S (MIN_TRAIN_S ${MIN_TRAIN_S:-180}); the next command starts it"
    pack_weights "$name"  # what an earlier command trained, if any
    return
  fi
  stamp "train $name: $budget min budget in all, this command stops it within ${stop}s (resume=$resume, init=${from#--model.path=}, accum=$ACCUM, frames on $([[ " ${TRAIN_EXTRA[*]} " == *images_on_device=false* ]] && echo host || echo device))"
  local sft=("${SRL[@]}" train sft "$ROOT/configs/sft/$recipe" --output_dir="$WORK/runs/$name" --data.train="$WORK/data/$name"
             --data.engine=tensor --per_device_batch_size=$(( bs / ACCUM )) --grad_accum="$ACCUM" --eval.task=null
             "${TRAIN_EXTRA[@]}" "${MODEL_ARGS[@]}")
  # the arm's held-out data (val-virl, val-ao, val-va, val-aoh0: the memoryless arm's prompts have no history)
  local memory heldout val; read -r _ _ _ memory heldout _ <<< "$(arm "$name")"
  val=$WORK/data/val-$heldout
  # the image-use curve on held-out data, VAL_SAMPLES per evaluation (VA samples are whole trajectories:
  # fewer, VAL_SAMPLES_VA)
  [ -f "$val/meta.json" ] && sft+=(--data.eval="$val" --eval_loss_every="$VAL_EVERY"
                                   --data.eval_samples=$([ "$memory" = va ] && echo "$VAL_SAMPLES_VA" || echo "$VAL_SAMPLES"))
  # the log is appended across commands: only this command's part of it tells how this run stopped (a
  # pause line of an earlier command once stamped "paused" for a run killed before its checkpoint)
  local from_byte; from_byte=$(( $(stat -c %s "$LOGS/train-$name.log" 2>/dev/null || echo 0) + 1 ))
  timeout --signal=TERM --kill-after=60 "$stop" "${sft[@]}" --checkpoint.resume=$resume --time_budget_minutes="$budget" \
      >> "$LOGS/train-$name.log" 2>&1
  rc=$?
  local last; last=$(grep -o 'train/loss=[0-9.]*' "$LOGS/train-$name.log" | tail -n 1)
  if [ "$rc" = 0 ] && [ -d "$WORK/runs/$name/final" ]; then stamp "trained $name: $last"
  elif [ "$rc" = 124 ] && tail -c "+$from_byte" "$LOGS/train-$name.log" | grep -q "SIGTERM: paused"; then
    stamp "paused $name: $last"
    pack_weights "$name"  # first: ending the run below took 42 s for virl-sft (2026-12-05, fourth session),
    # and a command cut by its timeout then returned no weights for it
    if [ "${RESUME:-0}" = 1 ] && [ "${FINAL:-1}" = 1 ]; then  # the last planned command (FINAL=0: a middle
      # one, the run stays paused for the next): end the run at its checkpoint (a budget
      # already spent leaves the loop before any update, and the run ends as finished: final model)
      "${sft[@]}" --checkpoint.resume=auto --time_budget_minutes=0.001 >> "$LOGS/train-$name.log" 2>&1 \
        && [ -d "$WORK/runs/$name/final" ] && stamp "ended $name at its checkpoint (budget not reached)" \
        && pack_weights "$name" || stamp "FAILED: ending $name at its checkpoint (logs/train-$name.log)"
    fi
    return 0
  else stamp "FAILED: training $name, exit $rc (logs/train-$name.log)"
  fi
  pack_weights "$name"  # finished: its final model; failed: its last checkpoint's (NaN runs stop there)
}
pack_weights() {  # name → OUT/<name>.tar.gz: the final model, else the last checkpoint's model in bf16 (a
                  # paused run), so a command returns usable weights even if the machine is gone after it
  local name=$1
  rm -rf "$WORK/weights/$name"
  if [ -d "$WORK/runs/$name/final" ]; then
    cp -r "$WORK/runs/$name/final" "$WORK/weights/$name"
  elif [ -d "$WORK/runs/$name/checkpoints" ]; then
    "$PY" "$ROOT/scripts/gpu/snapshot_weights.py" "$WORK/runs/$name" "$WORK/weights/$name" >> "$OUT/timeline.txt" 2>&1 \
      || { stamp "FAILED: snapshot of $name"; return 0; }
  else
    return 0
  fi
  cp "$WORK/runs/$name/metrics.jsonl" "$WORK/runs/$name/summary.json" "$WORK/weights/$name/" 2>/dev/null
  tar -czf "$OUT/$name.tar.gz.part" -C "$WORK/weights" "$name" && mv "$OUT/$name.tar.gz.part" "$OUT/$name.tar.gz"
  stamp "weights $name: $(du -h "$OUT/$name.tar.gz" | cut -f1)"
}
stage_data() {
  # (off by default since the second run: seed 0 gave 0.53 / 0.70 at updates 100 / 200 both times)
  if [ "$SMOKE" != 1 ] && [ "${LEARN_DURING_DATA:-0}" = 1 ]; then
    # the GPU idles while the CPU builds data: measure meanwhile whether the shipped TVR architecture learns
    # to compare two frames (benchmarks/vision_learnability.py; the curve is in logs/, a finished task's
    # JSON in WORK/eval). Detached (not waited for), stopped by its own timeout.
    ( cd "$ROOT/benchmarks" && timeout "${LEARN_DURING_DATA_S:-330}" "$PY" -u vision_learnability.py \
        --config "$ROOT/configs/sft/tvr_ao_small.yaml" --size "${W}x$H" --device cuda --tasks same_pattern \
        --steps 3000 --eval-every 100 --batch-size 64 --tag shipped-size-b64 --out "$WORK/eval" \
        > "$LOGS/vision_learnability-during-data.log" 2>&1 & )
  fi
  if [ "$SMOKE" != 1 ] && [ "${VECTOR_WORKERS_BENCH:-0}" = 1 ]; then
    # issue 21 while the host is still quiet (~1 minute, before the data stage takes the 16 cores): N = 1,024
    # envs at 640x360 in one process and over k worker processes on the one GPU (ShardedVectorEnv), since one
    # host core bounds one process (3,593 steps/s with pbo_rgb on the H100, 2026-12-05). Off by default since
    # 2026-12-06: measured three times (docs/rendering.md), and it blocks the data stage's start for ~52 s
    ( cd "$ROOT/benchmarks" && timeout "${VECTOR_WORKERS_BENCH_S:-100}" "$PY" -u tvr_vector_speed.py --sizes 640x360 \
        --num-envs 1024 --steps 8192 --repeats 1 --readback pbo_rgb --env-workers 1 2 4 8 --tag workers --out "$LOGS" \
        > "$LOGS/tvr_vector_speed-workers.log" 2>&1 ) || stamp "FAILED or cut: vector env workers rows (logs/tvr_vector_speed-workers.log)"
    stamp "vector env workers rows: $(grep -c "vector N=1024" "$LOGS/tvr_vector_speed-workers.log") of 4 (logs/tvr_vector_speed-workers.log)"
  fi
  if [ "$SMOKE" != 1 ] && [ "${PROFILE_DURING_DATA:-0}" = 1 ]; then
    # issue 21 on the idle GPU (~1-2 of 16 cores; off by default since 2026-12-06, measured twice): where a
    # TVRVectorEnv step's host time goes at 640x360,
    # N = 1,024 (cProfile: logs/tvr_vector_profile-gpu-data-stage.txt) and the rows beside it
    ( cd "$ROOT/benchmarks" && timeout "${PROFILE_DURING_DATA_S:-300}" "$PY" -u tvr_vector_speed.py --sizes 640x360 \
        --num-envs 1024 --steps 4096 --repeats 1 --readback pbo_rgb --profile 1024 --tag data-stage --out "$LOGS" \
        > "$LOGS/tvr_vector_speed-during-data.log" 2>&1 & )
  fi
  if [ "$SMOKE" != 1 ] && [ "${SFT_COMPILE_BENCH:-1}" = 1 ] && needs ao; then
    # issue 19 on the idle GPU: the action-only arm's training step at its batch, eager vs with the model's
    # blocks compiled (benchmarks/sft_speed.py --compile; COMPILE_MODEL=1 turns it on for the trainers), on the
    # validation AO data as soon as val_data has built it (~2,000 samples; the compile's seconds are reported)
    ( until [ -f "$WORK/data/val-ao/meta.json" ] || [ "$(elapsed)" -gt 400 ]; do sleep 5; done
      cd "$ROOT/benchmarks" && timeout "${SFT_COMPILE_BENCH_S:-300}" "$PY" -u sft_speed.py --data "$WORK/data/val-ao" \
        --batch-size "$BS_AO" --steps 20 --skip-collator --compile --workers 2 --tag gpu-compile --results-dir "$LOGS" \
        > "$LOGS/sft_speed-compile.log" 2>&1 && stamp "sft_speed compile rows: $(grep -E '^tensor' "$LOGS/sft_speed-compile.log" | tr -s ' ' | paste -sd ';')" \
        || stamp "FAILED or cut: sft_speed compile rows (logs/sft_speed-compile.log)" ) &
  fi
  val_data &
  # only the shards some arm trains on: a V-IRL-only run built eight TVR benches beside its cities on
  # 2026-12-06 (sixteenth session), cores its 448-px data stage needed
  if needs_any $VIRL_KINDS; then
    for k in $(seq 1 "$NCITY"); do virl_shard "$k" & done
  fi
  if needs_any $TVR_KINDS; then
    for k in $(seq 1 "$NBENCH"); do tvr_shard "$k" & done
  fi
  wait
}
eval_data() {  # held-out bench and cities (never used in training)
  local bench=$WORK/data/bench-eval city=$WORK/data/city-eval ood=$WORK/data/city-eval-hillside
  [ -f "$bench/bench.json" ] || spatialrl tvr make-bench --out "$bench" --seed 0 --overwrite \
      --sizes "eval=$EVAL_TVR,sft=0,rl=0,diag_rotate=0,diag_move=0" > "$LOGS/bench-eval.log" 2>&1 &
  [ -f "$city/route_infos.json" ] || make_city metro "$EVAL_ROUTES" 7 "$city" > "$LOGS/city-eval.log" 2>&1 &
  [ -f "$ood/route_infos.json" ] || make_city hillside "$EVAL_ROUTES" 8 "$ood" > "$LOGS/city-ood.log" 2>&1 &
  if validating && [ ! -f "$WORK/data/bench-val/bench.json" ]; then  # the validation bench: seed 1, own scenes
    spatialrl tvr make-bench --out "$WORK/data/bench-val" --seed 1 --overwrite \
      --sizes "eval=$VAL_TVR,sft=0,rl=0,diag_rotate=0,diag_move=0" > "$LOGS/bench-val.log" 2>&1 &
  fi
  wait
  stamp "eval data built"
}
validating() {  # more than one TVR action-only arm: choose among them on the validation bench
  [ "$(for a in $ARMS; do arm "$a"; done | awk '$3 == "tvr" && $4 == "ao"' | wc -l)" -gt 1 ]
}
select_ao() {  # the TVR action-only arm with the best validation success (ties: the first in ARMS)
  "$PY" - "$WORK/eval" $ARMS <<'PY' | tee -a "$OUT/timeline.txt"
import json, sys
from pathlib import Path
root, arms = Path(sys.argv[1]), sys.argv[2:]
scores = {}
for a in arms:
    f = root / f"val-{a}" / "metrics.json"
    if f.is_file():
        m = json.loads(f.read_text())["overall"]
        scores[a] = {"success_rate": m["success_rate"], "spl": m.get("spl"), "episodes": m["n"]}
if scores:
    best = max(scores, key=lambda a: (scores[a]["success_rate"], scores[a]["spl"] or 0.0, -arms.index(a)))
    (root / "selection.json").write_text(json.dumps({"tvr-ao": best, "validation": scores}, indent=2))
    print(f"selection: tvr-ao = {best} by validation success " + ", ".join(
        f"{a} {v['success_rate']:.3f} ({v['episodes']} eps)" for a, v in scores.items()))
PY
}
stage_train() {  # data and fit at once: each arm merges, compiles and starts training as soon as its own
                # shards are in, while the other data is still being built (2026-12-05, fifth session: the
                # data took 530 s of the first command's 590 and the compiles, cut, took ~4 minutes of the
                # second; V-IRL's shards are in at ~220 s, the action-only ones at ~270 s)
  rm -f "$WORK"/data/.settled-*
  stage_data &
  local a
  for a in $ARMS; do
    ( until shards_settled "$a"; do sleep 5; done
      merge "$a"
      # a compile cut by the command's timeout would run on, orphaned, beside the next command's trainer
      if [ $(( TRAIN_END_S - $(elapsed) )) -ge "${MIN_COMPILE_S:-240}" ]; then compile_arm "$a"
      else stamp "compile $a: not started, too close to TRAIN_END_S (the trainer compiles on its start)"; fi
      set -- $(arm "$a"); train "$a" "$1" "$2" ) &
  done
  wait  # (the held-out eval data is built by the next command, STAGE=resume, beside its trainers)
}
stage_fit() {  # merge each arm's shards (not when resuming), train the arms side by side (eval data
              # built meanwhile); each arm packs its weights as it stops
  local a
  if [ "${RESUME:-0}" != 1 ]; then
    for a in $ARMS; do merge "$a" & done; wait
    for a in $ARMS; do compile_arm "$a" & done; wait
  fi
  [ "${NO_EVAL_DATA:-0}" = 1 ] || ( sleep "${EVAL_DATA_DELAY:-150}"; eval_data ) &
  for a in $ARMS; do
    set -- $(arm "$a")
    train "$a" "$1" "$2" &
  done
  wait  # (each arm packs its weights as it stops: pack_weights, in train)
}

# ------------------------------------------------------------------------------------------- eval
evaluate() {  # label agent task, then eval arguments
  local label=$1 agent=$2 task=$3; shift 3
  # EVAL_TIMEOUT caps one evaluation (a killed one keeps its episodes.jsonl; re-running resumes it)
  if timeout "${EVAL_TIMEOUT:-100000}" "${SRL[@]}" eval --task "$task" --agent "$agent" \
      --out "$WORK/eval/$label" --no-report \
      --batch-size 64 --label "$label" "$@" > "$LOGS/eval-$label.log" 2>&1; then
    stamp "eval $label done"
  else
    stamp "FAILED: eval $label (logs/eval-$label.log)"
  fi
}
stage_eval() {
  local bench=$WORK/data/bench-eval city=$WORK/data/city-eval ood=$WORK/data/city-eval-hillside
  eval_data
  local tvr=(--data "$bench" --split eval --set width=$W --set height=$H --max-new-tokens 16)
  # EVAL_VIRL episodes per split (the suite's defaults are the reference's 48 / 48 / 18)
  local virl=(--data "$city" --split all --set visual_data="$ood" --set grid_size=$GRID --set episodes="$EVAL_VIRL"
              --max-new-tokens 96)
  for a in expert random; do
    evaluate "tvr-$a" "$a" tvr "${tvr[@]}" --set memory=va &
    evaluate "virl-$a" "$a" virl "${virl[@]}" &
  done
  local val=(--data "$WORK/data/bench-val" --split eval --set width=$W --set height=$H --max-new-tokens 16)
  local name task memory
  for name in $ARMS; do
    [ -d "$WORK/weights/$name" ] || continue
    read -r _ _ task memory _ <<< "$(arm "$name")"
    if [ "$task" = virl ]; then evaluate "$name" "hf:$WORK/weights/$name" virl "${virl[@]}" &
    else
      evaluate "$name" "hf:$WORK/weights/$name" tvr "${tvr[@]}" --set memory="$memory" &
      if [ "$memory" = ao ] && validating; then
        evaluate "val-$name" "hf:$WORK/weights/$name" tvr "${val[@]}" --set memory=ao &
      fi
    fi
    # image sensitivity on held-out states (eval/image_probe.py; the task comes from the model folder)
    { timeout "${EVAL_TIMEOUT:-100000}" "${SRL[@]}" model probe "hf:$WORK/weights/$name" \
        --data "$([ "$task" = virl ] && echo "$city" || echo "$bench")" --states "$PROBE_STATES" \
        > "$WORK/eval/probe-$name.json" 2> "$LOGS/probe-$name.log" \
        && stamp "probe $name done" || stamp "FAILED: probe $name (logs/probe-$name.log)"; } &
  done
  if [ "${LEARN_BENCH:-1}" = 1 ]; then  # can the shipped architecture learn to compare two frames? (issue 19)
    local learn=(--config "$ROOT/configs/sft/tvr_ao_small.yaml" --size "${W}x$H" --device cuda
                 --tasks second,same_pattern --steps 3000 --eval-every 100)
    [ "$SMOKE" = 1 ] && learn=(--preset tiny --size "${W}x$H" --device cpu --tasks second --steps 20 --eval-every 10)
    # partial results are written after every task, so the timeout keeps what finished
    (cd "$ROOT/benchmarks" && timeout "${LEARN_BENCH_TIMEOUT:-300}" "$PY" vision_learnability.py "${learn[@]}" \
        --tag shipped-size --out "$WORK/eval" > "$LOGS/vision_learnability.log" 2>&1) \
      && stamp "vision_learnability done" || stamp "vision_learnability stopped (logs/vision_learnability.log)" &
  fi
  wait
  validating && select_ao
  if [ "${VECTOR_BENCH:-1}" = 1 ]; then  # issue 21's rows on this machine (single env vs TVRVectorEnv)
    (cd "$ROOT/benchmarks" && timeout "${VECTOR_BENCH_TIMEOUT:-120}" "$PY" tvr_vector_speed.py $VECTOR_BENCH_ARGS \
        --out "$WORK/eval" > "$LOGS/tvr_vector_speed.log" 2>&1) && stamp "tvr_vector_speed done" \
      || stamp "FAILED: tvr_vector_speed (logs/tvr_vector_speed.log)"
  fi
  if [ -f "$WORK/data/virl-1/meta.json" ]; then
    (cd "$ROOT/benchmarks" && "$PY" sft_speed.py --data "$WORK/data/virl-1" --batch-size "$BS_VIRL" \
        --workers 8 --results-dir "$WORK/eval" > "$LOGS/sft_speed.log" 2>&1) \
      || stamp "FAILED: sft_speed"
  fi
  rm -f "$WORK"/eval/*/steps.jsonl
  mkdir -p "$WORK/eval/_logs" && cp "$LOGS"/* "$OUT/timeline.txt" "$WORK/eval/_logs/" 2>/dev/null
  for name in $ARMS; do
    mkdir -p "$WORK/eval/_runs/$name"
    cp "$WORK/runs/$name"/{config.json,metrics.jsonl,summary.json} "$WORK/eval/_runs/$name/" 2>/dev/null
  done
  tar -czf "$OUT/results.tar.gz" -C "$WORK" eval
  stamp "results: $(du -h "$OUT/results.tar.gz" | cut -f1)"
}

case "$STAGE" in
  data) stage_data ;;
  fit) stage_fit ;;
  resume) RESUME=1; stage_fit ;;
  train) stage_train ;;
  eval) stage_eval ;;
  all) stage_data; stage_fit; stage_eval ;;
  *) echo "STAGE must be data, fit, resume, train, eval or all" >&2; exit 2 ;;
esac
stamp "done"
