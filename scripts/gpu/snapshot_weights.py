"""The model of a paused SFT run's newest checkpoint as a shippable folder: bf16 weights (a checkpoint's
``hf/`` is float32, twice what the device tool returns per file), the processor, and the
``spatialrl_model.json`` a finished run would write (eval settings from the run's dataset), marked as a
snapshot with its update count.

    python scripts/gpu/snapshot_weights.py RUN_DIR OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from spatialrl.io import atomic_folder, atomic_write_json
from spatialrl.models.builtin import META_FILE, eval_settings_from_dataset
from spatialrl.train.common import find_resume_checkpoint


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="the run's output_dir")
    ap.add_argument("out", type=Path, help="the model folder to write")
    args = ap.parse_args()
    checkpoint = find_resume_checkpoint(args.run, "auto")
    if checkpoint is None:
        print(f"{args.run}: no complete checkpoint", file=sys.stderr)
        return 1
    config = json.loads((args.run / "config.json").read_text())
    dataset = json.loads((Path(config["data"]["train"]) / "meta.json").read_text())
    step = json.loads((checkpoint / "trainer_state.json").read_text())["step"]
    with atomic_folder(args.out) as tmp:
        for f in (checkpoint / "hf").iterdir():
            if f.suffix == ".safetensors":
                state = load_file(str(f))
                save_file({k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in state.items()},
                          str(tmp / f.name), metadata={"format": "pt"})
            elif f.name != META_FILE:
                shutil.copy2(f, tmp / f.name)
        hf_config = tmp / "config.json"
        cfg = json.loads(hf_config.read_text())
        cfg["torch_dtype"] = cfg["dtype"] = "bfloat16"
        hf_config.write_text(json.dumps(cfg, indent=2))
        atomic_write_json(tmp / META_FILE, {
            "trained_by": "spatialrl train sft", "snapshot_of": str(checkpoint), "updates": step,
            "recipe": config, "dataset": dataset,
            "eval": eval_settings_from_dataset(dataset.get("task"), dataset.get("options") or {},
                                               config.get("eval", {}).get("max_new_tokens", 64))})
    print(f"snapshot {args.out}: update {step} of {args.run} in bf16", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
