"""``profile_update``: torch.profiler over one RL update's scoring and training passes."""

from __future__ import annotations

import json

import pytest
import torch

from spatialrl.errors import ConfigError
from spatialrl.train.grpo import train as train_grpo
from spatialrl.train.ppo import train as train_ppo
from spatialrl.train.profiling import kind_of, summarise

from .helpers import assert_same_run
from .test_grpo import grpo_config
from .test_ppo import DETERMINISTIC, ppo_config


def test_kernel_names_sort_into_kinds():
    assert kind_of("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "matmul"
    assert kind_of("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNN") == "matmul"
    assert kind_of("aten::mm") == "matmul"
    assert kind_of("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>>") == "attention"
    assert kind_of("aten::_scaled_dot_product_flash_attention_for_cpu_backward") == "attention"
    assert kind_of("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>") \
        == "elementwise"
    assert kind_of("Memcpy HtoD (Pageable -> Device)") == "copy / cast"
    assert kind_of("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>") == "norm"
    assert kind_of("aten::something_new") == "other"


def test_ppo_profiles_one_update_and_trains_the_same(tmp_path, tiny_model_dir, letter_suite):
    over = {"updates": 2, "num_envs": 2, "num_steps": 4, "micro_batch_size": 2, "grad_accum": 2}
    plain = ppo_config(tmp_path / "a", tiny_model_dir, **over)
    train_ppo(plain)
    profiled = ppo_config(tmp_path / "b", tiny_model_dir, profile_update=2, **over)
    train_ppo(profiled)
    run = tmp_path / "b/run"
    assert not (run / "profile-update-1.json").exists()  # only the update asked for
    summary = json.loads((run / "profile-update-2.json").read_text())
    assert summary["update"] == 2 and summary["timed"] == "CPU operators (self time)"
    assert 0 < summary["busy_seconds"] and 0 < summary["wall_seconds"]
    assert summary["by_kind"]["matmul"] > 0 and summary["calls"] > 100
    assert abs(sum(summary["by_kind"].values()) - summary["busy_seconds"]) < 1e-6
    assert summary["host_op_seconds"] > 0
    assert summary["top"] and summary["top"][0]["seconds"] >= summary["top"][-1]["seconds"]
    assert "Self CPU" in (run / "profile-update-2.txt").read_text()  # torch's own table
    # the profiler only watches: the profiled run trains exactly like the plain one
    assert_same_run(tmp_path / "a/run", run, 2, DETERMINISTIC)


def test_grpo_profiles_one_update(tmp_path, tiny_model_dir, letter_suite):
    cfg = grpo_config(tmp_path, tiny_model_dir, updates=1, profile_update=1)
    train_grpo(cfg)
    summary = json.loads((tmp_path / "run/profile-update-1.json").read_text())
    assert summary["by_kind"]["matmul"] > 0


def test_summary_counts_device_kernels_only_on_a_gpu():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(64, 64) @ torch.ones(64, 64)
    on_cpu = summarise(prof.key_averages(), 1.0, on_device=False)
    assert on_cpu["by_kind"].get("matmul", 0) > 0
    on_device = summarise(prof.key_averages(), 1.0, on_device=True)  # no CUDA kernels recorded
    assert on_device["busy_seconds"] == 0 and on_device["top"] == []


def test_profile_update_is_checked(tmp_path, tiny_model_dir, letter_suite):
    with pytest.raises(ConfigError, match="profile_update"):
        ppo_config(tmp_path, tiny_model_dir, profile_update=-1)
