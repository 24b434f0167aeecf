"""Real task data for the SFT tests, built once per session and small enough for CPU.

Each fixture is a dataset written by the real builder (expert through the runner and the task's own
prompter): TVR with visual-action and action-only memory (plus CoT), V-IRL on a hand-made city,
GeneralPoints in L and VL mode. Images are kept small (TVR 112x64, V-IRL grid 112, GP 112).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spatialrl.envs.registry import get_suite
from spatialrl.train.cot import thought_function
from spatialrl.train.data import build_sft_dataset

TVR_SMALL = {"eval": 4, "sft": 4, "rl": 0, "diag_rotate": 0, "diag_move": 0}
TVR_SCENES = {"sft": 1, "eval": 1, "rl": 0}


@pytest.fixture(scope="session")
def tvr_bench(tmp_path_factory) -> Path:
    from spatialrl.envs.tvr.bench import BenchConfig, make_bench

    out = tmp_path_factory.mktemp("tvr") / "bench"
    make_bench(out, BenchConfig.preset(seed=11, sizes=TVR_SMALL, scenes=TVR_SCENES), progress=False)
    return out


def tvr_options(bench: Path, **extra) -> dict:
    suite = get_suite("tvr")
    return {**suite.default_options, "data": str(bench), "split": "sft", "width": 112, "height": 64,
            "cache_mb": 16, **extra}


@pytest.fixture(scope="session")
def virl_city(tmp_path_factory) -> Path:
    from spatialrl.envs.virl.testdata import random_routes, write_dataset

    return write_dataset(tmp_path_factory.mktemp("virl") / "city", random_routes(6, seed=3), seed=1)


def virl_options(city: Path, **extra) -> dict:
    suite = get_suite("virl")
    return {**suite.default_options, "data": str(city), "split": "in-dist", "grid_size": 112, "episodes": 3,
            "seed": 5, **extra}


def gp_options(**extra) -> dict:
    suite = get_suite("gp")
    return {**suite.default_options, "split": "in-dist", "episodes": 4, "resolution": 112, **extra}


def _build(tmp_path_factory, name: str, task: str, options: dict, cot: bool = False) -> Path:
    out = tmp_path_factory.mktemp("sft") / name
    build_sft_dataset(get_suite(task), options, out, thought_fn=thought_function(task) if cot else None,
                      progress=False)
    return out


@pytest.fixture(scope="session")
def tvr_va_data(tmp_path_factory, tvr_bench) -> Path:
    return _build(tmp_path_factory, "tvr_va", "tvr", tvr_options(tvr_bench, memory="va"))


@pytest.fixture(scope="session")
def tvr_ao_data(tmp_path_factory, tvr_bench) -> Path:
    return _build(tmp_path_factory, "tvr_ao", "tvr", tvr_options(tvr_bench, memory="ao"))


@pytest.fixture(scope="session")
def tvr_va_cot_data(tmp_path_factory, tvr_bench) -> Path:
    return _build(tmp_path_factory, "tvr_va_cot", "tvr", tvr_options(tvr_bench, memory="va", cot=True), cot=True)


@pytest.fixture(scope="session")
def virl_data(tmp_path_factory, virl_city) -> Path:
    return _build(tmp_path_factory, "virl", "virl", virl_options(virl_city))


@pytest.fixture(scope="session")
def virl_retry_data(tmp_path_factory, virl_city) -> Path:
    """V-IRL from a noisy expert: retry samples whose earlier (wrong) answer is context only."""
    out = tmp_path_factory.mktemp("sft") / "virl_retry"
    build_sft_dataset(get_suite("virl"), virl_options(virl_city, episodes=4), out, expert_noise=0.4, progress=False)
    return out


@pytest.fixture(scope="session")
def gp_data(tmp_path_factory) -> Path:
    return _build(tmp_path_factory, "gp", "gp", gp_options(mode="l"))


@pytest.fixture(scope="session")
def gp_vl_data(tmp_path_factory) -> Path:
    return _build(tmp_path_factory, "gp_vl", "gp", gp_options(mode="vl", episodes=6))


@pytest.fixture(scope="session")
def tiny_builtin(tmp_path_factory) -> Path:
    """The built-in `tiny` preset saved as a model folder (what `model.path` points at)."""
    from spatialrl.models.builtin import init_model

    out = tmp_path_factory.mktemp("models") / "tiny"
    init_model("tiny", out, seed=0)
    return out


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    """Each in-process training run gets its own accelerate state (it is a process-wide singleton)."""
    yield
    from spatialrl.train.common import reset_accelerate_state

    reset_accelerate_state()
