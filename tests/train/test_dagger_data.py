"""DAgger roll-in (`--roll-in AGENT`) and all-optimal labels (`--labels all_optimal`) in SFT data building.

Labels are checked against the oracle recomputed from scratch (BFS on the scene's lattice) at the poses the
env reported to the agent, not against the builder's own bookkeeping.
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
from typer.testing import CliRunner

from spatialrl.agents.base import text_of
from spatialrl.agents.expert import RollInPolicy
from spatialrl.agents.random import RandomPolicy
from spatialrl.cli import app
from spatialrl.envs.registry import get_suite
from spatialrl.envs.tvr import oracle
from spatialrl.envs.tvr.scenes import scene_lattice
from spatialrl.envs.tvr.tasks import open_bench, pose_from_record, task_poses
from spatialrl.errors import DataError
from spatialrl.train.data import SFTDataset, build_sft_dataset

from .conftest import gp_options, tvr_options, virl_options


class Recorder:
    """Wraps an agent and keeps the env info of every state it is asked in, by (task id, step)."""

    def __init__(self, agent):
        self.agent, self.name = agent, f"recorded-{agent.name}"
        self.seen: dict[tuple[str, int], dict] = {}

    def generate(self, conversations, sampling, infos=None):
        for info in infos:
            self.seen[(info["task_id"], info["step"])] = info
        return self.agent.generate(conversations, sampling, infos)


def _rows(folder):
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]


def _answer(row):
    return text_of(row["messages"][-1])


def _oracle(bench, task_id):
    """(lattice, distances) of a task, computed afresh."""
    task = open_bench(bench).task(task_id, "sft")
    lattice = scene_lattice(task["scene"], task["mode"])
    return lattice, oracle.distances_to(lattice, task_poses(task)[1])


def _current_images(rows):
    return {part["image"] for r in rows for part in r["messages"][1]["content"]
            if part["type"] == "image"}


def test_env_info_lists_every_optimal_action(tvr_bench):
    """``expert_responses`` is the oracle's whole optimal set in tie-break order, on and off the path."""
    suite = get_suite("tvr")
    options = tvr_options(tvr_bench, memory="ao", vector_env=False)
    env = suite.make_env(options)
    rng = np.random.default_rng(0)
    several = 0
    for spec in suite.episodes(options):
        _, info = env.reset(seed=spec.seed, options=dict(spec.reset_options))
        lattice, dist = _oracle(tvr_bench, spec.episode_id)
        for _ in range(12):
            pose = pose_from_record(info["pose"])
            optimal = oracle.optimal_actions(lattice, pose, dist)
            listed = [a.removeprefix("Action: ") for a in info["expert_responses"]]
            assert sorted(listed) == sorted(optimal) and len(listed) == len(set(listed))
            assert info["expert_responses"][0] == info["expert_response"]
            order = oracle.TIE_BREAKS["look_first"]  # rotations, tilts, then moves
            assert listed == sorted(listed, key=lambda a: order.index(oracle.ACTION_INDEX[a]))
            several += len(listed) > 1
            move = str(rng.choice([a for a in oracle.ACTIONS if a != "Stop"]))
            _, _, terminated, truncated, info = env.step(f"Action: {move}")
            if terminated or truncated:
                break
    env.close()
    assert several > 0  # ties exist on these tasks, so the set is more than the single label


def test_roll_in_labels_the_agents_own_states_with_the_oracle(tmp_path, tvr_bench, tvr_ao_data):
    suite = get_suite("tvr")
    options = tvr_options(tvr_bench, memory="ao")
    agent = Recorder(RandomPolicy(seed=0))
    meta = build_sft_dataset(suite, options, tmp_path / "d", roll_in=agent, roll_in_beta=0.0,
                             roll_in_name="random", seed=3, progress=False)
    assert meta["roll_in"] == "random" and meta["roll_in_beta"] == 0.0 and meta["labels"] == "expert"
    assert meta["roll_in_turns"]["expert"] == 0 and meta["roll_in_turns"]["agent"] == meta["samples"]
    assert not meta["episodes_dropped"]  # failed episodes are kept: their states are the point
    rows = _rows(tmp_path / "d")
    fields = {}
    for row in rows:
        episode_id, t = row["id"].split("/t")
        info = agent.seen[(episode_id, int(t))]  # the state the agent was shown when this sample was taken
        if episode_id not in fields:
            fields[episode_id] = _oracle(tvr_bench, episode_id)
        lattice, dist = fields[episode_id]
        expected = oracle.next_action(lattice, pose_from_record(info["pose"]), dist)
        assert _answer(row) == f"Action: {expected}"
    # the agent's states are not the expert's: most current frames never occur on the expert's paths
    assert len(_current_images(rows) - _current_images(_rows(tvr_ao_data))) >= len(rows) // 3


