"""Run a trainer on the letters task in every process of an ``accelerate launch`` (multi-process test).

    accelerate launch --config_file configs/accelerate/cpu_2proc.yaml tests/rl/launch_letters.py \\
        grpo configs/grpo/tiny_cpu.yaml '{"model.path": "...", "output_dir": "..."}'
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import letters  # noqa: E402  (the test task, registered in this process)

from spatialrl.train.config import load_config  # noqa: E402
from spatialrl.train.rl_config import GRPOConfig, PPOConfig  # noqa: E402


def main() -> None:
    algo, recipe, overrides = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    torch.set_num_threads(1)
    letters.register()
    if algo == "grpo":
        from spatialrl.train.grpo import train

        train(load_config(GRPOConfig, recipe, overrides))
    elif algo == "ppo":
        from spatialrl.train.ppo import train

        train(load_config(PPOConfig, recipe, overrides))
    else:
        raise SystemExit(f"unknown algorithm {algo!r}")


if __name__ == "__main__":
    main()
