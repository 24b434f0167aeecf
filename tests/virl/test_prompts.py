"""Prompt text byte for byte (the seed's §8.3 example), history lines, retry turns, the expert answer."""

from __future__ import annotations

import numpy as np

from spatialrl.envs.virl.prompts import (
    PROMPT_L,
    VirlPrompter,
    build_prompt,
    expert_response,
    obs_act_sequence,
    tokenizer_corpus,
)
from spatialrl.envs.virl.verify import read_field

SEED_INSTRUCTION = (
    "1. First, turn left to face northeast.\n"
    "2. Move forward until you reach next intersection where Battery Playscape is on your right behind.\n"
    "3. Turn right to face north.\n"
    "4. Move forward until you reach next intersection.\n"
    "5. Turn slightly left to face northwest.\n"
    "6. Move forward until you reach next intersection.\n"
    "7. Turn left to face north.\n"
    "8. Move forward until you reach next intersection.\n"
    "9. Turn right to face southeast.\n"
    "10. Move forward until you reach next intersection.\n"
    "11. Turn right to face south.\n"
    "12. Move forward until you reach destination where The destination Cafe De Novo is on your right.\n"
)
F = "No landmarks nearby; "
SEED_HISTORY = [
    (F, "turn_direction(northeast)"), (F, "forward()"), (F, "forward()"),
    ("Battery Playscape is on your right behind; You observe an intersection", "turn_direction(north)"),
    ("No landmark nearby; You observe an intersection", "turn_direction(northwest)"),
    (F, "forward()"), (F, "forward()"), (F, "forward()"),
    ("No landmark nearby; You observe an intersection", "turn_direction(north)"),
    (F, "forward()"), (F, "forward()"), (F, "forward()"),
]
CURRENT = "No landmark nearby; You observe an intersection"

# The seed's "LLM Input Example" (section 8.3, V-IRL-VL), with the reference's exact whitespace.
SEED_VL_PROMPT = """
[Task Description]
You are an expert in navigation. You will receive a sequence of instructions to follow while observing your surrounding stree tviews. You
are also provided with your observation and action history in text. Your goal is to first analyze the instruction and identify the next sentence to be executed. \nThen, you need to provide the action to be taken based on the current observation and instruction.

[Instruction]
1. First, turn left to face northeast.
2. Move forward until you reach next intersection where Battery Playscape is on your right behind.
3. Turn right to face north.
4. Move forward until you reach next intersection.
5. Turn slightly left to face northwest.
6. Move forward until you reach next intersection.
7. Turn left to face north.
8. Move forward until you reach next intersection.
9. Turn right to face southeast.
10. Move forward until you reach next intersection.
11. Turn right to face south.
12. Move forward until you reach destination where The destination Cafe De Novo is on your right.


[Observation format]
You observe a 2x2 grid of streetview images with the following headings:
[front, right
 back, left]
You need to identify if any of the landmarks in the instruction are visible in the street view grid.

[Action space]
"forward()": indicates moving forward one step
"turn_direction(x)": indicates adjust the ego agent direction towards x direction. x could be any following 8 directions ['north', 'northeast', 'east', 'southeast', 'south', 'southwest', 'west', 'northwest']
"stop()": indicates the navigation is finished.

[Observations and actions sequence]
O_1: No landmarks nearby; \nA_1: turn_direction(northeast)
O_2: No landmarks nearby; \nA_2: forward()
O_3: No landmarks nearby; \nA_3: forward()
O_4: Battery Playscape is on your right behind; You observe an intersection
A_4: turn_direction(north)
O_5: No landmark nearby; You observe an intersection
A_5: turn_direction(northwest)
O_6: No landmarks nearby; \nA_6: forward()
O_7: No landmarks nearby; \nA_7: forward()
O_8: No landmarks nearby; \nA_8: forward()
O_9: No landmark nearby; You observe an intersection
A_9: turn_direction(north)
O_10: No landmarks nearby; \nA_10: forward()
O_11: No landmarks nearby; \nA_11: forward()
O_12: No landmarks nearby; \nA_12: forward()
O_13: You observe an image of 4 views; You observe an intersection
A_13: \n

[Output]
{
  "current observation": latest observation from the street view grid,
  "current instruction": analyze the full instruction and identify the sentence to be executed,
  "action": the action to be taken chosen from the action space,
}
"""


