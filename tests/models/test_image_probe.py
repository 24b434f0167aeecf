"""The image-sensitivity probe (TVR and V-IRL): it sees image use where there is some, and none where
there is none."""

from __future__ import annotations

import pytest
import torch

from spatialrl.eval.image_probe import image_sensitivity, probe_states, virl_image_sensitivity, with_target
from spatialrl.models.builtin import build_model, model_eval_settings, resolve_builtin


@pytest.fixture(scope="module")
def bench(one_scene_tvr_bench):
    return one_scene_tvr_bench


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


def test_the_shared_prefix_path_gives_the_whole_pass_distributions(bench, monkeypatch):
    from spatialrl.eval import image_probe
    from spatialrl.models import answer_scores

    states = probe_states(bench, "eval", {"width": 112, "height": 64}, n=3)
    model, processor, _ = build_model("tiny", seed=1)
    with torch.no_grad():
        whole = image_probe.answer_distributions(model, processor, states, shared_prefix=False)

        def no_whole_pass(*args):
            raise AssertionError("a state fell back to whole passes")

        monkeypatch.setattr(answer_scores, "full_scores", no_whole_pass)
        shared = image_probe.answer_distributions(model, processor, states)
    assert whole.shape == shared.shape == (3, 9)
    assert abs(whole - shared).max() < 1e-5, abs(whole - shared).max()
    assert abs(whole - whole.mean(axis=1, keepdims=True)).max() > 1e-4  # the answers do differ


def test_with_target_replaces_only_the_last_target(bench):
    state = probe_states(bench, "eval", {"width": 112, "height": 64}, n=2)[0]
    new = torch.zeros(64, 112, 3, dtype=torch.uint8).numpy()
    changed = with_target(state, new)
    images = [p for p in changed[-1]["content"] if p["type"] == "image"]
    assert images[-1]["image"] is new and images[0]["image"] is not new
    original = [p for p in state[-1]["content"] if p["type"] == "image"]
    assert original[-1]["image"] is not new  # the state itself is untouched


def test_joined_states_probe_the_same_frames_in_one_image(bench):
    """frames=joined: the same states, the pair as halves of one image; the target swap writes only the
    right half, and a blinded model does not move."""
    import numpy as np

    from spatialrl.eval.image_probe import current_and_target

    opts = {"width": 112, "height": 64}
    separate = probe_states(bench, "eval", opts, n=4)
    joined = probe_states(bench, "eval", {**opts, "frames": "joined"}, n=4)
    for two, one in zip(separate, joined, strict=True):
        assert sum(p["type"] == "image" for p in one[-1]["content"]) == 1
        for a, b in zip(current_and_target(two), current_and_target(one), strict=True):
            assert (np.asarray(a) == np.asarray(b)).all()
    new = np.zeros((64, 112, 3), np.uint8)
    (image,) = [p["image"] for p in with_target(joined[0], new)[-1]["content"] if p["type"] == "image"]
    assert image.shape == (64, 224, 3) and (image[:, 112:] == 0).all()
    assert (image[:, :112] == np.asarray(current_and_target(joined[0])[0])).all()
    model, processor, _ = build_model("tiny", seed=1)
    with torch.no_grad():
        assert image_sensitivity(model, processor, joined)["target_swap_tv"] > 1e-4
        for p in model.model.visual.merger.parameters():
            p.zero_()
        assert image_sensitivity(model, processor, joined)["target_swap_tv"] < 1e-6


@pytest.mark.slow
def test_the_shipped_tvr_model_uses_its_images(bench):
    """The issue's image-sensitivity bar on the shipped weights. Passed here first by the twentieth
    session's model (2026-12-07, joined frames, continued); the one before passed on 200 probe states but
    not on these 8 of one house (target-swap TV 0.233), so the test stood as a strict xfail until then."""
    from transformers import AutoModelForImageTextToText

    from spatialrl.models.processor import load_processor

    folder = resolve_builtin("tvr-ao-sft")
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    # 8 states, not 4: on 4 the 2026-12-05 model passed (a few states decide the mean) while 200 test states
    # put it at 0.263; on 8 it was at 0.152
    recorded = model_eval_settings("builtin:tvr-ao-sft")["options"]  # its frame size and layout
    states = probe_states(bench, "eval", {k: recorded[k] for k in ("width", "height", "frames") if k in recorded}, n=8)
    with torch.no_grad():
        result = image_sensitivity(model, load_processor(folder), states)
    assert result["target_swap_tv"] >= 0.3
    assert result["p_stop_at_target"] > 0.5 > result["p_stop_elsewhere"]


