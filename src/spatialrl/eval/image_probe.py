"""Does a model use its images? The image-sensitivity probe of issue 19 ("Built-in agents"), for TVR and
V-IRL. Both read the model's distribution over a state's candidate answers by teacher forcing, then
change one image of the last user turn and read it again.

TVR — on held-out states (the expert's, with some off-path noise) over the nine answers ``Action: X``
(softmax over each answer's summed log-probs), the *target* image is changed:

* ``target_swap_tv`` — mean total variation between the distribution with the state's own target and
  with another state's target: a model that matches views moves a lot (the issue asks ≥ 0.3); a model
  that reads only the text does not move (the 2026-12-02 models: ≤ 0.008);
* ``p_stop_at_target`` — mean P(Stop) when the target is replaced by the current view (it should be high);
* ``p_stop_elsewhere`` — mean P(Stop) on the states as they are, none of which is at the target (low);
* ``optimal_accuracy`` — share of states whose most likely answer is optimal (one of the oracle's ties):
  the per-step skill, the number the issue's siamese-CNN baseline reached 0.878 on in unseen houses;
  ``optimal_mass`` the mean probability on the optimal answers.

And the text's share, for the action-only prompt's history of recent actions: on the states that have one
(``history_states``), ``history_swap_tv`` is the mean total variation when that block is replaced by
another state's (``argmax_agreement_history_swap`` beside it). A model that copies its history moves a
lot here and little under the target swap (the 2026-12-05 AO models repeated their previous action 62-64%
of the time in closed loop where the oracle would 13-14%, docs/training.md).

The states come from ``spatialrl data sft`` machinery (same prompter and memory mode as evaluation), so
the probe sees exactly what the agent sees in ``spatialrl eval``.

V-IRL — on expert steps where the prompt text cannot decide the answer (:mod:`spatialrl.envs.virl.probe`:
forward vs stop on the last segment; with ``intersection_in_text=false`` also forward vs turn at every
intersection), the two candidates are the expert's full answer here and the one it would give had the
point been the other kind. They share a prefix (``{"current observation": "``) and part from each other
at one *decision token* (e.g. ``No`` vs ``The`` for forward vs the destination). The model is teacher
forced on the expert answer and its next-token distribution at that position is read — the first place
the answer depends on what the agent sees. (Whole-answer probabilities are no use here: two ~60-token
answers differ by tens of nats, so any model puts ≈ 1 on one of them and a swap moves nothing.) Then the
street-view grid is swapped for the grid of a step of the same segment where the other answer is right:

* ``grid_swap_tv`` — mean total variation of P(the two decision tokens), renormalised over the two, with
  the own grid vs the swapped one; a model that reads the grid moves, one that reads only the text cannot;
* ``vocab_swap_tv`` — the same over the whole vocabulary at that position;
* ``p_expert`` — mean P(expert's decision token) of the two, with the state's own grid (seeing: high);
* ``p_expert_swapped`` — the same with the contrast grid (seeing: low; the other answer is right there);
* ``by_kind`` — these per pair kind, e.g. ``forward|destination``, ``intersection|forward``.

:data:`PROBES` is the one place that maps a task to its probe; ``spatialrl model probe`` takes the task
from the model folder's ``spatialrl_model.json`` (``eval.task``) or ``--task``.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spatialrl.envs.tvr.env import CANDIDATE_RESPONSES
from spatialrl.errors import DataError
from spatialrl.models import answer_scores

STOP = CANDIDATE_RESPONSES.index("Action: Stop")


def probe_states(bench: str | Path, split: str, options: dict[str, Any], n: int, seed: int = 0) -> list[list[dict]]:
    """Up to ``n`` held-out conversations (the last user turn holding the current and the target image)
    at states that are not the target, from noisy-expert episodes of ``split``."""
    return labelled_probe_states(bench, split, options, n, seed)[0]


def labelled_probe_states(bench: str | Path, split: str, options: dict[str, Any], n: int,
                          seed: int = 0) -> tuple[list[list[dict]], list[frozenset[str]]]:
    """:func:`probe_states` and, for each, the set of its optimal answers (the oracle's, every tie). The
    episodes are built with all-optimal labels (the same noisy-expert episodes as plain labels: the labels
    only read the env info), and each state is taken once, in order, so the states drawn are the ones
    plain labels gave (earlier probe results stay comparable)."""
    from spatialrl.envs.registry import get_suite
    from spatialrl.train.data import SFTDataset, build_sft_dataset

    suite = get_suite("tvr")
    opts = {**suite.default_options, **options, "data": str(bench), "split": split, "memory": "ao"}
    with tempfile.TemporaryDirectory() as tmp:
        build_sft_dataset(suite, opts, Path(tmp) / "states", seed=seed, samples="step", progress=False,
                          expert_noise=0.3, labels="all_optimal")
        data = SFTDataset(Path(tmp) / "states")
        first: dict[tuple[str, int], int] = {}  # state (episode, turn) -> its first row
        sets: dict[tuple[str, int], set[str]] = {}
        for i, row in enumerate(data.rows):
            state = (row["episode_id"], row["turns"][0])
            first.setdefault(state, i)
            sets.setdefault(state, set()).add(row["messages"][-1]["content"][0]["text"])
        order = list(first)
        rng = np.random.default_rng(seed)
        keep = [order[i] for i in rng.permutation(len(order)).tolist() if sets[order[i]] != {"Action: Stop"}][:n]
        states = [data[first[k]]["messages"][:-1] for k in keep]
        optimal = [frozenset(sets[k]) for k in keep]
    if len(states) < 2:
        raise DataError(f"{bench}: split {split!r} gave {len(states)} probe states; need at least 2")
    return states, optimal


def _images(message: dict) -> list[int]:
    return [k for k, part in enumerate(message["content"]) if part["type"] == "image"]


def _joined(message: dict) -> bool:
    """Is this user turn's pair one side-by-side image (TVR ``frames=joined``)?"""
    from spatialrl.envs.tvr.prompts import JOINED_LINE

    return len(_images(message)) == 1 and any(p["type"] == "text" and JOINED_LINE in p["text"]
                                              for p in message["content"])


def with_target(conversation: list[dict], image: np.ndarray) -> list[dict]:
    """The conversation with the last user turn's target (its last image, or the right half of a joined
    one) replaced by ``image``."""
    from spatialrl.envs.tvr.prompts import join_frames

    out = [dict(m) for m in conversation]
    last = out[-1]
    slots = _images(last)
    content = list(last["content"])
    if _joined(last):
        current = np.asarray(current_and_target(conversation)[0])
        content[slots[0]] = {"type": "image", "image": join_frames(current, np.asarray(image))}
    elif len(slots) < 2:
        raise DataError("probe state: the last user turn has no current + target image pair")
    else:
        content[slots[-1]] = {"type": "image", "image": image}
    out[-1] = {**last, "content": content}
    return out


# the action-only prompt's history block (envs/tvr/prompts.py user_text): up to the valid-actions line
_HISTORY = re.compile(r"Your recent actions:\n.*?(?=Valid actions at this step: )", re.S)


def history_block(conversation: list[dict]) -> str | None:
    """The last user turn's "Your recent actions:" block (with its trailing newline), or None."""
    for part in conversation[-1]["content"]:
        if part["type"] == "text" and (m := _HISTORY.search(part["text"])):
            return m.group(0)
    return None


def with_history(conversation: list[dict], block: str) -> list[dict]:
    """The conversation with the last user turn's history block replaced by ``block``."""
    out = [dict(m) for m in conversation]
    last = out[-1]
    content = list(last["content"])
    for k, part in enumerate(content):
        if part["type"] == "text" and _HISTORY.search(part["text"]):
            content[k] = {**part, "text": _HISTORY.sub(lambda _: block, part["text"], count=1)}
            out[-1] = {**last, "content": content}
            return out
    raise DataError("probe state: the last user turn has no action history to replace")


def current_and_target(conversation: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """The last user turn's current and target frames: its first and last image, or the halves of a
    joined one."""
    slots = _images(conversation[-1])
    parts = conversation[-1]["content"]
    if _joined(conversation[-1]):
        image = np.asarray(parts[slots[0]]["image"])
        half = image.shape[1] // 2
        return image[:, :half], image[:, half:]
    return parts[slots[0]]["image"], parts[slots[-1]]["image"]


def answer_distributions(model: Any, processor: Any, conversations: list[list[dict]], batch_size: int = 16,
                         shared_prefix: bool = True) -> np.ndarray:
    """(n, 9) probabilities of the nine TVR answers ``Action: X`` (``models/answer_scores.py``)."""
    return answer_scores.answer_distributions(model, processor, conversations, CANDIDATE_RESPONSES,
                                              batch_size=batch_size, shared_prefix=shared_prefix)


def image_sensitivity(model: Any, processor: Any, states: list[list[dict]], seed: int = 0,
                      optimal: list[frozenset[str]] | None = None) -> dict[str, float]:
    """The probe's numbers (module docstring) on ``states``; with ``optimal`` (each state's optimal
    answers) also the per-step skill: ``optimal_accuracy`` (the greedy answer is optimal) and
    ``optimal_mass`` (mean probability on the optimal answers)."""
    rng = np.random.default_rng(seed)
    n = len(states)
    other = (np.arange(n) + rng.integers(1, n, size=n)) % n  # another state's target for each state
    base = answer_distributions(model, processor, states)
    swapped = answer_distributions(model, processor, [with_target(s, current_and_target(states[j])[1])
                                                      for s, j in zip(states, other, strict=True)])
    at_target = answer_distributions(model, processor, [with_target(s, current_and_target(s)[0]) for s in states])
    out = {"states": n, "target_swap_tv": float(0.5 * np.abs(base - swapped).sum(axis=1).mean()),
           "p_stop_at_target": float(at_target[:, STOP].mean()), "p_stop_elsewhere": float(base[:, STOP].mean()),
           "argmax_agreement_swap": float((base.argmax(1) == swapped.argmax(1)).mean())}
    if optimal is not None:
        if len(optimal) != n:
            raise ValueError(f"optimal: {len(optimal)} sets for {n} states")
        member = np.array([[answer in best for answer in CANDIDATE_RESPONSES] for best in optimal])
        out.update({"optimal_accuracy": float(member[np.arange(n), base.argmax(1)].mean()),
                    "optimal_mass": float((base * member).sum(axis=1).mean())})
    blocks = [history_block(s) for s in states]
    have = [i for i, b in enumerate(blocks) if b is not None]
    # another state's history for each state that has one, drawn among those with a different block
    pairs = []
    for i in have:
        donors = [j for j in have if blocks[j] != blocks[i]]
        if donors:
            pairs.append((i, donors[int(rng.integers(len(donors)))]))
    if pairs:
        idx = np.array([i for i, _ in pairs])
        moved = answer_distributions(model, processor, [with_history(states[i], blocks[j]) for i, j in pairs])
        out.update({"history_states": len(pairs),
                    "history_swap_tv": float(0.5 * np.abs(base[idx] - moved).sum(axis=1).mean()),
                    "argmax_agreement_history_swap": float((base[idx].argmax(1) == moved.argmax(1)).mean())})
    return out


# ------------------------------------------------------------------------------------------------ V-IRL


@torch.no_grad()
def decision_distributions(model: Any, processor: Any, conversations: list[list[dict]],
                           candidates: list[tuple[str, str]]) -> tuple[np.ndarray, torch.Tensor]:
    """For each conversation and its two candidate answers: the model's next-token distribution where the
    answers first differ, teacher forced on the first answer. Returns the two decision tokens'
    probabilities renormalised over the two, ``(n, 2)``, and the whole distribution, ``(n, vocab)``."""
    from spatialrl.models.encode import IGNORE_INDEX, encode_conversations

    model_type = model.config.model_type
    device = next(model.parameters()).device

    def answered(k: int) -> list[list[dict]]:
        return [[*conv, {"role": "assistant", "content": [{"type": "text", "text": c[k]}]}]
                for conv, c in zip(conversations, candidates, strict=True)]

    # both answers are encoded to find where they part; only the first goes through the model
    encoded = [encode_conversations(processor, answered(k), model_type=model_type) for k in (0, 1)]
    positions, tokens = [], []
    for row in range(len(conversations)):
        where = [torch.nonzero(e["labels"][row] != IGNORE_INDEX).flatten() for e in encoded]
        answer = [e["labels"][row, w] for e, w in zip(encoded, where, strict=True)]
        common = min(len(answer[0]), len(answer[1]))
        differ = torch.nonzero(answer[0][:common] != answer[1][:common]).flatten()
        if len(differ) == 0:
            raise DataError(f"probe state {row}: the two candidate answers tokenise alike up to {common} tokens")
        j = int(differ[0])
        positions.append(int(where[0][j]))
        tokens.append([int(answer[0][j]), int(answer[1][j])])
    batch = {k: v.to(device) for k, v in encoded[0].items() if k != "labels"}
    logits = model(**batch, use_cache=False).logits
    # the logits at position p - 1 predict the token at p (the prefix before p is the same in both answers)
    rows = logits[torch.arange(len(positions), device=device), torch.tensor(positions, device=device) - 1].float()
    logp = torch.log_softmax(rows, -1)
    pair = torch.softmax(logp.gather(1, torch.tensor(tokens, device=device)), -1)
    return pair.cpu().numpy(), logp.exp().cpu()


def virl_image_sensitivity(model: Any, processor: Any, states: list[Any], batch_size: int = 8) -> dict[str, Any]:
    """The V-IRL probe's numbers (module docstring) on :class:`~spatialrl.envs.virl.probe.ProbeState` s."""
    from spatialrl.envs.virl.probe import with_grid

    if len(states) < 1:
        raise DataError("virl probe: no states where the text cannot decide (more episodes: --set episodes=N)")
    own, swapped, vocab_tv = np.zeros((len(states), 2)), np.zeros((len(states), 2)), np.zeros(len(states))
    for start in range(0, len(states), batch_size):
        chunk = states[start:start + batch_size]
        answers = [s.answers for s in chunk]
        a, full_a = decision_distributions(model, processor, [s.conversation for s in chunk], answers)
        b, full_b = decision_distributions(model, processor, [with_grid(s.conversation, s.contrast_image)
                                                              for s in chunk], answers)
        own[start:start + len(chunk)], swapped[start:start + len(chunk)] = a, b
        vocab_tv[start:start + len(chunk)] = (0.5 * (full_a - full_b).abs().sum(-1)).numpy()

    def row(idx: np.ndarray) -> dict[str, float]:
        return {"states": int(len(idx)), "grid_swap_tv": float(0.5 * np.abs(own[idx] - swapped[idx]).sum(1).mean()),
                "vocab_swap_tv": float(vocab_tv[idx].mean()),
                "p_expert": float(own[idx, 0].mean()), "p_expert_swapped": float(swapped[idx, 0].mean()),
                "argmax_agreement_swap": float((own[idx].argmax(1) == swapped[idx].argmax(1)).mean())}

    kinds = np.array([s.kind for s in states])
    return {**row(np.arange(len(states))), "by_kind": {k: row(np.flatnonzero(kinds == k)) for k in sorted(set(kinds))}}


# ------------------------------------------------------------------------------------------- dispatch


@dataclass(frozen=True)
class Probe:
    """How ``spatialrl model probe`` probes one task: ``run(model, processor, data, split, options, n, seed)``."""

    default_split: str
    run: Callable[..., dict[str, Any]]


def _tvr(model: Any, processor: Any, data: str | Path, split: str, options: dict[str, Any], n: int,
         seed: int) -> dict[str, Any]:
    # the probe fixes the memory mode (AO: one current + target pair); only the image settings carry over
    # (and the history length: a model trained without the history is probed without it)
    # (and the frame layout: a model trained on joined frames is probed with them)
    opts = {k: v for k, v in options.items() if k in ("width", "height", "badges", "history_len", "frames")}
    states, optimal = labelled_probe_states(data, split, opts, n, seed)
    return image_sensitivity(model, processor, states, seed, optimal=optimal)


def _virl(model: Any, processor: Any, data: str | Path, split: str, options: dict[str, Any], n: int,
          seed: int) -> dict[str, Any]:
    from spatialrl.envs.virl.probe import probe_states as virl_states

    states = virl_states({**options, "data": str(data), "split": split}, n, seed)
    return virl_image_sensitivity(model, processor, states)


PROBES: dict[str, Probe] = {"tvr": Probe("eval", _tvr), "virl": Probe("in-dist", _virl)}


def probe_for(task: str) -> Probe:
    if task not in PROBES:
        raise DataError(f"image probe: no probe for task {task!r}; tasks with one: {sorted(PROBES)}")
    return PROBES[task]
