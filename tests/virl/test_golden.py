"""Golden tests: exact instruction text, rails, headings, observation strings and RNG call order for the
hand-made routes of testdata.golden_routes() (an L, a heading wrap, a 3 m segment, one milestone)."""

from __future__ import annotations

import random

import pytest

from spatialrl.envs.virl.rail import Fixes, build_rail, parse_rail_mode, relative_label
from spatialrl.envs.virl.validate import load_dataset

ALL_KEPT = {"drop_rate": 0.0}  # keep every interpolated candidate: the rail geometry is then fixed


@pytest.fixture(scope="module")
def ds(golden_data):
    return load_dataset(golden_data)


def test_relative_labels_thresholds_and_wrap():
    assert relative_label(0, -46) == "left"
    assert relative_label(0, 46) == "right"
    assert relative_label(0, -45) == "slightly left"
    assert relative_label(0, 0) == "slightly left"  # exactly 0 is "slightly left" (checked first)
    assert relative_label(0, 45) == "slightly right"
    # the reference's wrap bug: 350° → 10° is a +20° turn, labelled from the raw -340
    assert relative_label(350, 10) == "left"
    assert relative_label(350, 10, wrap=True) == "slightly right"
    assert relative_label(10, 350, wrap=True) == "slightly left"
    assert relative_label(197, 0, wrap=True) == "right"


def test_rail_mode_parsing():
    assert parse_rail_mode("faithful") == Fixes()
    assert parse_rail_mode("fixed") == Fixes(True, True, True)
    assert parse_rail_mode("heading_wrap,grid_order") == Fixes(True, True, False)
    assert parse_rail_mode("fixed:intersection_reward").name == "intersection_reward"
    with pytest.raises(ValueError, match="rail_mode"):
        parse_rail_mode("heading-wrap")


def test_route0_L_shape(ds):
    rail = build_rail(ds, 0, random.Random(0), start_heading=197, **ALL_KEPT)
    assert rail.global_instruction == (
        "1. First, turn left to face north.\n"
        "2. Move forward until you reach next intersection where Joe's Pizza is on your right.\n"
        "3. Turn right to face east.\n"
        "4. Move forward until you reach destination where The destination Cafe Uno is on your left.\n"
    )
    pts = rail.points
    assert [p.kind for p in pts] == ["start"] + ["forward"] * 4 + ["intersection"] + ["forward"] * 4 + ["destination"]
    assert [p.heading for p in pts] == [197] + [0.0] * 5 + [89.0] * 5
    assert [p.gt_action for p in pts] == (
        ["turn_direction(north)"] + ["forward()"] * 4 + ["turn_direction(east)"] + ["forward()"] * 4 + ["stop()"]
    )
    assert [p.instruction_idx for p in pts] == [1, 2, 2, 2, 2, 3, 4, 4, 4, 4, 4]
    assert pts[0].oracle_observation == "No landmarks nearby; "
    assert pts[1].oracle_observation == "No landmarks nearby; "
    assert pts[5].oracle_observation == "Joe's Pizza is on your right; You observe an intersection"
    assert pts[-1].oracle_observation == "The destination Cafe Uno is on your left; "
    assert pts[-1].instruction == "Move forward until you reach destination where The destination Cafe Uno is on your left."
    # milestone 0's raw geocode is 2.2 m off its pano: the rail point is the relocated pano key
    assert pts[5].geocode == ds.panos.relocate(ds.routes[0].geocodes[0]) != ds.routes[0].geocodes[0]
    # a 197° start turning to 0° is really a right turn: only the fixed mode says so
    fixed = build_rail(ds, 0, random.Random(0), start_heading=197, fixes=Fixes(heading_wrap=True), **ALL_KEPT)
    assert fixed.global_instruction.startswith("1. First, turn right to face north.\n")


def test_route1_heading_wrap(ds):
    faithful = build_rail(ds, 1, random.Random(0), absolute_action=False, **ALL_KEPT)
    assert faithful.start_heading == 350.5  # init_heading given: no draw
    assert faithful.global_instruction == (
        "1. First, turn slightly left to face north.\n"
        "2. Move forward until you reach next intersection where Pizza at the intersection is on your left.\n"
        "3. Turn left to face north.\n"
        "4. Move forward until you reach next intersection.\n"
        "5. Turn right to face east.\n"
        "6. Move forward until you reach destination where The destination Hotel Lumen is on your right front.\n"
    )
    turns = [p.gt_action for p in faithful.points if p.kind != "forward"]
    assert turns == ["turn_direction(slightly left)", "turn_direction(left)", "turn_direction(right)", "stop()"]
    assert len(faithful) == 15  # 4 + 4 + 3 interpolated points (the 45 m leg loses its 8 m-close one)
    assert [p.heading for p in faithful.points if p.kind != "forward"] == [350.5, 350.0, 10.0, 89.0]
    fixed = build_rail(ds, 1, random.Random(0), absolute_action=False, fixes=parse_rail_mode("fixed"), **ALL_KEPT)
    assert "3. Turn slightly right to face north.\n" in fixed.global_instruction
    assert [p.gt_action for p in fixed.points if p.kind != "forward"][1] == "turn_direction(slightly right)"
    # the absolute action space is the same in both modes
    absolute = build_rail(ds, 1, random.Random(0), **ALL_KEPT)
    assert [p.gt_action for p in absolute.points if p.kind != "forward"] == [
        "turn_direction(north)", "turn_direction(north)", "turn_direction(east)", "stop()"]
    assert absolute.points[10].oracle_observation == "No landmark nearby; You observe an intersection"