@pytest.fixture(scope="module")
def city(tmp_path_factory):
    from spatialrl.envs.virl.city import make_city

    return make_city("metro", 3, 5, tmp_path_factory.mktemp("probe") / "city", tiny=True, pano_width=256,
                     contact_sheet=False, progress=False)


def _blind(model) -> None:
    """Zero the vision tower's output: every image then looks the same to the language model."""
    for p in model.model.visual.merger.parameters():
        p.zero_()


def test_the_virl_probe_moves_a_random_model_and_not_a_blinded_one(city):
    from spatialrl.envs.virl.probe import probe_states as virl_states

    states = virl_states({"data": str(city), "grid_size": 112, "intersection_in_text": False, "episodes": 6}, 6)
    assert len(states) == 6
    model, processor, _ = build_model("tiny", seed=1)
    with torch.no_grad():
        seeing = virl_image_sensitivity(model, processor, states)
        assert seeing["grid_swap_tv"] > 1e-4  # random weights: the grid changes the logits
        _blind(model)
        blind = virl_image_sensitivity(model, processor, states)
    assert blind["grid_swap_tv"] < 1e-6 and blind["p_expert"] == pytest.approx(blind["p_expert_swapped"], abs=1e-6)
    assert blind["states"] == 6 and sum(row["states"] for row in blind["by_kind"].values()) == 6


