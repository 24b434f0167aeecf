"""Expert SFT datasets: the runner's own conversations, the right sample shapes, deterministic bytes."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from spatialrl.agents.base import images_of, text_of
from spatialrl.cli import app
from spatialrl.envs.registry import get_suite
from spatialrl.envs.tvr.env import parse_action
from spatialrl.envs.tvr.thoughts import tvr_pose_difference
from spatialrl.errors import DataError
from spatialrl.rollout.runner import run_episodes
from spatialrl.train.cot import thought_function
from spatialrl.train.data import CoTExpertPolicy, SFTDataset, build_sft_dataset, select_episodes

from .conftest import gp_options, tvr_options, virl_options


def _answers(sample):
    return [text_of(m) for m in sample["messages"] if m["role"] == "assistant"]


def test_samples_are_the_conversations_eval_sends(tvr_bench, tvr_ao_data, tvr_va_data):
    """Replaying the expert through the runner gives the stored conversations, byte for byte."""
    from spatialrl.agents.expert import ExpertPolicy

    suite = get_suite("tvr")
    sent = []
    options = tvr_options(tvr_bench, memory="ao")
    run_episodes(suite, options, ExpertPolicy(), suite.episodes(options), batch_size=3, progress=False,
                 on_turn=lambda spec, conv, gen, step: sent.append((spec.episode_id, conv, gen.text)))
    data = SFTDataset(tvr_ao_data)
    by_id = {data[i]["id"]: data[i] for i in range(len(data))}
    counters: dict[str, int] = {}
    for episode_id, conv, answer in sent:
        t = counters.get(episode_id, 0)
        counters[episode_id] = t + 1
        sample = by_id[f"{episode_id}/t{t:03d}"]
        assert [text_of(m) for m in sample["messages"][:-1]] == [text_of(m) for m in conv]
        for a, b in zip(images_of(sample["messages"]), images_of(conv), strict=True):
            assert np.array_equal(a, b)  # PNG round trip is lossless
        assert _answers(sample) == [answer]
        assert re.fullmatch(r"Action: [A-Za-z]+", answer)


def test_visual_action_samples_hold_whole_trajectories(tvr_va_data):
    data = SFTDataset(tvr_va_data)
    meta = data.meta
    assert meta["samples"] == meta["episodes"] == len(data)
    for i in range(len(data)):
        sample = data[i]
        roles = [m["role"] for m in sample["messages"]]
        assert roles[0] == "system" and roles[1:] == ["user", "assistant"] * len(sample["turns"])
        assert _answers(sample)[-1] == "Action: Stop"
        assert len(images_of(sample["messages"])) == 2 * len(sample["turns"])  # current + target each turn


def test_builds_are_deterministic(tmp_path, tvr_bench):
    suite = get_suite("tvr")
    options = tvr_options(tvr_bench, memory="ao")
    for name in ("a", "b"):
        build_sft_dataset(suite, options, tmp_path / name, batch_size=2 if name == "a" else 5, progress=False)
    assert (tmp_path / "a" / "samples.jsonl").read_bytes() == (tmp_path / "b" / "samples.jsonl").read_bytes()
    images = sorted(p.name for p in (tmp_path / "a" / "images").iterdir())
    assert images == sorted(p.name for p in (tmp_path / "b" / "images").iterdir())
    for name in images:
        assert (tmp_path / "a" / "images" / name).read_bytes() == (tmp_path / "b" / "images" / name).read_bytes()


def test_cot_answers_reason_then_act_and_the_env_still_parses_them(tvr_va_cot_data, tvr_bench):
    data = SFTDataset(tvr_va_cot_data)
    assert data.meta["cot"] and not data.meta["episodes_dropped"]  # the env read every CoT answer
    sample = data[0]
    assert "<think>" in text_of(sample["messages"][0])  # the prompter asked for reasoning
    for answer in _answers(sample):  # every turn of the multi-turn chat carries its reasoning
        thought, action = re.fullmatch(r"<think>(.+)</think>\nAction: (\w+)", answer).groups()
        assert parse_action(answer) == action
        assert "Action" not in thought
    assert "matches the target" in _answers(sample)[-1]


def test_tvr_thought_describes_the_pose_difference():
    here = {"position": {"x": 1.0, "y": 0.9, "z": 1.0}, "rotation_y": 90.0, "horizon": 0.0}
    there = {"position": {"x": 1.5, "y": 0.9, "z": 0.75}, "rotation_y": 135.0, "horizon": -30.0}
    d = tvr_pose_difference(here, there)  # facing +x: +x is ahead, -z is to the right
    assert d == {"ahead": 0.5, "right": 0.25, "turn": 45.0, "tilt": -30.0}
    text = thought_function("tvr")({}, {"pose": here, "target_pose": there}, "Action: MoveAhead")
    assert text == ("The target view was taken 0.50 m ahead and 0.25 m to my right. It faces 45 degrees to my "
                    "right and looks 30 degrees further up. Stepping forward is the first move of the shortest "
                    "way there.")


def test_virl_and_gp_cot_keep_the_answer_parseable(tmp_path, virl_city):
    virl = build_sft_dataset(get_suite("virl"), virl_options(virl_city, episodes=1), tmp_path / "v",
                             thought_fn=thought_function("virl"), progress=False)
    assert not virl["episodes_dropped"]
    answer = _answers(SFTDataset(tmp_path / "v")[0])[0]
    assert answer.startswith("<think>I observe: ") and '"action": "' in answer.split("</think>")[1]
    gp = build_sft_dataset(get_suite("gp"), gp_options(mode="l", episodes=2), tmp_path / "g",
                           thought_fn=thought_function("gp"), progress=False)
    assert not gp["episodes_dropped"]
    assert "Their values are" in _answers(SFTDataset(tmp_path / "g")[0])[0]


def test_single_turn_tasks_give_one_sample_per_step(virl_data, gp_data):
    for path in (virl_data, gp_data):
        data = SFTDataset(path)
        assert all(len(data[i]["turns"]) == 1 for i in range(len(data)))
        assert [m["role"] for m in data[0]["messages"]][-2:] == ["user", "assistant"]
    assert SFTDataset(virl_data).meta["assistant_turns"] > SFTDataset(virl_data).meta["episodes"]


def test_sample_shape_options(tmp_path, virl_city, tvr_bench):
    with pytest.raises(DataError, match="growing multi-turn chat"):
        build_sft_dataset(get_suite("virl"), virl_options(virl_city, episodes=1), tmp_path / "x",
                          samples="episode", progress=False)
    meta = build_sft_dataset(get_suite("tvr"), tvr_options(tvr_bench, memory="va"), tmp_path / "steps",
                             samples="step", episodes=1, progress=False)
    assert meta["samples"] == meta["assistant_turns"] > 1  # VA chats cut into per-turn samples on request


def test_episode_subsets_are_seeded():
    episodes = list(range(50))
    a, b, c = select_episodes(episodes, 10, 0), select_episodes(episodes, 10, 0), select_episodes(episodes, 10, 1)
    assert a == b != c and len(set(a)) == 10 and a == sorted(a)
    with pytest.raises(DataError, match="only 50 episodes"):
        select_episodes(episodes, 51, 0)


def test_annotator_policy_writes_the_reasoning(tvr_bench):
    """Any Policy can annotate; a failed annotation falls back to the template for that turn."""
    from spatialrl.agents.base import Generation

    class Annotator:
        name = "note-writer"

        def __init__(self):
            self.calls = 0

        def generate(self, conversations, sampling, infos=None):
            self.calls += 1
            assert "The correct answer" in text_of(conversations[0][-1])
            return [Generation(text="" if self.calls == 1 else "I compare the two views.") for _ in conversations]

    suite = get_suite("tvr")
    options = tvr_options(tvr_bench, memory="ao", cot=True)
    policy = CoTExpertPolicy(options, thought_function("tvr"), Annotator())
    texts = []
    run_episodes(suite, options, policy, suite.episodes(options)[:1], batch_size=1, progress=False,
                 on_turn=lambda s, c, g, step: texts.append(g.text))
    assert policy.fallbacks == 1  # the first (empty) annotation fell back to the template
    assert texts[0].startswith(("<think>The target view", "<think>I am standing"))
    assert all(t.startswith("<think>I compare the two views.</think>\nAction: ") for t in texts[1:])


def test_bad_dataset_folders(tmp_path, gp_data):
    with pytest.raises(DataError, match="no meta.json"):
        SFTDataset(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"format": "other/9"}))
    with pytest.raises(DataError, match="field 'format'"):
        SFTDataset(tmp_path)
    broken = tmp_path / "broken"
    import shutil

    shutil.copytree(gp_data, broken)
    rows = (broken / "samples.jsonl").read_text().splitlines()
    row = json.loads(rows[1])
    row["messages"][0]["content"] = [{"type": "image", "image": "images/missing.png"}]
    rows[1] = json.dumps(row)
    (broken / "samples.jsonl").write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"samples.jsonl:2: image 'images/missing.png' not found"):
        SFTDataset(broken)


def test_data_cli(tmp_path, virl_city):
    runner = CliRunner()
    out = tmp_path / "gp"
    result = runner.invoke(app, ["data", "sft", "--task", "gp", "--out", str(out), "--episodes", "3",
                                 "--set", "mode=l", "--set", "episodes=6"])
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "meta.json").read_text())
    assert meta["episodes"] == 3 and meta["command"].startswith("spatialrl data sft --task gp")
    again = runner.invoke(app, ["data", "sft", "--task", "gp", "--out", str(out)])
    assert again.exit_code == 2 and "--overwrite" in again.output
    cot = runner.invoke(app, ["data", "sft", "--task", "gp", "--out", str(tmp_path / "gc"), "--cot", "--episodes", "2",
                              "--set", "mode=l", "--set", "episodes=2"])
    assert cot.exit_code == 0, cot.output
    assert SFTDataset(tmp_path / "gc")[0]["messages"][-1]["content"][0]["text"].startswith("<think>The cards are")
    wrong = runner.invoke(app, ["data", "sft", "--task", "virl", "--data", str(virl_city), "--memory", "va",
                                "--out", str(tmp_path / "v")])
    assert wrong.exit_code == 2 and "memory" in wrong.output


def test_noisy_expert_leaves_the_path_but_keeps_the_experts_labels(tmp_path, tvr_bench):
    """expert_noise: some stepped actions are random (off-path states), every stored answer is the oracle's
    action at the state shown; multi-turn chats are refused (earlier noisy answers would be supervised)."""
    import json

    from spatialrl.envs.registry import get_suite
    from spatialrl.train.data import build_sft_dataset

    from .conftest import tvr_options

    suite = get_suite("tvr")
    clean = build_sft_dataset(suite, tvr_options(tvr_bench, memory="ao"), tmp_path / "clean", progress=False)
    noisy = build_sft_dataset(suite, tvr_options(tvr_bench, memory="ao"), tmp_path / "noisy", progress=False,
                              expert_noise=0.4, samples="step")
    assert noisy["expert_noise"] == 0.4 and noisy["samples"] > clean["samples"]  # detours take more steps
    rows = [json.loads(line) for line in (tmp_path / "noisy" / "samples.jsonl").read_text().splitlines()]
    answers = [r["messages"][-1]["content"][0]["text"] for r in rows]
    assert all(a.startswith("Action: ") for a in answers)
    # the history shows what was stepped; where it differs from the label stored one turn earlier, noise acted
    histories = [r["messages"][1]["content"][-1]["text"] for r in rows]
    assert any("Step" in h for h in histories)
    # multi-turn (visual-action memory): per-step samples, the stepped (noisy) answers context only
    va = build_sft_dataset(suite, tvr_options(tvr_bench, memory="va"), tmp_path / "va", progress=False,
                           expert_noise=0.4)
    rows = [json.loads(line) for line in (tmp_path / "va" / "samples.jsonl").read_text().splitlines()]
    assert va["samples"] == len(rows) and all(len(r["turns"]) == 1 for r in rows)
    for row in rows:
        answers = [m for m in row["messages"] if m["role"] == "assistant"]
        assert all(m["train"] is False for m in answers[:-1]) and "train" not in answers[-1]


def test_noisy_expert_on_virl_gives_retry_samples(tmp_path, virl_city):
    """V-IRL never leaves the expert's route: a noisy answer keeps the agent at its point and the retry turn
    repeats it. The noise is drawn per turn (the runner's stream ids: V-IRL's info names no step), so some
    episodes still succeed and some turns are retries; a retry's earlier answer is context only."""
    from spatialrl.agents.base import SamplingParams
    from spatialrl.agents.expert import ExpertPolicy

    meta = build_sft_dataset(get_suite("virl"), virl_options(virl_city, episodes=6), tmp_path / "v",
                             expert_noise=0.3, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "v" / "samples.jsonl").read_text().splitlines()]
    retries = [r for r in rows if sum(m["role"] == "assistant" for m in r["messages"]) > 1]
    assert meta["samples"] == len(rows) and 0 < len(retries) < len(rows)
    for row in retries:
        assert row["messages"][-3]["train"] is False and "train" not in row["messages"][-1]
        # verify_iter=2: one retry per point; the forced third call (its text never read) is no sample
        assert sum(m["role"] == "assistant" for m in row["messages"]) == 2
        assert "You failed this trial" in row["messages"][-2]["content"][0]["text"]
    # without task_id/step in the info or stream ids, the noise would be one draw for every turn: refused
    info = {"expert_response": "forward()", "candidate_responses": ["forward()", "stop()", "turn_direction(east)"]}
    with pytest.raises(ValueError, match="stream ids"):
        ExpertPolicy(0.5).generate([[]], SamplingParams(seed=0), [info])
    draws = {ExpertPolicy(0.5).generate([[]], SamplingParams(seed=0, streams=(s,)), [info])[0].text for s in range(40)}
    assert draws == {"forward()", "turn_direction(east)"}  # per stream; never the stop
