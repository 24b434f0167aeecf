"""TVR visual pretraining data from the simulator's free labels (issue 19, lever 3).

The shipped TVR models were blind: swapping their images moved the action distribution by < 0.01. Before
a from-scratch VLM can learn *where to go* it has to learn to *compare two frames*. The simulator labels
that for free: any two lattice poses of a scene, rendered, come with the exact relation between them.
``spatialrl tvr pretrain-data`` writes such pairs as an ordinary SFT dataset (``spatialrl-sft/1``, the
folder ``spatialrl data sft`` writes), so ``spatialrl train sft`` (both data engines) and ``spatialrl
data merge`` take it unchanged, and a model pretrained on it starts TVR SFT with the same chat layout.

Sample kinds (each one chat: system prompt, one user turn with two frames, one short answer):

* ``same_view`` — "is the TARGET the same viewpoint as the CURRENT one?" → ``yes`` / ``no``. Half the
  pairs are ``yes`` (the same pose rendered twice); of the ``no`` pairs half are *one action away* (one
  rotation, tilt or move of the lattice: the hard negatives, the differences TVR's last steps hinge on),
  the rest a uniformly random other pose of the same scene.
* ``which_action`` — the TARGET pose is one valid action from the CURRENT pose → ``Action: <name>`` in
  TVR's answer format (the expert's ``expert_response``). At distance one the action is unique, so this is
  exactly the oracle's label of a TVR state one step from its target. The eight non-Stop actions are
  balanced; the pose is drawn uniformly among the scene's poses where that action succeeds.

The layout is TVR's (``prompts.py``): the user text starts with TVR's image block (``Your CURRENT
observation:`` / ``TARGET viewpoint you must match:``, images as content parts), frames carry the env's
``CURRENT`` / ``TARGET`` badges (``badges``), the system prompt opens with TVR's sentence and
``which_action`` lists the actions with TVR's own descriptions. Frames come from the env's render service
(``scenes.render_service``: same renderer, size, badge and pixels as ``TVREnv``), every frame of a chunk in
one batched render.

Scenes: those of the given bench split's tasks, checked against the bench's house fingerprints; a split
that shares a scene with ``eval`` (``eval`` itself, the diagnostics) is refused, so pretraining never sees
an evaluation house. Samples are planned up front from ``seed`` alone (kinds, classes, scenes, poses) and
written grouped by scene (each house is built and uploaded once; the trainer shuffles anyway).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spatialrl.envs.pretrain_data import known_options
from spatialrl.envs.pretrain_data import parse_kinds as parse_any_kinds
from spatialrl.envs.tvr.episode import CANDIDATE_RESPONSES, TaskPool
from spatialrl.envs.tvr.lattice import ACTIONS, STOP, Lattice, Pose
from spatialrl.envs.tvr.prompts import SYSTEM_PROMPT, to_content
from spatialrl.envs.tvr.scenes import render_service, scene_lattice
from spatialrl.envs.tvr.tasks import open_bench
from spatialrl.errors import DataError

KINDS = ("same_view", "which_action")
PAIR_ACTIONS: tuple[str, ...] = tuple(a for a in ACTIONS if a != STOP)  # what separates two poses one step apart
ANSWERS = {a: r for a, r in zip(ACTIONS, CANDIDATE_RESPONSES, strict=True)}  # "Action: X", TVR's answer format
YES, NO = "yes", "no"
# same_view classes: equal poses, one lattice action apart, a random other pose of the scene
SAME, NEAR, FAR = "same", "one_action", "random"

# The image options TVR's env takes (and their defaults); nothing else changes a pretraining frame.
# cache_mb defaults to 0: random poses rarely repeat, so a frame cache would only cost a copy per frame.
DEFAULT_OPTIONS: dict[str, Any] = {"width": 640, "height": 360, "badges": True, "cache_mb": 0}
_MINIMUM = {"width": 16, "height": 16, "cache_mb": 0}
CHUNK = 64  # pairs rendered per batched call (up to 128 frames)

_OPENING = SYSTEM_PROMPT.split(". ", 1)[0] + ". "  # "You are a navigation agent in an indoor environment. "
_ACTION_LINES = "\n".join(line for line in SYSTEM_PROMPT.splitlines()
                          if line.startswith("- ") and not line.startswith(f"- {STOP}:"))
SYSTEM = {
    "same_view": (_OPENING + "Decide whether the TARGET viewpoint is exactly your CURRENT viewpoint: the same "
                  "position, orientation, and camera angle.\n\n"
                  f"You MUST respond with exactly one word: {YES} or {NO}"),
    "which_action": (_OPENING + "The TARGET viewpoint is exactly one action away from your CURRENT "
                     "observation.\n\nAvailable actions:\n" + _ACTION_LINES + "\n\n"
                     "You MUST respond in exactly this format:\nAction: <action name>"),
}
# TVR's image block (prompts.user_text, target included), then the kind's fixed question
IMAGE_BLOCK = "Your CURRENT observation:\n<image>\nTARGET viewpoint you must match:\n<image>\n"
QUESTION = {
    "same_view": "Is the TARGET viewpoint the same as your CURRENT view? Answer yes or no.",
    "which_action": "Which action takes your CURRENT view to the TARGET viewpoint?",
}


@dataclass(frozen=True)
class Pair:
    """One planned sample: two poses of one scene, what relates them and the answer."""

    index: int
    kind: str
    cls: str  # same_view: same | one_action | random; which_action: the action's name
    scene: str
    first: Pose
    second: Pose
    action: str | None  # the lattice action from first to second (None for same / random)

    @property
    def answer(self) -> str:
        if self.kind == "same_view":
            return YES if self.cls == SAME else NO
        return ANSWERS[self.action]

    @property
    def sample_id(self) -> str:
        return f"{self.kind}-{self.index:07d}"


# ------------------------------------------------------------------------------------------- options
def pretrain_options(sets: dict[str, Any] | None) -> dict[str, Any]:
    """The image options (``--set``) over their defaults; unknown keys and bad values are errors."""
    return known_options("tvr", sets, DEFAULT_OPTIONS, _MINIMUM, "the frame options of the TVR env")


def parse_kinds(value: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``"same_view,which_action"`` → the kinds, in :data:`KINDS` order, each once."""
    return parse_any_kinds(value, KINDS)


