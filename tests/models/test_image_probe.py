"""The image-sensitivity probe: it sees image use where there is some, and none where there is none."""

from __future__ import annotations

import pytest
import torch

from spatialrl.eval.image_probe import image_sensitivity, probe_states, with_target
from spatialrl.models.builtin import build_model, resolve_builtin

TINY = {"eval": 4, "sft": 0, "rl": 0, "diag_rotate": 0, "diag_move": 0}


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    from spatialrl.envs.tvr.bench import BenchConfig, make_bench

    out = tmp_path_factory.mktemp("probe") / "bench"
    make_bench(out, BenchConfig.preset(seed=5, sizes=TINY, scenes={"sft": 0, "eval": 1, "rl": 0}), progress=False)
    return out


def test_a_random_model_reads_its_images_and_a_blinded_one_does_not(bench):
    states = probe_states(bench, "eval", {"width": 112, "height": 64}, n=6)
    assert len(states) == 6
    model, processor, _ = build_model("tiny", seed=1)
    with torch.no_grad():
        seeing = image_sensitivity(model, processor, states)
        assert seeing["target_swap_tv"] > 1e-4  # random weights: the images change the logits
        # blind it: the vision tower's output is zeroed, so every image looks the same
        for p in model.model.visual.merger.parameters():
            p.zero_()
        blind = image_sensitivity(model, processor, states)
    assert blind["target_swap_tv"] < 1e-6
    assert 0.0 <= blind["p_stop_at_target"] <= 1.0 and blind["states"] == 6


def test_with_target_replaces_only_the_last_target(bench):
    state = probe_states(bench, "eval", {"width": 112, "height": 64}, n=2)[0]
    new = torch.zeros(64, 112, 3, dtype=torch.uint8).numpy()
    changed = with_target(state, new)
    images = [p for p in changed[-1]["content"] if p["type"] == "image"]
    assert images[-1]["image"] is new and images[0]["image"] is not new
    original = [p for p in state[-1]["content"] if p["type"] == "image"]
    assert original[-1]["image"] is not new  # the state itself is untouched


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="the shipped TVR models (2026-12-02) ignore their images (issue 19); "
                                      "this flips to a failure once retrained models pass — then drop the mark")
def test_the_shipped_tvr_model_uses_its_images(bench):
    from transformers import AutoModelForImageTextToText

    from spatialrl.models.processor import load_processor

    folder = resolve_builtin("tvr-ao-sft")
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    states = probe_states(bench, "eval", {"width": 280, "height": 168}, n=4)
    with torch.no_grad():
        result = image_sensitivity(model, load_processor(folder), states)
    assert result["target_swap_tv"] >= 0.3
    assert result["p_stop_at_target"] > 0.5 > result["p_stop_elsewhere"]