def test_model_probe_command_dispatches_by_task(city, bench):
    import json

    from typer.testing import CliRunner

    from spatialrl.cli import app

    args = ["model", "probe", "builtin:tiny-random", "--data", str(city), "--states", "3", "--set", "grid_size=112",
            "--set", "episodes=4"]
    res = CliRunner().invoke(app, [*args, "--task", "virl"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    assert out["task"] == "virl" and out["states"] == 3 and 0.0 <= out["p_expert"] <= 1.0
    assert set(out["by_kind"]) <= {"forward|destination", "destination|forward"}  # the reference prompt
    res = CliRunner().invoke(app, args)  # an untrained model records no task
    assert res.exit_code == 2 and "--task" in res.output
    res = CliRunner().invoke(app, [*args, "--task", "gp"])
    assert res.exit_code == 2 and "no probe for task 'gp'" in res.output
    res = CliRunner().invoke(app, ["model", "probe", "builtin:tiny-random", "--task", "tvr", "--data", str(bench),
                                   "--states", "2", "--set", "width=112", "--set", "height=64"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    assert out["task"] == "tvr" and out["states"] == 2 and "target_swap_tv" in out


@pytest.mark.slow
def test_the_shipped_virl_model_reads_its_grid(tmp_path):
    """Issue 19's bar for V-IRL: swapping the street-view grid where the text cannot decide moves the
    answer (mean TV >= 0.3), and the expert's answer loses much of its probability with the other grid.
    The shipped model (2026-12-06, tenth session, DAgger round 3) here, on 12 states: TV 0.325, P(expert
    answer) 0.81 vs 0.51 with the grid swapped (round 2: 0.346, 0.82 vs 0.47); on the held-out test city
    (116 states) TV 0.340, 0.75 vs 0.51 (`docs/results/builtin/README.md`). The second check was
    "P(expert) > 0.5 > P(expert, swapped)" until round 3: a cut at 0.5 sits on the noise of 12 states (the
    seventh session's model already had 0.51 on the test city), so it now asks for a drop of 0.2."""
    from transformers import AutoModelForImageTextToText

    from spatialrl.envs.virl.city import make_city
    from spatialrl.envs.virl.probe import probe_states as virl_states
    from spatialrl.models.builtin import model_eval_settings
    from spatialrl.models.processor import load_processor

    city = make_city("metro", 6, 7, tmp_path / "held-out", tiny=True, contact_sheet=False, progress=False)
    folder = resolve_builtin("virl-sft")
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    options = model_eval_settings("builtin:virl-sft")["options"]  # its grid size
    states = virl_states({**options, "data": str(city), "episodes": 12}, 12)
    with torch.no_grad():
        result = virl_image_sensitivity(model, load_processor(folder), states)
    assert result["grid_swap_tv"] >= 0.3
    assert result["p_expert"] > 0.5 and result["p_expert"] - result["p_expert_swapped"] >= 0.2


def test_the_history_swap_replaces_only_the_history_and_moves_a_text_reader(bench):
    from spatialrl.eval.image_probe import history_block, with_history

    states = probe_states(bench, "eval", {"width": 112, "height": 64}, n=8)
    blocks = [history_block(s) for s in states]
    i, j = next((i, j) for i, a in enumerate(blocks) for j, b in enumerate(blocks) if a and b and a != b)
    moved = with_history(states[i], blocks[j])
    text = [p["text"] for p in moved[-1]["content"] if p["type"] == "text"][-1]
    assert blocks[j] in text and blocks[i] not in text and "Valid actions at this step: " in text
    assert [p["image"] for p in moved[-1]["content"] if p["type"] == "image"] == \
        [p["image"] for p in states[i][-1]["content"] if p["type"] == "image"]
    model, processor, _ = build_model("tiny", seed=1)
    with torch.no_grad():
        out = image_sensitivity(model, processor, states)
    assert 1 <= out["history_states"] <= 8 and out["history_swap_tv"] > 1e-4  # random weights read the text
    no_history = probe_states(bench, "eval", {"width": 112, "height": 64, "history_len": 0}, n=4)
    assert all(history_block(s) is None for s in no_history)
    with torch.no_grad():
        assert "history_swap_tv" not in image_sensitivity(model, processor, no_history)


def test_optimal_sets_keep_the_plain_states_and_score_the_per_step_skill(bench, monkeypatch):
    """The probe's states come with every optimal answer of each; they are the very states the plain
    expert labels gave (so earlier probe numbers stay comparable), each set holds the plain expert's
    answer, and ``optimal_accuracy``/``optimal_mass`` read the model's distribution against the sets."""
    import tempfile
    from pathlib import Path

    import numpy as np

    from spatialrl.envs.registry import get_suite
    from spatialrl.envs.tvr.env import CANDIDATE_RESPONSES
    from spatialrl.eval import image_probe
    from spatialrl.train.data import SFTDataset, build_sft_dataset

    opts = {"width": 112, "height": 64}
    states, optimal = image_probe.labelled_probe_states(bench, "eval", opts, n=8)
    assert len(states) == len(optimal) == 8
    suite = get_suite("tvr")  # the selection as plain labels make it
    with tempfile.TemporaryDirectory() as tmp:
        build_sft_dataset(suite, {**suite.default_options, **opts, "data": str(bench), "split": "eval", "memory": "ao"},
                          Path(tmp) / "plain", seed=0, samples="step", progress=False, expert_noise=0.3)
        data = SFTDataset(Path(tmp) / "plain")
        keep = [i for i in np.random.default_rng(0).permutation(len(data)).tolist()
                if data.rows[i]["messages"][-1]["content"][0]["text"] != "Action: Stop"][:8]
        plain = [data.rows[i]["messages"] for i in keep]
    for state, best, row in zip(states, optimal, plain, strict=True):
        assert [m["content"][0].get("text") for m in state] == [m["content"][0].get("text") for m in row[:-1]]
        assert row[-1]["content"][0]["text"] in best and "Action: Stop" not in best
    assert any(len(best) > 1 for best in optimal)  # ties exist: the oracle's tie-break is not the only answer

    ahead = CANDIDATE_RESPONSES.index("Action: MoveAhead")
    fixed = np.zeros((len(states), 9))
    fixed[:, ahead], fixed[:, image_probe.STOP] = 0.7, 0.3
    monkeypatch.setattr(image_probe, "answer_distributions", lambda model, processor, convs: fixed[:len(convs)])
    out = image_probe.image_sensitivity(None, None, states, optimal=optimal)
    hits = np.array(["Action: MoveAhead" in best for best in optimal])
    assert out["optimal_accuracy"] == pytest.approx(hits.mean())
    assert out["optimal_mass"] == pytest.approx(0.7 * hits.mean())