def test_roll_in_is_seeded_and_batch_size_independent(tmp_path, tvr_bench):
    suite = get_suite("tvr")
    options = tvr_options(tvr_bench, memory="ao")
    for name, batch in (("a", 1), ("b", 4)):
        build_sft_dataset(suite, options, tmp_path / name, roll_in=RandomPolicy(seed=0), roll_in_beta=0.5,
                          seed=7, batch_size=batch, progress=False)
    assert (tmp_path / "a" / "samples.jsonl").read_bytes() == (tmp_path / "b" / "samples.jsonl").read_bytes()
    meta = json.loads((tmp_path / "a" / "meta.json").read_text())
    assert meta["roll_in_turns"]["agent"] > 0 and meta["roll_in_turns"]["expert"] > 0  # both drove
    build_sft_dataset(suite, options, tmp_path / "c", roll_in=RandomPolicy(seed=0), roll_in_beta=0.5,
                      seed=8, progress=False)
    assert (tmp_path / "c" / "samples.jsonl").read_bytes() != (tmp_path / "a" / "samples.jsonl").read_bytes()


def test_roll_in_with_beta_one_is_the_plain_expert_dataset(tmp_path, tvr_bench, tvr_ao_data):
    meta = build_sft_dataset(get_suite("tvr"), tvr_options(tvr_bench, memory="ao"), tmp_path / "d",
                             roll_in=RandomPolicy(seed=0), roll_in_beta=1.0, progress=False)
    assert meta["roll_in_turns"]["agent"] == 0
    assert (tmp_path / "d" / "samples.jsonl").read_bytes() == (tvr_ao_data / "samples.jsonl").read_bytes()


def test_roll_in_policy_asks_the_agent_only_for_its_turns():
    """Streams are passed through per conversation, so a seeded agent answers the same in any batch."""
    from spatialrl.agents.base import SamplingParams

    infos = [{"expert_response": f"E{i}", "candidate_responses": [f"A{i}", f"B{i}", f"C{i}"]} for i in range(40)]
    sampling = SamplingParams(seed=1, streams=tuple(range(100, 140)))
    whole = RollInPolicy(RandomPolicy(seed=0), beta=0.3).generate([[]] * 40, sampling, infos)
    assert all(g.extra["label"] == f"E{i}" for i, g in enumerate(whole))
    by = [g.extra["by"] for g in whole]
    assert 0 < by.count("expert") < 40 and all(g.text == f"E{i}" for i, g in enumerate(whole) if by[i] == "expert")
    halves = []
    for lo, hi in ((0, 17), (17, 40)):
        sub = SamplingParams(seed=1, streams=sampling.streams[lo:hi])
        halves += RollInPolicy(RandomPolicy(seed=0), beta=0.3).generate([[]] * (hi - lo), sub, infos[lo:hi])
    assert [g.text for g in halves] == [g.text for g in whole]
    with pytest.raises(ValueError, match="beta"):
        RollInPolicy(RandomPolicy(), beta=1.5)


def test_roll_in_with_the_builtin_model_and_unparsable_answers(tmp_path, tvr_bench):
    """A random-weight built-in model answers gibberish: TVR spends the turn without moving, the sample
    still gets the oracle's label, and the CLI records the agent in meta.json."""
    runner = CliRunner()
    out = tmp_path / "tiny"
    result = runner.invoke(app, ["data", "sft", "--task", "tvr", "--data", str(tvr_bench), "--split", "sft",
                                 "--out", str(out), "--episodes", "2", "--roll-in", "builtin:tiny-random",
                                 "--roll-in-beta", "0.5", "--max-new-tokens", "6", "--set", "memory=ao",
                                 "--set", "width=112", "--set", "height=64", "--set", "cache_mb=16"])
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "meta.json").read_text())
    assert meta["roll_in"] == "builtin:tiny-random" and meta["roll_in_beta"] == 0.5
    assert meta["roll_in_sampling"]["max_new_tokens"] == 6 and "--roll-in builtin:tiny-random" in meta["command"]
    rows = _rows(out)
    assert all(_answer(r).startswith("Action: ") for r in rows)
    history = " ".join(text_of(r["messages"][1]) for r in rows)
    assert meta["roll_in_turns"]["agent"] > 0 and "No action could be read" in history  # the env spent those turns


def _context_and_target(row):
    """A sample's assistant messages: all but the last are context (``train: false``), the last the target."""
    answers = [m for m in row["messages"] if m["role"] == "assistant"]
    return answers[:-1], answers[-1]