def test_route2_short_segment_shifts_instruction_index(ds):
    rail = build_rail(ds, 2, random.Random(0), **ALL_KEPT)
    assert rail.global_instruction == (
        "1. First, turn slightly left to face east.\n"
        "2. Move forward until you reach next intersection.\n"
        "3. Turn left to face north.\n"
        "4. Move forward until you reach next intersection where Grand Pharmacy is on your behind.\n"
        "5. Turn slightly left to face north.\n"
        "6. Move forward until you reach destination where The destination Bank of Ash is on your right.\n"
    )
    pts = rail.points
    assert [p.kind for p in pts] == (
        ["start"] + ["forward"] * 4 + ["intersection", "intersection"] + ["forward"] * 4 + ["destination"])
    # the 3 m segment gets no points and no index increment, so later points lag one sentence behind
    assert [p.instruction_idx for p in pts] == [1, 2, 2, 2, 2, 3, 4, 5, 5, 5, 5, 5]
    assert pts[6].instruction == "Move forward until you reach next intersection where Grand Pharmacy is on your behind."
    assert pts[6].gt_action == "turn_direction(north)"
    assert pts[-1].instruction == "Turn slightly left to face north."
    assert [p.heading for p in pts] == [90, 89.0, 89.0, 89.0, 89.0, 89.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_route3_single_milestone(ds):
    rail = build_rail(ds, 3, random.Random(0), start_heading=121, **ALL_KEPT)
    assert rail.global_instruction == (
        "1. Turn left to face north.\n"
        "2. Move forward until you reach destination where The destination Bluebird Books is on your right front.\n"
    )
    assert [p.kind for p in rail.points] == ["start", "forward", "forward", "forward", "destination"]
    assert [p.instruction_idx for p in rail.points] == [1, 2, 2, 2, 2]
    assert rail.points[-1].oracle_observation == "The destination Bluebird Books is on your right front; "


def test_random_call_order_heading_then_five_draws_per_long_segment(ds):
    # Route 0: init_heading 0 → randint(0, 359), then 5 draws for each of its two long segments.
    rng = random.Random(5)
    rail = build_rail(ds, 0, rng)
    replica = random.Random(5)
    heading = replica.randint(0, 359)
    draws = [replica.random() for _ in range(10)]
    assert rail.start_heading == heading
    assert rng.getstate() == replica.getstate()
    # candidates 1/5..4/5 survive relocation and the 8 m filter; 5/5 (the intersection) never does,
    # but its draw is consumed all the same
    kept_first = sum(d >= 0.5 for d in draws[0:4])
    kept_second = sum(d >= 0.5 for d in draws[5:9])
    kinds = [p.kind for p in rail.points]
    assert kinds.count("forward") == kept_first + kept_second
    assert kinds.index("intersection") == 1 + kept_first


def test_random_call_order_short_segment_and_fixed_heading(ds):
    rng = random.Random(9)
    build_rail(ds, 2, rng)  # init_heading 90 (no draw); segments 60 m, 3 m (no draws), 50 m
    replica = random.Random(9)
    for _ in range(10):
        replica.random()
    assert rng.getstate() == replica.getstate()


def test_prompt_of_an_episode_state(golden_data):
    """The full V-IRL-L prompt at rail point 1 of route 3 (one forward step taken), byte for byte."""
    from spatialrl.envs.virl.env import VirlEnv
    from spatialrl.envs.virl.prompts import VirlPrompter

    env = VirlEnv(golden_data, mode="l", drop_rate=0.0)
    obs, info = env.reset(options={"route_idx": 3, "start_heading": 121})
    prompter = VirlPrompter(vision=False)
    prompter.reset(obs, info)
    obs, _, _, _, info = env.step(info["expert_response"])
    prompter.update(info["expert_response"], obs, info)
    (message,) = prompter.messages()
    assert message["content"][0]["text"] == (
        "\n[Task Description]\n"
        "You are an expert in navigation. You will receive a sequence of instructions to follow. You\n"
        "are also provided with your observation and action history in text. Your goal is to first analyze the "
        "instruction and identify the next sentence to be executed. \n"
        "Then, you need to provide the action to be taken based on the current observation and instruction.\n"
        "\n[Instruction]\n"
        "1. Turn left to face north.\n"
        "2. Move forward until you reach destination where The destination Bluebird Books is on your right front.\n"
        "\n\n[Action space]\n"
        '"forward()": indicates moving forward one step\n'
        '"turn_direction(x)": indicates adjust the ego agent direction towards x direction. x could be any '
        "following 8 directions ['north', 'northeast', 'east', 'southeast', 'south', 'southwest', 'west', "
        "'northwest']\n"
        '"stop()": indicates the navigation is finished.\n'
        "\n[Observations and actions sequence]\n"
        "O_1: No landmarks nearby; \nA_1: turn_direction(north)\nO_2: No landmarks nearby; \nA_2: \n"
        "\n\n[Output]\n{\n"
        '  "current observation": latest observation from the observation sequence,\n'
        '  "current instruction": analyze the full instruction and identify the sentence to be executed,\n'
        '  "action": the action to be taken chosen from the action space,\n'
        "}\n"
    )
    assert info["expert_response"] == (
        '{\n  "current observation": "No landmarks nearby; ",\n'
        '  "current instruction": "Move forward until you reach destination where The destination Bluebird Books '
        'is on your right front.",\n  "action": "forward()",\n}'
    )
