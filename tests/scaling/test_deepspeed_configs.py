"""configs/accelerate/zero2*_Ngpu.yaml through accelerate's DeepSpeed plugin into DeepSpeed's own config
parser (needs the deepspeed package, which is not a dependency: skipped without it; no GPU needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_zero2_configs_parse_in_deepspeed(monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    pytest.importorskip("deepspeed")
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DeepSpeedPlugin
    from deepspeed.runtime.config import DeepSpeedConfig

    files = sorted((ROOT / "configs" / "accelerate").glob("zero2*gpu.yaml"))
    assert len(files) == 8
    for path in files:
        cfg = load_config_from_file(str(path))
        ds = cfg.deepspeed_config
        plugin = DeepSpeedPlugin(zero_stage=ds["zero_stage"], offload_optimizer_device=ds["offload_optimizer_device"],
                                 offload_param_device=ds["offload_param_device"], zero3_init_flag=ds["zero3_init_flag"],
                                 gradient_accumulation_steps=4, gradient_clipping=1.0)
        # what make_accelerator and accelerate's prepare fill in: micro-batch, bf16; train_batch_size is
        # derived (world size 1 outside a launch)
        conf = {k: v for k, v in plugin.deepspeed_config.items() if v != "auto" and k not in ("fp16", "train_batch_size")}
        conf.update(train_micro_batch_size_per_gpu=8, bf16={"enabled": cfg.mixed_precision == "bf16"})
        parsed = DeepSpeedConfig(conf)
        assert parsed.zero_config.stage == 2, path.name
        offload = parsed.zero_config.offload_optimizer
        assert (offload.device if offload else "none") == ("cpu" if "offload" in path.name else "none"), path.name
        assert parsed.bfloat16_config.enabled and parsed.gradient_accumulation_steps == 4
