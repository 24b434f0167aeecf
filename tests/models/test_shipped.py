"""The shipped built-in models load on a CPU and answer in their task's format (they were trained)."""

from __future__ import annotations

import re

import pytest

from spatialrl.agents.base import SamplingParams
from spatialrl.agents.loader import load_policy
from spatialrl.envs.registry import get_suite
from spatialrl.models.builtin import model_eval_settings, shipped_models


@pytest.mark.skipif("tvr-ao-sft" not in shipped_models(), reason="weights not in this checkout")
def test_tvr_ao_sft_answers_with_an_action(tmp_path):
    from spatialrl.envs.tvr.bench import BenchConfig, make_bench

    bench = tmp_path / "bench"
    make_bench(bench, BenchConfig.preset(tiny=True, sizes={"eval": 4, "sft": 0, "rl": 0, "diag_rotate": 0,
                                                            "diag_move": 0}, scenes={"eval": 2, "sft": 0, "rl": 0}),
               progress=False)
    suite = get_suite("tvr")
    recorded = model_eval_settings("builtin:tvr-ao-sft")["options"]  # as `spatialrl eval` runs it
    assert recorded["memory"] == "ao" and (recorded["width"], recorded["height"]) == (280, 168)
    options = {**suite.default_options, **recorded, "data": str(bench)}
    spec = suite.episodes(options)[0]
    env, prompter = suite.make_env(options), suite.make_prompter(options)
    obs, info = env.reset(seed=spec.seed, options=dict(spec.reset_options))
    prompter.reset(obs, info)
    policy = load_policy("builtin:tvr-ao-sft")
    (gen,) = policy.generate([prompter.messages()], SamplingParams(max_new_tokens=16))
    assert gen.error is None
    match = re.fullmatch(r"Action: (\w+)", gen.text.strip())
    assert match and match.group(1) in {c.split(": ")[1] for c in info["candidate_responses"]}, gen.text
