# two CPU fine-tunes of builtin:virl-sft side by side, one thread each, 93 updates x 16 each (the third
# session's clean arm had 93): expert data of city 202 alone vs the same + destination pairs (mix-202)
cd /work/main && source .venv/bin/activate
S=/work/scratch/s13/virl
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
for arm in expert mix; do
  nice -n 19 spatialrl train sft configs/sft/virl_small.yaml --model.path=builtin:virl-sft '--model.preset_overrides={}' \
    --optim.lr=2e-4 --optim.warmup_ratio=0.02 --time_budget_minutes=0 --max_steps=93 --per_device_batch_size=16 \
    --eval.task=null --data.num_workers=0 --data.train=$S/$arm-202 --output_dir=$S/run2-$arm > $S/train2-$arm.log 2>&1 &
done
wait
date
