"""A small real bench, generated once per test session (one single-room and one multi-room scene)."""

import pytest

from spatialrl.envs.tvr.bench import BenchConfig, make_bench

SMALL = {"eval": 4, "sft": 0, "rl": 0, "diag_rotate": 2, "diag_move": 2}
SMALL_SCENES = {"sft": 0, "eval": 1, "rl": 0}


def small_config(seed: int = 7) -> BenchConfig:
    return BenchConfig.preset(seed=seed, sizes=SMALL, scenes=SMALL_SCENES)


@pytest.fixture(scope="session")
def bench_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tvr") / "bench"
    make_bench(out, small_config(), progress=False)
    return out


@pytest.fixture(scope="session")
def small_bench_config():
    """Factory of the session bench's config (to regenerate it, e.g. for determinism checks)."""
    return small_config
