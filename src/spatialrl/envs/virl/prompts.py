"""The V-IRL prompts, byte for byte: V-IRL-VL (seed §8.3) and V-IRL-L, the history lines, the retry turns
and the expert's answer. Eval, SFT data and RL all build prompts through :class:`VirlPrompter`, so they
are identical everywhere.

Kept as in the reference on purpose: the "stree tviews" typo, the space after "executed.", the
``[Output]`` block between literal braces with a trailing comma, the retry message's literal ``{{ }}``
(see :mod:`~spatialrl.envs.virl.verify`), and "streetview grid" vs "street view grid".
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from spatialrl.conversation import Conversation
from spatialrl.envs.virl.data import Milestone
from spatialrl.envs.virl.geo import COMPASS_WORDS
from spatialrl.envs.virl.rail import INTERSECTION_OBS, RELATIVE_WORDS, plan_instructions
from spatialrl.envs.virl.verify import (
    MSG_AT_INTERSECTION,
    MSG_CORRECT,
    MSG_NOT_AT_INTERSECTION,
    MSG_WRONG_ACTION,
)

PROMPT_VL = (
    "\n[Task Description]\n"
    "You are an expert in navigation. You will receive a sequence of instructions to follow while observing "
    "your surrounding stree tviews. You\n"
    "are also provided with your observation and action history in text. Your goal is to first analyze the "
    "instruction and identify the next sentence to be executed. \n"
    "Then, you need to provide the action to be taken based on the current observation and instruction.\n"
    "\n[Instruction]\n{instruction}\n"
    "\n[Observation format]\n"
    "You observe a 2x2 grid of streetview images with the following headings:\n"
    "[front, right\n back, left]\n"
    "You need to identify if any of the landmarks in the instruction are visible in the street view grid.\n"
    "\n[Action space]\n{action_space}\n"
    "\n[Observations and actions sequence]\n{obs_act_seq}\n"
    "\n[Output]\n{{\n"
    '  "current observation": latest observation from the street view grid,\n'
    '  "current instruction": analyze the full instruction and identify the sentence to be executed,\n'
    '  "action": the action to be taken chosen from the action space,\n'
    "}}\n"
)

PROMPT_L = (
    "\n[Task Description]\n"
    "You are an expert in navigation. You will receive a sequence of instructions to follow. You\n"
    "are also provided with your observation and action history in text. Your goal is to first analyze the "
    "instruction and identify the next sentence to be executed. \n"
    "Then, you need to provide the action to be taken based on the current observation and instruction.\n"
    "\n[Instruction]\n{instruction}\n"
    "\n[Action space]\n{action_space}\n"
    "\n[Observations and actions sequence]\n{obs_act_seq}\n"
    "\n[Output]\n{{\n"
    '  "current observation": latest observation from the observation sequence,\n'
    '  "current instruction": analyze the full instruction and identify the sentence to be executed,\n'
    '  "action": the action to be taken chosen from the action space,\n'
    "}}\n"
)

ACTION_SPACE_ABSOLUTE = (
    '"forward()": indicates moving forward one step\n'
    '"turn_direction(x)": indicates adjust the ego agent direction towards x direction. x could be any '
    "following 8 directions ['north', 'northeast', 'east', 'southeast', 'south', 'southwest', 'west', "
    "'northwest']\n"
    '"stop()": indicates the navigation is finished.'
)
ACTION_SPACE_RELATIVE = (
    '"forward()": indicates moving forward one step\n'
    '"turn_direction(x)": indicates adjust the ego agent direction towards x direction. x could be any '
    "following ['left', 'right', 'slightly left', 'slightly right']\n"
    '"stop()": indicates the navigation is finished.'
)

ABSOLUTE_ACTIONS = ("forward()",) + tuple(f"turn_direction({w})" for w in COMPASS_WORDS) + ("stop()",)
RELATIVE_ACTIONS = ("forward()",) + tuple(f"turn_direction({w})" for w in RELATIVE_WORDS) + ("stop()",)

# The expert (SFT) answer: the reference's ResponseVIRL template without its leading blank line, i.e.
# the seed's "LLM Output Example". Trailing comma included, so json.loads fails and the regex reads it.
RESPONSE = '{{\n  "current observation": "{observation}",\n  "current instruction": "{instruction}",\n  "action": "{action}",\n}}'
RETRY_PREFIX = "You failed this trial because "


def action_space_text(absolute: bool) -> str:
    return ACTION_SPACE_ABSOLUTE if absolute else ACTION_SPACE_RELATIVE


def action_list(absolute: bool) -> tuple[str, ...]:
    return ABSOLUTE_ACTIONS if absolute else RELATIVE_ACTIONS


def obs_act_sequence(observations: list[str], actions: list[str], vision: bool,
                     intersection_in_text: bool = True) -> str:
    """``O_i``/``A_i`` history lines; past observations are oracle text even in VL mode.

    The current line (one more observation than actions) is the oracle text in L mode and
    ``"You observe an image of 4 views; <intersection or nothing>"`` in VL mode, then an empty ``A_n``.
    With ``intersection_in_text=False`` (VL only: the vision-required variant) the current line is
    ``"You observe an image of 4 views; "`` everywhere, the reference's own line at non-intersection
    points, so whether the agent stands at an intersection must be read from the grid. Past lines stay
    oracle text: they are what the agent already answered, and say nothing about the current point.
    """
    lines = []
    for i, (obs, act) in enumerate(zip(observations, actions, strict=False)):
        lines.append(f"O_{i + 1}: {obs}\nA_{i + 1}: {act}\n")
    if len(observations) > len(actions):
        n = len(observations)
        if vision:
            said = intersection_in_text and INTERSECTION_OBS in observations[-1]
            inter = INTERSECTION_OBS if said else ""
            lines.append(f"O_{n}: You observe an image of 4 views; {inter}\nA_{n}: \n")
        else:
            lines.append(f"O_{n}: {observations[-1]}\nA_{n}: \n")
    return "".join(lines)


def build_prompt(instruction: str, obs_act_seq: str, absolute: bool, vision: bool) -> str:
    template = PROMPT_VL if vision else PROMPT_L
    return template.format(instruction=instruction, action_space=action_space_text(absolute), obs_act_seq=obs_act_seq)


def expert_response(observation: str, instruction: str, action: str) -> str:
    return RESPONSE.format(observation=observation, instruction=instruction, action=action)


class VirlPrompter:
    """One episode's conversation with the reference's sequential-revision logic.

    A fresh single user turn (image first in VL mode, then the prompt) after reset and after every
    correct action; after a wrong one, the model's answer and ``"You failed this trial because " +
    Verify Info`` are appended to the same conversation.
    """

    def __init__(self, vision: bool = True):
        self.vision = vision
        self._messages: Conversation = []

    def _fresh(self, obs: Any, info: dict[str, Any]) -> Conversation:
        text = build_prompt(info["global_instruction"], info["obs_act_seq"], info["action_space"] == "absolute",
                            self.vision)
        content: list[dict[str, Any]] = []
        if self.vision:
            if not isinstance(obs, np.ndarray):
                raise ValueError("VL prompts need the env's grid image as the observation (mode='vl')")
            content.append({"type": "image", "image": obs})
        content.append({"type": "text", "text": text})
        return [{"role": "user", "content": content}]

    def reset(self, obs: Any, info: dict[str, Any]) -> None:
        self._messages = self._fresh(obs, info)

    def update(self, response: str, obs: Any, info: dict[str, Any]) -> None:
        verdict = info.get("Verify Info")
        if verdict is None or MSG_CORRECT in verdict:
            self._messages = self._fresh(obs, info)
        else:
            self._messages = self._messages + [
                {"role": "assistant", "content": [{"type": "text", "text": response}]},
                {"role": "user", "content": [{"type": "text", "text": RETRY_PREFIX + verdict}]},
            ]

    def messages(self) -> Conversation:
        return list(self._messages)


def tokenizer_corpus() -> list[str]:
    """Representative prompts, histories, answers and retry turns (deterministic, no data files), for
    training the built-in model's tokenizer."""
    rng = random.Random(0)
    names = ["Cafe De Novo", "Battery Playscape", "Joe's Pizza", "Grand Pharmacy", "Hotel Lumen", "Bank of Ash",
             "Bluebird Books", "Pier 17 Market", "Saint Mark Church", "Union Deli", "Red Lantern Bar", "City Museum"]
    spatial = ["front", "right front", "right", "right behind", "behind", "left behind", "left", "left front"]
    texts: list[str] = []
    for k in range(24):
        n_milestones = 1 + k % 6
        milestones = []
        for i in range(n_milestones):
            deg = rng.randint(0, 359)
            word = COMPASS_WORDS[int((deg % 360) / 45 + 0.5) % 8]
            if i == n_milestones - 1:
                landmark = f"The destination {rng.choice(names)} is on your {rng.choice(spatial)}"
            elif rng.random() < 0.5:
                landmark = "No landmark nearby"
            else:
                landmark = f"{rng.choice(names)} is on your {rng.choice(spatial)}"
            milestones.append(Milestone(deg, word, landmark, {}))
        plan = plan_instructions(milestones, rng.randint(0, 359), wrap=bool(k % 2))
        absolute = k % 3 != 2
        acts = plan.absolute_actions if absolute else plan.relative_actions
        observations, actions = [], []
        for idx in range(len(milestones)):
            for _ in range(rng.randint(0, 3) if idx else 0):
                observations.append("No landmarks nearby; ")
                actions.append("forward()")
            obs = f"{plan.landmarks[idx]}; {INTERSECTION_OBS if idx else ''}"
            observations.append(obs)
            actions.append(acts[idx])
        cut = rng.randint(1, len(observations))
        history = obs_act_sequence(observations[:cut], actions[: cut - 1], vision=bool(k % 2))
        texts.append(build_prompt(plan.text, history, absolute, vision=bool(k % 2)))
        texts.append(expert_response(observations[cut - 1], plan.sentences[min(cut, len(plan.sentences) - 1)],
                                     actions[cut - 1]))
    for msg in (MSG_WRONG_ACTION, MSG_NOT_AT_INTERSECTION, MSG_AT_INTERSECTION):
        texts.append(RETRY_PREFIX + msg + ".")
    texts.extend(ABSOLUTE_ACTIONS + RELATIVE_ACTIONS)
    return texts
