"""TVR prompts and memory: the text the model reads, byte-identical for eval, SFT data and RL.

The system prompt and the per-turn user text are TVRBench's (``thor_view_env.SYSTEM_PROMPT``, asserted
there to be 942 characters, and ``build_concat_user_text``)::

    Your CURRENT observation:
    <image>
    TARGET viewpoint you must match:
    <image>
    Valid actions at this step: MoveAhead, RotateRight, ..., Stop

Memory modes (the paper's two plus a window):

* ``va`` — visual-action memory: the full multi-turn chat (system + every past user turn with its images
  + every past answer). TVRBench's released eval/RL path.
* ``ao`` — action-only memory: one user turn per call with the current and target images and a text
  block of the last ``history_len`` actions (TVRBench's older per-step agent, ``history_len=5``).
* ``window`` — the VA chat, but only the last ``window`` turns keep their observation image; older
  turns keep their text (and answers) with ``[image omitted]`` in place of the picture.

``target_once`` sends the target image only in the first user turn (VA/window; AO always sends it,
since each AO call is a fresh conversation). Images arrive already badged by the env.

``frames`` says how the current and target frames of a turn travel: ``separate`` (TVRBench's two images,
the default) or ``joined`` — one image, the current frame on the left and the target on the right
(``join_frames``), with the user text's two image lines merged into one (``JOINED_LINE``); in every memory
mode but with ``target_once`` (a ``window`` chat omits an old turn's whole joined image). A variant of
ours for the built-in agents, not TVRBench's format: in a small vision tower the two frames of a joined
image meet in its full-attention blocks, while two separate images meet only in the language model
(docs/training.md, "One image or two?").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spatialrl.conversation import Conversation, Message
from spatialrl.envs.tvr.lattice import ACTIONS

IMAGE = "<image>"
OMITTED = "[image omitted]"
MEMORY_MODES = ("va", "ao", "window")
FRAME_LAYOUTS = ("separate", "joined")
JOINED_LINE = "Your CURRENT observation (left) and the TARGET viewpoint you must match (right):"

SYSTEM_PROMPT = (
    "You are a navigation agent in an indoor environment. "
    "Your task is to navigate and adjust your viewpoint to PRECISELY match a target image. "
    "You must match the exact position, orientation, and camera angle "
    "— the goal is for your observation to look identical to the target.\n\n"
    "Available actions:\n"
    "- MoveAhead: Move forward 0.25m\n"
    "- MoveBack: Move backward 0.25m\n"
    "- MoveLeft: Move left 0.25m\n"
    "- MoveRight: Move right 0.25m\n"
    "- RotateRight: Rotate clockwise 45°\n"
    "- RotateLeft: Rotate counter-clockwise 45°\n"
    "- LookUp: Tilt camera up 30°\n"
    "- LookDown: Tilt camera down 30°\n"
    "- Stop: Declare that you have reached the target viewpoint\n\n"
    "You will receive:\n"
    "1. Your current observation\n"
    "2. Your recent action history (if available)\n"
    "3. The target viewpoint you need to match\n\n"
    "Use your action history to avoid repeating ineffective actions "
    "(e.g. if MoveAhead caused a collision, try a different direction).\n\n"
    "You MUST respond in exactly this format:\n"
    "Action: <action name>"
)
_FORMAT_LINE = "You MUST respond in exactly this format:\nAction: <action name>"
# CoT variant: same prompt, but the answer is a <think> block followed by the action line.
SYSTEM_PROMPT_COT = SYSTEM_PROMPT.replace(
    _FORMAT_LINE,
    "First reason step by step inside <think>...</think>, then give your answer.\n"
    "You MUST respond in exactly this format:\n<think>your reasoning</think>\nAction: <action name>",
)

_FAILURE_NOTES = {
    "unparsable": "[WARNING] No action could be read from the answer; the step was spent",
    "blocked": "[WARNING] Action failed: the way is blocked, pose unchanged",
    "tilt_limit": "[WARNING] Action failed: the camera cannot tilt further, pose unchanged",
    "not_allowed": "[WARNING] Action failed: not allowed in this task, pose unchanged",
}


def system_prompt(cot: bool = False) -> str:
    return SYSTEM_PROMPT_COT if cot else SYSTEM_PROMPT


def user_text(valid_actions: list[str], include_target: bool = True, history: list[str] | None = None,
              joined: bool = False) -> str:
    """One user turn as text with ``<image>`` placeholders (TVRBench's concat text when
    ``include_target`` and no ``history``; ``joined``: one placeholder for both frames)."""
    if joined:
        if not include_target:
            raise ValueError("a joined turn holds the target: include_target must be true")
        lines = [JOINED_LINE, IMAGE]
    else:
        lines = ["Your CURRENT observation:", IMAGE]
        if include_target:
            lines += ["TARGET viewpoint you must match:", IMAGE]
    if history:
        lines += ["Your recent actions:", *history]
    lines.append(f"Valid actions at this step: {', '.join(valid_actions)}")
    return "\n".join(lines)


def to_content(text: str, images: list[np.ndarray | None]) -> list[dict[str, Any]]:
    """Split ``text`` at its ``<image>`` placeholders into chat parts; a ``None`` image becomes the
    text ``[image omitted]``. Joining the parts with images as ``<image>`` gives ``text`` back."""
    pieces = text.split(IMAGE)
    if len(pieces) - 1 != len(images):
        raise ValueError(f"text has {len(pieces) - 1} image placeholders but {len(images)} images were given")
    parts: list[dict[str, Any]] = []
    buf = pieces[0]
    for image, piece in zip(images, pieces[1:], strict=True):
        if image is None:
            buf += OMITTED + piece
            continue
        if buf:
            parts.append({"type": "text", "text": buf})
        parts.append({"type": "image", "image": image})
        buf = piece
    if buf:
        parts.append({"type": "text", "text": buf})
    return parts


def check_frames(frames: str, memory: str, target_once: bool) -> None:
    """ValueError unless ``frames`` is a layout this memory can send (the one home of the rule)."""
    if frames not in FRAME_LAYOUTS:
        raise ValueError(f"unknown TVR frames layout {frames!r}; expected one of {', '.join(FRAME_LAYOUTS)}")
    if frames == "joined" and target_once:
        # target_once drops the target from every turn but the first: a joined image holds it in each
        raise ValueError(f"frames=joined needs target_once=false (every joined turn holds the target; got "
                         f"memory={memory!r}, target_once=True)")


def join_frames(current: np.ndarray, target: np.ndarray) -> np.ndarray:
    """One ``(H, 2W, 3)`` image: ``current`` on the left, ``target`` on the right (same size, as the env
    renders them)."""
    if current.shape != target.shape:
        raise ValueError(f"joined frames must have one size, got current {current.shape} and target {target.shape}")
    return np.concatenate([current, target], axis=1)


def history_line(step_number: int, record: dict[str, Any]) -> str:
    """One AO history entry from an env step record: ``Step 3: MoveAhead`` plus a warning on failure."""
    action = record.get("action") or "(no valid action)"
    line = f"Step {step_number}: {action}"
    note = _FAILURE_NOTES.get(record.get("failure") or "")
    return f"{line} {note}" if note else line


@dataclass
class _Turn:
    current: np.ndarray
    valid_actions: list[str]
    response: str | None = None
    record: dict[str, Any] = field(default_factory=dict)


class TVRPrompter:
    """One episode's prompt memory (the ``Prompter`` contract of ``envs/registry.py``)."""

    def __init__(self, memory: str = "va", cot: bool = False, target_once: bool = False,
                 history_len: int = 5, window: int = 4, frames: str = "separate"):
        if memory not in MEMORY_MODES:
            raise ValueError(f"unknown TVR memory mode {memory!r}; expected one of {', '.join(MEMORY_MODES)}")
        check_frames(frames, memory, target_once)
        if history_len < 0:
            raise ValueError(f"history_len must be >= 0, got {history_len}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.memory, self.cot, self.target_once = memory, cot, target_once
        self.history_len, self.window, self.frames = history_len, window, frames
        self.target: np.ndarray | None = None
        self.turns: list[_Turn] = []

    def reset(self, obs: np.ndarray, info: dict[str, Any]) -> None:
        self.target = info["target_image"]
        self.turns = [_Turn(obs, list(info["valid_actions"]))]

    def update(self, response: str, obs: np.ndarray, info: dict[str, Any]) -> None:
        if not self.turns:
            raise RuntimeError("TVRPrompter.update called before reset")
        self.turns[-1].response = response
        self.turns[-1].record = dict(info.get("record", {}))
        self.turns.append(_Turn(obs, list(info["valid_actions"])))

    def messages(self) -> Conversation:
        if not self.turns:
            raise RuntimeError("TVRPrompter.messages called before reset")
        system: Message = {"role": "system", "content": [{"type": "text", "text": system_prompt(self.cot)}]}
        if self.memory == "ao":
            return [system, self._ao_user()]
        conv: Conversation = [system]
        last = len(self.turns) - 1
        for i, turn in enumerate(self.turns):
            keep_image = self.memory == "va" or i > last - self.window
            if self.frames == "joined":  # one image per turn (window: an old turn's whole image omitted)
                text = user_text(turn.valid_actions, joined=True)
                images = [join_frames(turn.current, self.target) if keep_image else None]
            else:
                with_target = i == 0 if self.target_once else True
                images = [turn.current if keep_image else None]
                if with_target:
                    # the target travels with the kept images: in the newest turn always, in old ones if kept
                    keep_target = keep_image or (self.target_once and i == 0)
                    images.append(self.target if keep_target else None)
                text = user_text(turn.valid_actions, include_target=with_target)
            conv.append({"role": "user", "content": to_content(text, images)})
            if turn.response is not None:
                conv.append({"role": "assistant", "content": [{"type": "text", "text": turn.response}]})
        return conv

    def _ao_user(self) -> Message:
        done = self.turns[:-1]
        recent = done[-self.history_len:] if self.history_len else []
        offset = len(done) - len(recent)
        history = [history_line(offset + k + 1, t.record) for k, t in enumerate(recent)]
        turn = self.turns[-1]
        if self.frames == "joined":
            text = user_text(turn.valid_actions, history=history, joined=True)
            return {"role": "user", "content": to_content(text, [join_frames(turn.current, self.target)])}
        text = user_text(turn.valid_actions, include_target=True, history=history)
        return {"role": "user", "content": to_content(text, [turn.current, self.target])}


def tokenizer_corpus() -> list[str]:
    """Representative TVR prompt and answer texts (to train the built-in model's tokenizer)."""
    texts = [SYSTEM_PROMPT, SYSTEM_PROMPT_COT]
    valid_lists = [list(ACTIONS), [a for a in ACTIONS if a not in ("MoveAhead", "LookUp")],
                   [a for a in ACTIONS if a not in ("MoveLeft", "MoveRight", "LookDown")],
                   ["RotateRight", "RotateLeft", "LookUp", "LookDown", "Stop"], ["MoveAhead", "MoveBack", "Stop"]]
    for valid in valid_lists:
        texts.append(user_text(valid))
        texts.append(user_text(valid, include_target=False))
    records = [{"action": a, "failure": None} for a in ACTIONS[:-1]]
    records += [{"action": None, "failure": "unparsable"}, {"action": "MoveAhead", "failure": "blocked"},
                {"action": "LookUp", "failure": "tilt_limit"}, {"action": "MoveLeft", "failure": "not_allowed"}]
    texts.append(user_text(list(ACTIONS), history=[history_line(i + 1, r) for i, r in enumerate(records)]))
    texts += [f"Action: {a}" for a in ACTIONS]
    texts += [f"<think>The target view is to my {side}; I should turn.</think>\nAction: {a}"
              for side, a in (("right", "RotateRight"), ("left", "RotateLeft"))]
    texts.append("<think>The views match exactly.</think>\nAction: Stop")
    return texts