def test_roll_in_on_multi_turn_prompts_trains_only_the_label(tmp_path, tvr_bench, virl_city):
    """TVR visual-action memory and V-IRL's retry turns repeat the agent's earlier answers: they stay in the
    sample as context marked ``train: false``; each sample's last answer is the expert's label."""
    meta = build_sft_dataset(get_suite("tvr"), tvr_options(tvr_bench, memory="va"), tmp_path / "va",
                             roll_in=RandomPolicy(seed=3), progress=False)
    rows = _rows(tmp_path / "va")
    assert meta["samples"] == len(rows) and all(len(r["turns"]) == 1 for r in rows)  # one sample per state
    later = [r for r in rows if r["turns"][0] > 0]
    assert later
    for row in later:
        context, target = _context_and_target(row)
        assert len(context) == row["turns"][0] and all(m["train"] is False for m in context)
        assert "train" not in target and text_of(target).startswith("Action: ")
    virl = build_sft_dataset(get_suite("virl"), virl_options(virl_city, episodes=4), tmp_path / "v",
                             roll_in=RandomPolicy(seed=1), progress=False)
    retries = [r for r in _rows(tmp_path / "v") if _context_and_target(r)[0]]
    assert virl["samples"] > 0 and retries  # the random agent fails and is asked again at the same point
    for row in retries:
        context, target = _context_and_target(row)
        assert all(m["train"] is False for m in context) and "You failed this trial" in text_of(row["messages"][-2])
        assert '"action": ' in text_of(target)
    with pytest.raises(DataError, match="use one of them"):
        build_sft_dataset(get_suite("tvr"), tvr_options(tvr_bench, memory="ao"), tmp_path / "n",
                          roll_in=RandomPolicy(), expert_noise=0.2, progress=False)
    assert not (tmp_path / "n").exists()


def test_all_optimal_labels_are_the_oracles_optimal_set(tmp_path, tvr_bench):
    """Rolled in by a random agent so states off the path are covered too; every state's labels are
    exactly its optimal set, its images stored once."""
    suite = get_suite("tvr")
    agent = Recorder(RandomPolicy(seed=1))
    meta = build_sft_dataset(suite, tvr_options(tvr_bench, memory="ao"), tmp_path / "d", roll_in=agent,
                             labels="all_optimal", seed=2, progress=False)
    rows = _rows(tmp_path / "d")
    states = defaultdict(list)
    for row in rows:
        states[(row["episode_id"], row["turns"][0])].append(row)
    assert meta["states"] == len(states) < meta["samples"] == len(rows)  # some states have several labels
    for (episode_id, t), group in states.items():
        lattice, dist = _oracle(tvr_bench, episode_id)
        pose = pose_from_record(agent.seen[(episode_id, t)]["pose"])
        optimal = oracle.optimal_actions(lattice, pose, dist)
        labels = [_answer(r).removeprefix("Action: ") for r in group]
        assert sorted(labels) == sorted(optimal) and all(r["n_labels"] == len(optimal) for r in group)
        assert labels[0] == oracle.next_action(lattice, pose, dist)  # the default label comes first
        assert all(r["messages"][:-1] == group[0]["messages"][:-1] for r in group)  # same state, same files
    assert len(list((tmp_path / "d" / "images").iterdir())) == meta["images"]


def test_all_optimal_on_the_expert_path_and_the_default_unchanged(tmp_path, tvr_bench, tvr_ao_data):
    """On the expert's own path, the default dataset is the all-optimal one's first label of each state."""
    meta = build_sft_dataset(get_suite("tvr"), tvr_options(tvr_bench, memory="ao"), tmp_path / "all",
                             labels="all_optimal", progress=False)
    default = _rows(tvr_ao_data)
    firsts = []
    for row in _rows(tmp_path / "all"):
        if row["id"].endswith("/a0"):
            firsts.append({**{k: v for k, v in row.items() if k not in ("n_labels", "weight")},
                           "id": row["id"][: -len("/a0")]})
    assert firsts == default and meta["samples"] > len(default)
    assert json.loads((tvr_ao_data / "meta.json").read_text())["labels"] == "expert"
    assert len(SFTDataset(tmp_path / "all")) == meta["samples"]


def test_all_optimal_needs_the_optimal_set(tmp_path, tvr_bench):
    with pytest.raises(DataError, match="expert_responses"):
        build_sft_dataset(get_suite("gp"), gp_options(mode="l", episodes=1), tmp_path / "g",
                          labels="all_optimal", progress=False)
    assert not (tmp_path / "g").exists()
    # multi-turn: a state's label samples share the history, whose answers are context only
    build_sft_dataset(get_suite("tvr"), tvr_options(tvr_bench, memory="va"), tmp_path / "va",
                      labels="all_optimal", progress=False)
    for row in _rows(tmp_path / "va"):
        context, _ = _context_and_target(row)
        assert all(m["train"] is False for m in context)
