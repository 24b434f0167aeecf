"""Does a TVR model use its images? The image-sensitivity probe of issue "Built-in agents".

On held-out TVR states (the expert's, with some off-path noise) the model's distribution over the nine
answers ``Action: X`` is read by teacher forcing (softmax over the candidates' summed log-probs), then
the last user turn's *target* image is changed:

* ``target_swap_tv`` — mean total variation between the distribution with the state's own target and
  with another state's target: a model that matches views moves a lot (the issue asks ≥ 0.3); a model
  that reads only the text does not move (the 2026-12-02 models: ≤ 0.008);
* ``p_stop_at_target`` — mean P(Stop) when the target is replaced by the current view (it should be high);
* ``p_stop_elsewhere`` — mean P(Stop) on the states as they are, none of which is at the target (low).

The states come from ``spatialrl data sft`` machinery (same prompter and memory mode as evaluation), so
the probe sees exactly what the agent sees in ``spatialrl eval``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spatialrl.envs.tvr.env import CANDIDATE_RESPONSES
from spatialrl.errors import DataError

STOP = CANDIDATE_RESPONSES.index("Action: Stop")


def probe_states(bench: str | Path, split: str, options: dict[str, Any], n: int, seed: int = 0) -> list[list[dict]]:
    """Up to ``n`` held-out conversations (the last user turn holding the current and the target image)
    at states that are not the target, from noisy-expert episodes of ``split``."""
    from spatialrl.envs.registry import get_suite
    from spatialrl.train.data import SFTDataset, build_sft_dataset

    suite = get_suite("tvr")
    opts = {**suite.default_options, **options, "data": str(bench), "split": split, "memory": "ao"}
    with tempfile.TemporaryDirectory() as tmp:
        build_sft_dataset(suite, opts, Path(tmp) / "states", seed=seed, samples="step", progress=False,
                          expert_noise=0.3)
        data = SFTDataset(Path(tmp) / "states")
        rng = np.random.default_rng(seed)
        keep = [i for i in rng.permutation(len(data)).tolist()
                if data.rows[i]["messages"][-1]["content"][0]["text"] != "Action: Stop"][:n]
        states = [data[i]["messages"][:-1] for i in keep]
    if len(states) < 2:
        raise DataError(f"{bench}: split {split!r} gave {len(states)} probe states; need at least 2")
    return states


def _images(message: dict) -> list[int]:
    return [k for k, part in enumerate(message["content"]) if part["type"] == "image"]


def with_target(conversation: list[dict], image: np.ndarray) -> list[dict]:
    """The conversation with the last user turn's target (its last image) replaced by ``image``."""
    out = [dict(m) for m in conversation]
    last = out[-1]
    slots = _images(last)
    if len(slots) < 2:
        raise DataError("probe state: the last user turn has no current + target image pair")
    content = list(last["content"])
    content[slots[-1]] = {"type": "image", "image": image}
    out[-1] = {**last, "content": content}
    return out


def current_and_target(conversation: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    slots = _images(conversation[-1])
    parts = conversation[-1]["content"]
    return parts[slots[0]]["image"], parts[slots[-1]]["image"]


@torch.no_grad()
def answer_distributions(model: Any, processor: Any, conversations: list[list[dict]], batch_size: int = 16) -> np.ndarray:
    """(n, 9) probabilities of the nine answers, by teacher forcing each candidate."""
    from spatialrl.models.encode import IGNORE_INDEX, encode_conversations

    model_type = model.config.model_type
    device = next(model.parameters()).device
    pairs = [(i, c) for i in range(len(conversations)) for c in CANDIDATE_RESPONSES]
    scores = np.zeros(len(pairs))
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        convs = [[*conversations[i], {"role": "assistant", "content": [{"type": "text", "text": c}]}] for i, c in chunk]
        batch = {k: v.to(device) for k, v in encode_conversations(processor, convs, model_type=model_type).items()}
        labels = batch.pop("labels")
        logits = model(**batch, use_cache=False).logits[:, :-1].float()
        targets = labels[:, 1:]
        mask = targets != IGNORE_INDEX
        logp = torch.log_softmax(logits, -1).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        scores[start:start + len(chunk)] = (logp * mask).sum(-1).cpu().numpy()
    scores = scores.reshape(len(conversations), len(CANDIDATE_RESPONSES))
    scores -= scores.max(axis=1, keepdims=True)
    probs = np.exp(scores)
    return probs / probs.sum(axis=1, keepdims=True)


def image_sensitivity(model: Any, processor: Any, states: list[list[dict]], seed: int = 0) -> dict[str, float]:
    """The probe's three numbers (module docstring) on ``states``."""
    rng = np.random.default_rng(seed)
    n = len(states)
    other = (np.arange(n) + rng.integers(1, n, size=n)) % n  # another state's target for each state
    base = answer_distributions(model, processor, states)
    swapped = answer_distributions(model, processor, [with_target(s, current_and_target(states[j])[1])
                                                      for s, j in zip(states, other, strict=True)])
    at_target = answer_distributions(model, processor, [with_target(s, current_and_target(s)[0]) for s in states])
    return {"states": n, "target_swap_tv": float(0.5 * np.abs(base - swapped).sum(axis=1).mean()),
            "p_stop_at_target": float(at_target[:, STOP].mean()), "p_stop_elsewhere": float(base[:, STOP].mean()),
            "argmax_agreement_swap": float((base.argmax(1) == swapped.argmax(1)).mean())}