def _seed_history(vision: bool) -> str:
    obs = [o for o, _ in SEED_HISTORY] + [CURRENT]
    return obs_act_sequence(obs, [a for _, a in SEED_HISTORY], vision=vision)


def test_vl_prompt_is_the_seed_example():
    assert build_prompt(SEED_INSTRUCTION, _seed_history(True), absolute=True, vision=True) == SEED_VL_PROMPT


def test_l_prompt_variant():
    text = build_prompt(SEED_INSTRUCTION, _seed_history(False), absolute=False, vision=False)
    assert "[Observation format]" not in text
    assert "You will receive a sequence of instructions to follow. You\nare also provided" in text
    assert '"current observation": latest observation from the observation sequence,\n' in text
    assert "O_13: No landmark nearby; You observe an intersection\nA_13: \n\n\n[Output]" in text
    assert ("x could be any following ['left', 'right', 'slightly left', 'slightly right']\n"
            '"stop()": indicates the navigation is finished.\n\n[Observations') in text
    assert text.startswith("\n[Task Description]\n") and text.endswith(",\n}\n")
    sections = [line for line in text.splitlines() if line in ("[Task Description]", "[Instruction]",
                                                                "[Action space]", "[Observations and actions sequence]",
                                                                "[Output]")]
    assert len(sections) == 5 and PROMPT_L.count("\n[") == 5


def test_vl_current_line_without_intersection():
    assert obs_act_sequence([F], [], vision=True) == "O_1: You observe an image of 4 views; \nA_1: \n"
    assert obs_act_sequence([F], [], vision=False) == "O_1: No landmarks nearby; \nA_1: \n"


def test_expert_response_is_read_by_the_regex_fallback():
    text = expert_response(CURRENT, "Turn right to face southeast.", "turn_direction(southeast)")
    assert text == (
        '{\n  "current observation": "No landmark nearby; You observe an intersection",\n'
        '  "current instruction": "Turn right to face southeast.",\n  "action": "turn_direction(southeast)",\n}'
    )
    assert read_field(text, "action") == "turn_direction(southeast)"
    assert read_field(text, "current observation") == CURRENT
    assert read_field('{"action": "stop()"}', "action") == "stop()"  # valid JSON path
    assert read_field("I would go forward()", "action") == "None"


def _info(action_space="absolute", verify=None, seq="O_1: x\nA_1: \n"):
    return {"global_instruction": "1. Turn left to face north.\n", "obs_act_seq": seq, "action_space": action_space,
            "Verify Info": verify}


def test_prompter_retry_turns_and_restart():
    img = np.zeros((8, 8, 3), np.uint8)
    p = VirlPrompter(vision=True)
    p.reset(img, _info())
    first = p.messages()
    assert len(first) == 1 and [c["type"] for c in first[0]["content"]] == ["image", "text"]
    wrong = "you make incorrect action. Please avoid this action and try again in the same format:\n[Output]\n{{}}."
    p.update("answer 1", img, _info(verify=wrong))
    msgs = p.messages()
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[1]["content"] == [{"type": "text", "text": "answer 1"}]
    assert msgs[2]["content"] == [{"type": "text", "text": "You failed this trial because " + wrong}]
    p.update("answer 2", img, _info(verify="Correct action.", seq="O_1: x\nA_1: forward()\nO_2: y\nA_2: \n"))
    msgs = p.messages()
    assert len(msgs) == 1 and "O_2: y\nA_2: \n" in msgs[0]["content"][1]["text"]
    lang = VirlPrompter(vision=False)
    lang.reset("No landmarks nearby; ", _info(action_space="relative"))
    content = lang.messages()[0]["content"]
    assert [c["type"] for c in content] == ["text"] and "'slightly left'" in content[0]["text"]


def test_tokenizer_corpus_is_deterministic_and_covers_both_prompts():
    a, b = tokenizer_corpus(), tokenizer_corpus()
    assert a == b and len(a) > 40
    assert any("[Observation format]" in t for t in a) and any("observation sequence" in t for t in a)
    assert any(t.startswith("You failed this trial because ") for t in a)
