"""``--agent`` spec parsing: every kind, and clear errors for bad specs."""

from __future__ import annotations

import pytest

from spatialrl.agents.loader import load_policy, split_openai_spec
from spatialrl.errors import DataError


def test_openai_spec_parsing(monkeypatch):
    assert split_openai_spec("gpt-4o@https://api.example.com/v1") == ("gpt-4o", "https://api.example.com/v1")
    assert split_openai_spec("org/model@v2@http://127.0.0.1:8000/v1") == ("org/model@v2", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:9999/v1")
    assert split_openai_spec("Qwen/Qwen2.5-VL-7B-Instruct") == ("Qwen/Qwen2.5-VL-7B-Instruct", "http://localhost:9999/v1")
    with pytest.raises(DataError, match="must start with http"):
        split_openai_spec("model@localhost:8000")


def test_openai_policy_options(monkeypatch):
    monkeypatch.setenv("MY_KEY", "secret")
    policy = load_policy("openai:m@http://127.0.0.1:8000/v1/", api_key_env="MY_KEY", concurrency=3, timeout=7,
                         max_retries=2)
    assert (policy.model, policy.base_url, policy.api_key) == ("m", "http://127.0.0.1:8000/v1", "secret")
    assert (policy.concurrency, policy.timeout, policy.max_retries) == (3, 7, 2)


@pytest.mark.parametrize("spec, message", [
    ("gpt", "unknown agent spec"),
    ("hf:", "needs a model folder"),
    ("hf:/definitely/not/here", "does not exist"),
    ("builtin:no-such-model", "available: .*tiny-random"),
    ("openai:", "needs a model name"),
])
def test_bad_specs(spec, message):
    with pytest.raises(DataError, match=message):
        load_policy(spec)


def test_hf_and_builtin_specs(tmp_path):
    from spatialrl.agents.hf import HFPolicy
    from spatialrl.models.builtin import init_model

    init_model("tiny", tmp_path / "m")
    policy = load_policy(f"hf:{tmp_path / 'm'}", device="cpu", dtype="fp32", max_pixels=56 * 56)
    assert isinstance(policy, HFPolicy) and policy.family == "qwen2_5_vl" and policy.name.startswith("hf:")
    on_the_fly = load_policy("builtin:tiny-random", device="cpu")
    assert on_the_fly.name == "builtin:tiny-random"
    # builtin:tiny-random is the tiny preset with seed 0: identical to the saved one.
    a = policy.model.state_dict()
    b = on_the_fly.model.state_dict()
    assert all((a[k] == b[k]).all() for k in a)
    with pytest.raises(DataError, match="--dtype"):
        load_policy(f"hf:{tmp_path / 'm'}", dtype="int3")


def test_expert_and_random_specs():
    assert load_policy("expert").name == "expert"
    assert load_policy("random", seed=3).name == "random"