# ------------------------------------------------------------------------------------------- scenes
def split_scenes(bench_dir: str | Path, split: str) -> list[str]:
    """The scenes of ``split``'s tasks (sorted), after refusing a split that shares a scene with ``eval``.
    (Each house is checked against the bench's fingerprint when its samples are rendered.)"""
    bench = open_bench(bench_dir)
    scenes = sorted({t["scene"] for t in bench.tasks(split)})  # a missing or empty split is an error here
    eval_scenes = {e["scene"] for e in bench.scenes.get("eval", [])} if bench.has_scene_list() else set()
    if "eval" in bench.splits() and split != "eval":
        eval_scenes |= {t["scene"] for t in bench.tasks("eval")}
    shared = [s for s in scenes if s in eval_scenes or split == "eval"]
    if shared:
        raise DataError(f"{bench.root}: split {split!r} uses evaluation scenes ({', '.join(shared[:3])}"
                        f"{', ...' if len(shared) > 3 else ''}); pretraining data must come from houses never "
                        f"evaluated on: use --split sft or rl")
    return scenes


# ------------------------------------------------------------------------------------------- planning
def _counts(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` near-equal whole counts (the first ones get the remainder)."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _classes(kind: str, n: int) -> list[str]:
    """Balanced class labels of ``n`` pairs of ``kind`` (in a fixed order; shuffled by the caller)."""
    if kind == "same_view":
        n_yes, n_no = _counts(n, 2)
        n_near, n_far = _counts(n_no, 2)
        return [SAME] * n_yes + [NEAR] * n_near + [FAR] * n_far
    return [a for a, c in zip(PAIR_ACTIONS, _counts(n, len(PAIR_ACTIONS)), strict=True) for _ in range(c)]


def _valid_states(lattice: Lattice) -> dict[str, np.ndarray]:
    """For each non-Stop action, the dense state ids where it succeeds (its transition leaves the state:
    rotations always, looks within ±30°, moves into a reachable cell), from the oracle's table."""
    memo = lattice.derived.get("pretrain_valid")
    if memo is None:
        table = lattice.transition_table()
        here = np.arange(table.shape[0])[:, None]
        memo = lattice.derived["pretrain_valid"] = {
            a: np.flatnonzero(table[:, i] != here[:, 0]) for i, a in enumerate(ACTIONS[:-1])}
    return memo  # type: ignore[return-value]


def _one_action_apart(rng: np.random.Generator, scene: str, action: str) -> tuple[Pose, Pose]:
    lattice = scene_lattice(scene)
    states = _valid_states(lattice)[action]
    if states.size == 0:
        raise DataError(f"scene {scene}: no pose where {action} succeeds (a one-cell house?); "
                        "choose a bench split with larger scenes")
    first = lattice.pose_of(int(states[rng.integers(states.size)]))
    second, ok = lattice.step(first, action)
    assert ok, (scene, first, action)  # the table and the move rule are the same code
    return first, second


def plan_classes(scenes: list[str], pairs: int, seed: int, kinds: tuple[str, ...] = KINDS) -> list[tuple[str, str, str]]:
    """``(kind, class, scene)`` of every sample, from ``seed`` alone.

    ``pairs`` are split evenly over ``kinds``, classes are balanced within a kind, and scenes are dealt out
    evenly (each gets ``pairs / len(scenes)`` ± 1 samples), all in a seeded order."""
    if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 1:
        raise DataError(f"--pairs must be a positive integer, got {pairs!r}")
    if not scenes:
        raise DataError("no scenes to draw poses from")
    rng = np.random.default_rng([seed, 19])
    plan = [(kind, cls) for kind, n in zip(kinds, _counts(pairs, len(kinds)), strict=True) for cls in _classes(kind, n)]
    order = rng.permutation(len(plan))
    scene_of = rng.permutation(np.arange(len(plan)) % len(scenes))
    return [(*plan[k], scenes[s]) for k, s in zip(order.tolist(), scene_of.tolist(), strict=True)]


def scene_pairs(scene: str, items: list[tuple[int, str, str]], seed: int) -> list[Pair]:
    """The poses of one scene's samples ``(index, kind, class)``. Each scene draws from its own seeded
    stream, so a scene's poses do not depend on the others (and its house is built once, scene by scene)."""
    lattice = scene_lattice(scene)
    rng = np.random.default_rng([seed, 19, *(ord(c) for c in scene)])
    out = []
    for index, kind, cls in items:
        action = None
        if cls == SAME:
            first = second = lattice.pose_of(int(rng.integers(lattice.n_states)))
        elif cls == FAR:
            if lattice.n_states < 2:
                raise DataError(f"scene {scene}: a single pose, no random other pose to pair it with")
            a = int(rng.integers(lattice.n_states))
            b = int(rng.integers(lattice.n_states - 1))
            first, second = lattice.pose_of(a), lattice.pose_of(b + (b >= a))  # uniform over the others
        else:
            action = str(PAIR_ACTIONS[int(rng.integers(len(PAIR_ACTIONS)))]) if cls == NEAR else cls
            first, second = _one_action_apart(rng, scene, action)
        out.append(Pair(index, kind, cls, scene, first, second, action))
    return out


def _by_scene(classes: list[tuple[str, str, str]]) -> dict[str, list[tuple[int, str, str]]]:
    groups: dict[str, list[tuple[int, str, str]]] = {}
    for index, (kind, cls, scene) in enumerate(classes):
        groups.setdefault(scene, []).append((index, kind, cls))
    return dict(sorted(groups.items()))


def plan_pairs(scenes: list[str], pairs: int, seed: int, kinds: tuple[str, ...] = KINDS) -> list[Pair]:
    """Every sample with its poses (no rendering), in the order the dataset holds them: scene by scene."""
    groups = _by_scene(plan_classes(scenes, pairs, seed, kinds))
    return [p for scene, items in groups.items() for p in scene_pairs(scene, items, seed)]


# ------------------------------------------------------------------------------------------- samples
def conversation(kind: str, current: np.ndarray, target: np.ndarray, answer: str) -> list[dict[str, Any]]:
    """One sample's chat: system prompt, the two frames in TVR's image block with the question, the answer."""
    return [
        {"role": "system", "content": [{"type": "text", "text": SYSTEM[kind]}]},
        {"role": "user", "content": to_content(IMAGE_BLOCK + QUESTION[kind], [current, target])},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]


def pretrain_samples(bench_dir: str | Path, split: str, pairs: int, seed: int, kinds: tuple[str, ...] = KINDS,
                     options: dict[str, Any] | None = None, chunk: int = CHUNK) -> Iterator[dict[str, Any]]:
    """The dataset's samples (``{"id", "episode_id", "category", "turns", "messages", "pair"}``, images
    as uint8 arrays), scene by scene, each chunk of ``chunk`` pairs rendered in one batch."""
    opts = pretrain_options(options)
    groups = _by_scene(plan_classes(split_scenes(bench_dir, split), pairs, seed, kinds))
    service = render_service(int(opts["width"]), int(opts["height"]), float(opts["cache_mb"]))
    labels = ("CURRENT", "TARGET") if opts["badges"] else (None, None)
    pool = TaskPool(bench_dir, split, None, owner="tvr pretrain-data")
    for scene, items in groups.items():
        pool.check_scene(scene)  # here, not up front: each house is built once, when its turn comes
        todo = scene_pairs(scene, items, seed)
        for start in range(0, len(todo), chunk):
            part = todo[start:start + chunk]
            keys: dict[tuple[Pose, str | None], int] = {}  # each distinct frame of the chunk rendered once
            for p in part:
                for pose, label in ((p.first, labels[0]), (p.second, labels[1])):
                    keys.setdefault((pose, label), len(keys))
            frames = np.empty((len(keys), service.height, service.width, 3), np.uint8)
            views = [frames[i] for i in range(len(keys))]  # one object per frame: the image store sees repeats
            service.render_into([(scene, pose, label, views[i]) for (pose, label), i in keys.items()])
            for p in part:
                current, target = views[keys[(p.first, labels[0])]], views[keys[(p.second, labels[1])]]
                yield {"id": p.sample_id, "episode_id": p.sample_id, "category": f"{p.kind}-{p.cls}", "turns": [0],
                       "messages": conversation(p.kind, current, target, p.answer),
                       "pair": {"scene": scene, "first": list(p.first), "second": list(p.second), "action": p.action}}


def pretrain_meta(bench_dir: str | Path, split: str, pairs: int, seed: int, kinds: tuple[str, ...],
                  options: dict[str, Any], command: str | None = None) -> dict[str, Any]:
    """What ``meta.json`` says besides the counts (``io.write_sft_samples`` adds those)."""
    scenes = split_scenes(bench_dir, split)
    return {
        "task": "tvr",
        # TVR's option names, so a model trained on this records the frame settings it saw
        "options": {"data": str(bench_dir), "split": split, **pretrain_options(options)},
        "seed": seed,
        "samples_mode": "step",
        "cot": False,
        "pretrain": {"kinds": list(kinds), "pairs": pairs, "scenes": len(scenes),
                     "same_view": "half yes; of the no pairs half one lattice action apart, half a random pose",
                     "which_action": "the 8 non-Stop actions balanced; the answer is TVR's 'Action: <name>'"},
        "episodes": pairs,  # each sample is its own one-turn episode
        "episodes_dropped": [],
        "command": command,
    }
