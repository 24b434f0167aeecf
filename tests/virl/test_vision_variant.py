"""Issue 20: the vision-required variant (``intersection_in_text=false``). The reference prompt stays byte
for byte; in the variant the current history line no longer says whether the agent is at an
intersection, so two steps that differ only in the street-view grid get the same text."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from spatialrl.envs.registry import get_suite
from spatialrl.envs.virl.env import VirlEnv
from spatialrl.envs.virl.prompts import VirlPrompter, build_prompt, obs_act_sequence
from spatialrl.errors import SpatialRLError
from tests.virl.test_prompts import CURRENT, SEED_HISTORY, SEED_INSTRUCTION, SEED_VL_PROMPT

# Route 1 of the generated city, start heading 90: with reset seed 0 rail point 3 is the first
# intersection (two forward points kept), with seed 5 it is a forward point (four kept). Same
# instruction, same history up to point 3: only the grid differs there.
ROUTE, HEADING, STEP, AT_INTERSECTION, ON_STREET = 1, 90, 3, 0, 5

GOLDEN_VARIANT = (
    "\n[Task Description]\n"
    "You are an expert in navigation. You will receive a sequence of instructions to follow while observing your "
    "surrounding stree tviews. You\n"
    "are also provided with your observation and action history in text. Your goal is to first analyze the "
    "instruction and identify the next sentence to be executed. \n"
    "Then, you need to provide the action to be taken based on the current observation and instruction.\n"
    "\n[Instruction]\n"
    "1. First, turn left to face north.\n"
    "2. Move forward until you reach next intersection where Atlas Ramen is on your left front.\n"
    "3. Turn right to face east.\n"
    "4. Move forward until you reach destination where The destination Tulip Pizza is on your right.\n"
    "\n\n[Observation format]\n"
    "You observe a 2x2 grid of streetview images with the following headings:\n"
    "[front, right\n back, left]\n"
    "You need to identify if any of the landmarks in the instruction are visible in the street view grid.\n"
    "\n[Action space]\n"
    '"forward()": indicates moving forward one step\n'
    '"turn_direction(x)": indicates adjust the ego agent direction towards x direction. x could be any following '
    "8 directions ['north', 'northeast', 'east', 'southeast', 'south', 'southwest', 'west', 'northwest']\n"
    '"stop()": indicates the navigation is finished.\n'
    "\n[Observations and actions sequence]\n"
    "O_1: No landmarks nearby; \nA_1: turn_direction(north)\n"
    "O_2: No landmarks nearby; \nA_2: forward()\n"
    "O_3: No landmarks nearby; \nA_3: forward()\n"
    "O_4: You observe an image of 4 views; \nA_4: \n"
    "\n\n[Output]\n{\n"
    '  "current observation": latest observation from the street view grid,\n'
    '  "current instruction": analyze the full instruction and identify the sentence to be executed,\n'
    '  "action": the action to be taken chosen from the action space,\n'
    "}\n"
)
INTERSECTION_ANSWER = ('{\n  "current observation": "Atlas Ramen is on your left front; You observe an intersection",\n'
                       '  "current instruction": "Turn right to face east.",\n  "action": "turn_direction(east)",\n}')
STREET_ANSWER = ('{\n  "current observation": "No landmarks nearby; ",\n  "current instruction": "Move forward until '
                 'you reach next intersection where Atlas Ramen is on your left front.",\n  "action": "forward()",\n}')


def _play(data, seed: int, in_text: bool, steps: int = STEP):
    """(prompt text, grid, expert answer, rail point kind) after ``steps`` expert steps."""
    env = VirlEnv(data, grid_size=112, intersection_in_text=in_text, cache_mb=0)
    obs, info = env.reset(seed=seed, options={"route_idx": ROUTE, "start_heading": HEADING})
    prompter = VirlPrompter(vision=True)
    prompter.reset(obs, info)
    for _ in range(steps):
        obs, _, _, _, info = env.step(info["expert_response"])
        prompter.update(info["expert_response"], obs, info)
    (message,) = prompter.messages()
    image, text = message["content"]
    return text["text"], image["image"], info["expert_response"], env.rail.points[steps].kind


def test_the_seed_prompt_is_unchanged_and_the_variant_drops_only_the_current_flag():
    obs = [o for o, _ in SEED_HISTORY] + [CURRENT]
    acts = [a for _, a in SEED_HISTORY]
    default = build_prompt(SEED_INSTRUCTION, obs_act_sequence(obs, acts, vision=True), True, True)
    assert default == SEED_VL_PROMPT
    assert build_prompt(SEED_INSTRUCTION, obs_act_sequence(obs, acts, True, intersection_in_text=True), True,
                        True) == SEED_VL_PROMPT
    variant = build_prompt(SEED_INSTRUCTION, obs_act_sequence(obs, acts, True, intersection_in_text=False), True, True)
    assert variant == SEED_VL_PROMPT.replace("O_13: You observe an image of 4 views; You observe an intersection\n",
                                             "O_13: You observe an image of 4 views; \n")
    assert variant != SEED_VL_PROMPT
    # past lines stay oracle text (they are the agent's own earlier observations)
    assert "O_4: Battery Playscape is on your right behind; You observe an intersection\n" in variant
    # the language-only prompt has no variant
    assert obs_act_sequence(obs, acts, False, intersection_in_text=False) == obs_act_sequence(obs, acts, False)


def test_variant_prompt_on_a_generated_city_is_golden(generated_city):
    text, _, answer, kind = _play(generated_city, AT_INTERSECTION, in_text=False)
    assert kind == "intersection"
    assert text == GOLDEN_VARIANT
    assert answer == INTERSECTION_ANSWER  # the expert still names the landmark and the intersection


def test_variant_text_is_the_same_at_an_intersection_and_on_the_street(generated_city):
    at_text, at_grid, at_answer, at_kind = _play(generated_city, AT_INTERSECTION, in_text=False)
    st_text, st_grid, st_answer, st_kind = _play(generated_city, ON_STREET, in_text=False)
    assert (at_kind, st_kind) == ("intersection", "forward")
    assert at_text == st_text  # nothing in the text tells the two apart ...
    assert np.abs(at_grid.astype(int) - st_grid.astype(int)).mean() > 5  # ... the grids do
    assert (at_answer, st_answer) == (INTERSECTION_ANSWER, STREET_ANSWER)
    # the reference prompt gives it away in exactly one line
    ref_at, _, _, _ = _play(generated_city, AT_INTERSECTION, in_text=True)
    ref_st, _, _, _ = _play(generated_city, ON_STREET, in_text=True)
    assert ref_st == st_text
    assert ref_at == at_text.replace("O_4: You observe an image of 4 views; \n",
                                     "O_4: You observe an image of 4 views; You observe an intersection\n")


def test_the_option_is_checked(generated_city):
    suite = get_suite("virl")
    with pytest.raises(SpatialRLError, match="intersection_in_text=false .* needs mode=vl"):
        suite.make_env({"data": str(generated_city), "mode": "l", "intersection_in_text": False})
    with pytest.raises(SpatialRLError, match="intersection_in_text must be true or false, got 'no'"):
        suite.episodes({"data": str(generated_city), "intersection_in_text": "no"})
    with pytest.raises(ValueError, match="needs mode='vl'"):
        VirlEnv(generated_city, mode="l", intersection_in_text=False)
    env = suite.make_env({"data": str(generated_city), "grid_size": 112, "intersection_in_text": False})
    assert env.unwrapped.intersection_in_text is False
    assert suite.make_env({"data": str(generated_city), "grid_size": 112}).unwrapped.intersection_in_text is True


def test_eval_and_sft_data_record_the_option_and_the_expert_still_solves_it(generated_city, tmp_path):
    from spatialrl.cli import app

    common = ["--task", "virl", "--data", str(generated_city), "--split", "in-dist", "--set", "grid_size=112",
              "--set", "intersection_in_text=false"]
    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["eval", *common, "--agent", "expert", "--limit", "3", "--out", str(run),
                                   "--no-report"])
    assert res.exit_code == 0, res.output
    assert json.loads((run / "run.json").read_text())["options"]["intersection_in_text"] is False
    episodes = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 3 and all(e["success"] and e["intersection_in_text"] is False for e in episodes)
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    turns = [s for s in steps if s["rail_index"] > 0 and s["expected_action"].startswith("turn_direction")]
    assert turns, "no intersection in these episodes: the check below would prove nothing"
    assert all("4 views; You observe an intersection" not in s["obs_act_seq"] for s in steps)

    data = tmp_path / "sft"
    res = CliRunner().invoke(app, ["data", "sft", *common, "--episodes", "2", "--out", str(data)])
    assert res.exit_code == 0, res.output
    meta = json.loads((data / "meta.json").read_text())
    assert meta["options"]["intersection_in_text"] is False
    rows = [json.loads(line) for line in (data / "samples.jsonl").read_text().splitlines()]
    prompts = [p["text"] for r in rows for m in r["messages"] if m["role"] == "user" for p in m["content"]
               if p["type"] == "text"]
    answers = [p["text"] for r in rows for m in r["messages"] if m["role"] == "assistant" for p in m["content"]]
    assert prompts and not any("4 views; You observe an intersection" in p for p in prompts)
    assert any("You observe an intersection" in a for a in answers)  # the targets still say it
    # a model trained on it keeps the option for eval
    from spatialrl.models.builtin import eval_settings_from_dataset

    assert eval_settings_from_dataset("virl", meta["options"], 96)["options"]["intersection_in_text"] is False


def test_the_trainers_task_options_reach_the_env(generated_city):
    from spatialrl.train.rl_config import RLTaskConfig
    from spatialrl.train.task_stream import task_episodes

    cfg = RLTaskConfig(name="virl", data=str(generated_city), split="in-dist",
                       options={"grid_size": 112, "intersection_in_text": False}, limit=1)
    suite, options, episodes = task_episodes(cfg)
    env = suite.make_env(options)
    assert env.unwrapped.intersection_in_text is False and len(episodes) == 1
