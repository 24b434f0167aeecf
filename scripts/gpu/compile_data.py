"""Compile an SFT dataset for the tensor data engine ahead of training, exactly as the trainer would.

The trainer compiles on its first start (``train/sft.py``: ``micro_batch_source``), before its clock. On the
GPU machine that start was inside a command whose time ran out mid-compile (2026-12-05: 124-186 s per arm,
lost, then redone by the next command). Compiling in the data stage makes the folder ready; the trainer
then finds it (``tensors-<key>/`` beside the data) and starts at once.

    python scripts/gpu/compile_data.py RECIPE DATA_DIR [--workers N] [--KEY=VALUE ...]

--KEY=VALUE are the recipe overrides the training command uses (``model.*`` decides the processor, hence the
compiled token ids); the model is built only for its processor and type.
"""

from __future__ import annotations

import argparse
import time

from spatialrl.train.common import load_model_and_processor
from spatialrl.train.config import SFTConfig, load_config, parse_overrides
from spatialrl.train.tensor_data import compile_dataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipe", help="the SFT recipe (YAML) the run will train with")
    ap.add_argument("data", help="the merged dataset folder")
    ap.add_argument("--workers", type=int, default=4, help="compile processes (0 = in this process)")
    args, flags = ap.parse_known_args()  # the rest: the training command's --KEY=VALUE overrides
    cfg = load_config(SFTConfig, args.recipe, {**parse_overrides(flags), "data.train": args.data})
    model, processor, _ = load_model_and_processor(cfg.model, cfg.seed)
    t = time.perf_counter()
    folder = compile_dataset(args.data, processor, model.config.model_type, workers=args.workers, progress=True)
    print(f"compiled {args.data} -> {folder.name} in {time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
